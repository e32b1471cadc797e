//! FIFO scopes, in-place scopes and detached fifo spawns: rayon-core's `scope_fifo`,
//! `in_place_scope`, `in_place_scope_fifo` and `spawn_fifo`.
//!
//! This module owns where these calls land and what their jobs borrow; it adds no admission
//! rule of its own. A [`ScopeFifo`] is a [`Scope`] plus one set of fifo lanes per worker (see
//! `fifo`): every job it spawns goes through the scope's own spawn path (`Scope::spawn_job`),
//! so it is counted, admitted, deferred and its panic kept exactly as a `Scope::spawn`; only
//! where an admitted job waits to run differs. An in-place scope is an ordinary scope whose
//! owner, the calling thread, may be no worker of the scope's pool (a plain thread parks at the
//! scope's end; another pool's worker runs its own pool's jobs). It never waits for a token of
//! a pool while the waiting thread could hold a token of another one (design §2.3, §4.5).

use crate::api::pool::{
    detached_job, from_outside_jobs, in_current_pool, spawn_from_here, ThreadPool,
};
use crate::api::scope::{run_scope, Order, Scope, ScopeHandle};
use crate::base::sync::Arc;
use crate::worker::borrowed;
use crate::worker::fifo_lanes::Lanes;
use crate::worker::registry::Registry;
use crate::worker::routing;
use crate::worker::thread::WorkerThread;

/// A scope whose jobs, spawned with [`ScopeFifo::spawn_fifo`], run in the order they were
/// spawned on each worker thread (rayon-core's `ScopeFifo`).
///
/// Made by [`scope_fifo`], [`in_place_scope_fifo`] or [`ThreadPool::scope_fifo`] /
/// [`ThreadPool::in_place_scope_fifo`]. Every job spawned in it has finished when the scope call
/// returns; the first panic of the body or of a job is raised again then.
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
/// let order = std::sync::Mutex::new(Vec::new());
/// pool.scope_fifo(|s| {
///     for i in 0..5 {
///         let order = &order;
///         s.spawn_fifo(move |_| order.lock().unwrap().push(i));
///     }
/// });
/// assert_eq!(order.into_inner().unwrap(), [0, 1, 2, 3, 4]); // one thread: spawn order
/// ```
pub struct ScopeFifo<'scope> {
    base: Scope<'scope>,
    /// One worker's lanes each, indexed by worker (see `fifo`).
    lanes: Box<[Lanes]>,
}

impl<'scope> ScopeHandle<'scope> for ScopeFifo<'scope> {
    fn base(&self) -> &Scope<'scope> {
        &self.base
    }
}

impl<'scope> ScopeFifo<'scope> {
    /// A fifo scope of `registry` owned by the calling thread (`here`: its worker state).
    fn new(registry: Arc<Registry>, here: Option<&WorkerThread>) -> Self {
        let lanes = Lanes::per_worker(registry.num_threads());
        ScopeFifo {
            base: Scope::new(registry, here),
            lanes,
        }
    }

    /// Spawns `f` as a child job of the job running on the calling thread, to run after the
    /// jobs this thread spawned in this scope before it (rayon-core's `ScopeFifo::spawn_fifo`).
    ///
    /// **Admission rule**: exactly [`Scope::spawn`]'s. From a worker of the scope's pool, `f`
    /// runs on its parent's token if the parent is not lending it, else on a free pool token;
    /// else the call waits, running other jobs, until `f` is admitted (backpressure). Once
    /// admitted, `f` waits in the calling worker's lane of this scope, and each job the worker's
    /// deque hands out for this lane runs the lane's oldest: so the fifo spawns of one thread
    /// run in spawn order relative to each other, as in rayon (on a one-thread pool strictly;
    /// other threads may steal in between). Where it differs from rayon: each spawning job has
    /// a lane of its own (rayon shares one FIFO per thread), so that its spawns keep their order
    /// even when an admission wait runs older jobs in between; two jobs that alternate fifo
    /// spawns on one thread (only possible through helping) interleave by the deque. A spawn
    /// made inside another fifo spawn's admission wait never queues behind that waiting job.
    ///
    /// From a thread that is not a worker of the scope's pool the call is [`Scope::spawn`]'s
    /// (never waits, or, for the owner of an in-place scope, see [`in_place_scope`]), and no
    /// order is promised, as rayon promises none for its injected jobs.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let count = AtomicUsize::new(0);
    /// treepool::scope_fifo(|s| {
    ///     s.spawn_fifo(|s| {
    ///         count.fetch_add(1, Ordering::Relaxed);
    ///         s.spawn_fifo(|_| {
    ///             count.fetch_add(1, Ordering::Relaxed);
    ///         });
    ///     });
    /// });
    /// assert_eq!(count.into_inner(), 2);
    /// ```
    pub fn spawn_fifo<F>(&self, f: F)
    where
        F: FnOnce(&ScopeFifo<'scope>) + Send + 'scope,
    {
        self.base.spawn_job(self, f, Order::Fifo(&self.lanes));
    }
}

/// A scope of `registry` whose body runs on the calling thread.
fn in_place_in<'scope, OP, R>(registry: &Arc<Registry>, op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R,
{
    on_caller(registry, |here| {
        run_scope(&Scope::new(registry.clone(), here), here, op)
    })
}

/// A fifo scope of `registry` whose body runs on the calling thread.
fn in_place_fifo_in<'scope, OP, R>(registry: &Arc<Registry>, op: OP) -> R
where
    OP: FnOnce(&ScopeFifo<'scope>) -> R,
{
    on_caller(registry, |here| {
        run_scope(&ScopeFifo::new(registry.clone(), here), here, op)
    })
}

/// Runs `f` with the calling thread's worker state, as an in-place scope of `registry` sees it:
/// the worker it is, if any; else, on the builder's thread of a `use_current_thread` pool that
/// is `registry` (outside a call into it), that thread entered as the pool's worker 0 for the
/// call, as `install` enters it (the scope then helps with the pool's work while it waits, as
/// rayon's does there: it may be the only thread that can run the scope's jobs); else none.
fn on_caller<R>(registry: &Registry, f: impl FnOnce(Option<&WorkerThread>) -> R) -> R {
    borrowed::with_here(Some(registry.id()), f)
}

/// Spawns a detached fifo job into `registry` from the calling thread.
fn spawn_fifo_in<F: FnOnce() + Send + 'static>(registry: &Registry, f: F) {
    let here = WorkerThread::current();
    let job = detached_job(registry, here, f);
    match registry.own(here) {
        Some(worker) => routing::admit_detached(job, worker),
        None => job.admit(registry, here),
    }
}

/// Creates a fifo scope on the current worker's pool (else the global pool, as a root job that
/// waits for a pool token) and runs `op` in it; returns once `op` and every job spawned in the
/// scope have finished (rayon-core's `scope_fifo`). A panic in any of them is raised again then.
///
/// **Admission rule**: as [`scope`](crate::scope): on a worker the body runs inline in the
/// current job (it borrows nothing); its spawns are admitted as [`ScopeFifo::spawn_fifo`] says.
pub fn scope_fifo<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&ScopeFifo<'scope>) -> R + Send,
    R: Send,
{
    match WorkerThread::current() {
        Some(worker) if !worker.current_ptr().is_null() => in_place_fifo_in(worker.registry(), op),
        _ => from_outside_jobs(|| scope_fifo(op)),
    }
}

/// Creates a scope on the current worker's pool (else the global pool) whose body runs on the
/// **calling thread**, whatever it is, and returns once the body and every job spawned in the
/// scope have finished (rayon-core's `in_place_scope`). A panic in any of them is raised again
/// then.
///
/// **Admission rule**: the body is no job and takes no token. On a worker of the pool it runs
/// inline in the current job, like [`scope`](crate::scope). On a thread outside every pool its
/// spawns are root jobs that wait (the thread parks) for a pool token: the thread holds none, so
/// this wait is the backpressure of a root `spawn`; the scope's end parks until the jobs are done.
/// On the builder's thread of a pool built with
/// [`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread), outside a call, the
/// thread is entered as worker 0 for the scope: its spawns are roots that wait helping, and
/// the scope's end helps too (it may be the only thread that can run them). A spawn from any
/// other thread follows [`Scope::spawn`].
///
/// ```
/// let caller = std::thread::current().id();
/// let mut hits = [0; 3];
/// treepool::in_place_scope(|s| {
///     assert_eq!(std::thread::current().id(), caller); // the body runs here
///     for hit in hits.iter_mut() {
///         s.spawn(move |_| *hit += 1);
///     }
/// });
/// assert_eq!(hits, [1, 1, 1]);
/// ```
pub fn in_place_scope<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R,
{
    in_current_pool(|registry| in_place_in(registry, op))
}

/// [`in_place_scope`] with a [`ScopeFifo`] (rayon-core's `in_place_scope_fifo`): the body runs on
/// the calling thread; spawns from the pool's workers run in per-thread spawn order.
///
/// **Admission rule**: as [`in_place_scope`] and [`ScopeFifo::spawn_fifo`].
pub fn in_place_scope_fifo<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&ScopeFifo<'scope>) -> R,
{
    in_current_pool(|registry| in_place_fifo_in(registry, op))
}

/// Spawns a detached job on the current worker's pool (else the global pool), to run after the
/// fifo jobs the calling thread spawned before it (rayon-core's `spawn_fifo`).
///
/// **Admission rule**: as [`spawn`](crate::spawn): a child of the current job (its token as a
/// loan, else a pool token), returning once admitted (waiting, and helping, meanwhile); outside
/// the pool a root that waits for a pool token. From a worker, the admitted job waits in that
/// worker's lanes for detached fifo jobs: the fifo spawns of one job run in spawn order (see
/// [`ScopeFifo::spawn_fifo`] for how that differs from rayon's per-thread FIFO). From a thread
/// that is not a worker of the pool no order is promised.
///
/// ```
/// let (tx, rx) = std::sync::mpsc::channel();
/// treepool::spawn_fifo(move || tx.send(7).unwrap());
/// assert_eq!(rx.recv().unwrap(), 7);
/// ```
pub fn spawn_fifo<F: FnOnce() + Send + 'static>(f: F) {
    spawn_from_here(None, f, spawn_fifo_in);
}

impl ThreadPool {
    /// [`scope_fifo`] in this pool: the body runs as [`ThreadPool::install`] runs `op` (inline
    /// on this pool's workers; else a root job, on a pool token from a plain thread, on the
    /// caller's credit from another pool's job).
    pub fn scope_fifo<'scope, OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&ScopeFifo<'scope>) -> R + Send,
        R: Send,
    {
        self.install(|| scope_fifo(op))
    }

    /// A scope of this pool whose body runs on the **calling thread** (rayon-core's
    /// `ThreadPool::in_place_scope`); returns once the body and every job spawned in the scope
    /// have finished.
    ///
    /// **Admission rule**: the body takes no token. On a worker of this pool it runs inline in
    /// the current job. On a thread outside every pool its spawns are roots that wait (park) for
    /// a pool token. On a worker of *another* pool (inside one of its jobs, which may hold that
    /// pool's token) the body's spawns never wait: each starts at once on a free pool token or
    /// is queued for the next one to free (like [`ThreadPool::spawn`] from another pool), and
    /// the scope's end runs the caller's own pool's jobs while it waits. Spawns from any other
    /// thread follow [`Scope::spawn`].
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).max_inflight(1).build().unwrap();
    /// let caller = std::thread::current().id();
    /// let mut parts = vec![0; 4];
    /// pool.in_place_scope(|s| {
    ///     assert_eq!(std::thread::current().id(), caller);
    ///     for (i, part) in parts.iter_mut().enumerate() {
    ///         s.spawn(move |_| *part = i * 2);
    ///     }
    /// });
    /// assert_eq!(parts, [0, 2, 4, 6]);
    /// assert_eq!(pool.stats().inflight, 0);
    /// ```
    pub fn in_place_scope<'scope, OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&Scope<'scope>) -> R,
    {
        in_place_in(self.registry(), op)
    }

    /// [`ThreadPool::in_place_scope`] with a [`ScopeFifo`] (rayon-core's
    /// `ThreadPool::in_place_scope_fifo`).
    ///
    /// **Admission rule**: as [`ThreadPool::in_place_scope`] and [`ScopeFifo::spawn_fifo`].
    pub fn in_place_scope_fifo<'scope, OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&ScopeFifo<'scope>) -> R,
    {
        in_place_fifo_in(self.registry(), op)
    }

    /// Spawns a detached job in this pool, to run after the fifo jobs the calling worker
    /// spawned before it (rayon-core's `ThreadPool::spawn_fifo`).
    ///
    /// **Admission rule**: as [`ThreadPool::spawn`] (a child of the current job, else a root; a
    /// call from another pool's job never waits, and is queued if no token is free), with the
    /// order of [`spawn_fifo`] for spawns from this pool's workers.
    pub fn spawn_fifo<F: FnOnce() + Send + 'static>(&self, f: F) {
        spawn_from_here(Some(self.registry()), f, spawn_fifo_in);
    }
}
