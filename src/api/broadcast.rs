//! Broadcasts: one job per worker, each run by its own worker, each admitted like any spawn.
//!
//! This module owns [`BroadcastContext`] and the broadcast entry points ([`broadcast`],
//! [`spawn_broadcast`], [`ThreadPool::broadcast`], [`ThreadPool::spawn_broadcast`],
//! [`Scope::spawn_broadcast`]). It never admits anything itself and never bypasses the token
//! table: a broadcast is `num_threads` ordinary spawns (scope spawns for `broadcast` and
//! `Scope::spawn_broadcast`, detached spawns for `spawn_broadcast`) whose jobs are *pinned*.
//!
//! How a pinned job reaches its worker is `routing`'s; where it waits there, `inbox`'s.

use std::fmt;
use std::marker::PhantomData;

use crate::api::pool::{detached_job, in_current_pool, install_in, ThreadPool};
use crate::api::scope::{scope_in_worker, Order, Scope, ScopeHandle};
use crate::api::scope_fifo::ScopeFifo;
use crate::base::sync::Arc;
use crate::worker::registry::Registry;
use crate::worker::routing::admit_pinned;
use crate::worker::thread::WorkerThread;

/// Provides context to a closure called by a broadcast: which worker runs it, and how many do.
///
/// Like rayon's, it is neither `Send` nor `Sync`: it describes the thread it was made on.
pub struct BroadcastContext<'a> {
    index: usize,
    num_threads: usize,
    pool: usize,
    _marker: PhantomData<&'a mut dyn Fn()>,
}

impl BroadcastContext<'_> {
    fn new(index: usize, registry: &Registry) -> Self {
        BroadcastContext {
            index,
            num_threads: registry.num_threads(),
            pool: registry.id(),
            _marker: PhantomData,
        }
    }

    /// Our index amongst the broadcast threads (ranges from `0..self.num_threads()`): the index
    /// of the worker the job is pinned to, which is the worker that runs it, with two
    /// exceptions: a job pinned to worker 0 of a pool built with
    /// [`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread) that reaches it
    /// while the builder's thread is outside every call into the pool runs on another worker
    /// (rayon's waits for the thread to call in; treepool never holds a token for a thread
    /// that may not come back); and a job whose pool was dropped meanwhile may run on the
    /// worker that holds it (see [`ThreadPool::spawn_broadcast`]). Each index is still given
    /// to exactly one job of the broadcast.
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The number of threads receiving the broadcast in the thread pool: all its workers.
    #[inline]
    pub fn num_threads(&self) -> usize {
        self.num_threads
    }
}

impl fmt::Debug for BroadcastContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BroadcastContext")
            .field("index", &self.index)
            .field("num_threads", &self.num_threads)
            .field("pool_id", &self.pool)
            .finish()
    }
}

/// Executes `op` within every thread of the current worker's pool (else of the global pool),
/// once on each, and returns their results in the order of the threads' indices. See
/// [`ThreadPool::broadcast`], which this is on that pool.
///
/// **Admission**: one scope spawn per worker, children of the calling job (its token as a loan,
/// else a pool token, else the call waits); outside any pool, of one root job of the global pool
/// that waits for a pool token.
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
/// let indices = pool.install(|| treepool::broadcast(|ctx| ctx.index()));
/// assert_eq!(indices, [0, 1, 2]);
/// ```
pub fn broadcast<OP, R>(op: OP) -> Vec<R>
where
    OP: Fn(BroadcastContext<'_>) -> R + Sync,
    R: Send,
{
    in_current_pool(|registry| install_in(registry, |worker| broadcast_here(worker, &op)))
}

/// Spawns `op` on every thread of the current worker's pool (else of the global pool), once on
/// each, as detached jobs. See [`ThreadPool::spawn_broadcast`], which this is on that pool.
///
/// **Admission**: one detached spawn per worker, each admitted like [`spawn`](crate::spawn)
/// (children of the calling job, its token as a loan, else a pool token, else the call waits),
/// in turn; outside any pool, children of one root job of the global pool that waits for a
/// pool token.
///
/// ```
/// let (tx, rx) = std::sync::mpsc::channel();
/// treepool::spawn_broadcast(move |ctx| tx.send(ctx.index()).unwrap());
/// let mut seen: Vec<usize> = rx.iter().take(treepool::current_num_threads()).collect();
/// seen.sort();
/// assert!(seen.into_iter().eq(0..treepool::current_num_threads()));
/// ```
pub fn spawn_broadcast<OP>(op: OP)
where
    OP: Fn(BroadcastContext<'_>) + Send + Sync + 'static,
{
    in_current_pool(|registry| spawn_broadcast_in(registry, op));
}

impl ThreadPool {
    /// Executes `op` within every thread of this pool, once on each, and returns their results
    /// in the order of the threads' indices. `op` may borrow from the caller's stack. (One
    /// exception to "on each": with [`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread),
    /// worker 0's job runs on another worker if the builder's thread is outside every call
    /// into the pool when the job reaches it; see [`BroadcastContext::index`].)
    ///
    /// Each thread runs its call after it has exhausted its own deque, before it takes work
    /// from the injector or steals from other workers (as in rayon), also while it waits
    /// (helping) in a `join`, a scope or an admission.
    ///
    /// **Admission.** The call is a [`ThreadPool::scope`] whose body spawns one job per worker,
    /// job *i* pinned to worker *i*: each is a scope spawn, admitted like [`Scope::spawn`] (the
    /// calling job's token as a loan if it is not lent, else a pool token, else the call waits
    /// and helps). So where the caller's job runs depends on the caller as for `scope`: inline
    /// in the current job on a worker of this pool; a root job on a pool token from a thread
    /// outside every pool; a root job on its caller's *credit* from a job of another pool
    /// (which never waits for a token of this pool). With fewer tokens than threads the jobs
    /// run one after another, each on its own worker: with `max_inflight(1)` each takes the
    /// loan its predecessor returns.
    ///
    /// **Order.** As in rayon, each thread runs the jobs of successive broadcasts in call
    /// order: every call of this family ([`ThreadPool::broadcast`],
    /// [`ThreadPool::spawn_broadcast`], [`Scope::spawn_broadcast`] from a worker of the scope's
    /// pool) returns only once each of its jobs is in its thread's queue of broadcast jobs (a
    /// FIFO), so on each thread the job of a call made after another call returned starts after
    /// that other call's job did.
    /// In particular, when a `broadcast` made after a `spawn_broadcast` returns, every job of the
    /// `spawn_broadcast` has started (and finished, unless it waits inside: a `join`, a scope or
    /// a call, whose wait may run the later job). Broadcasts and plain spawns are not ordered
    /// with each other, beyond the rule above that a thread's own deque comes first.
    ///
    /// # Panics
    ///
    /// If `op` panics on one or more threads, exactly one panic (the first) is raised again
    /// here, once every thread has completed (or panicked) its own call; the other payloads
    /// are dropped.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(5).max_inflight(1).build().unwrap();
    /// let squares: Vec<usize> = pool.broadcast(|ctx| ctx.index() * ctx.index());
    /// assert_eq!(squares, [0, 1, 4, 9, 16]);
    /// let count = AtomicUsize::new(0); // the closure may borrow from the stack
    /// pool.broadcast(|_| count.fetch_add(1, Ordering::Relaxed));
    /// assert_eq!(count.into_inner(), 5);
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// pool.spawn_broadcast(move |ctx| tx.send(ctx.index()).unwrap());
    /// pool.broadcast(|_| {}); // after the spawned job, on each thread
    /// assert_eq!(rx.try_iter().count(), 5);
    /// ```
    pub fn broadcast<OP, R>(&self, op: OP) -> Vec<R>
    where
        OP: Fn(BroadcastContext<'_>) -> R + Sync,
        R: Send,
    {
        install_in(self.registry(), |worker| broadcast_here(worker, &op))
    }

    /// Spawns `op` on every thread of this pool, once on each, as detached jobs: it may outlive
    /// the caller's frame, so it cannot borrow from the stack. A panic in `op` goes to the
    /// pool's panic handler (once per panicking thread), or is printed.
    ///
    /// **Admission.** One detached spawn per worker, job *i* pinned to worker *i*, each admitted
    /// like a [`ThreadPool::spawn`] made on a worker of this pool: a child of the current job
    /// (its token as a loan, else a pool token, else the call waits and helps). The spawns are
    /// made where `broadcast` makes its own: inline in the current job on a worker of this
    /// pool; in one root job on a pool token (the thread parks for it) from a thread outside
    /// every pool; in one root job on the caller's *credit* from a job of another pool (which
    /// waits for that root, never for a token of this pool). The jobs are that root's detached
    /// children: they may outlive it. Unlike rayon, which returns at once, the call returns once
    /// every job is admitted and in its thread's queue: with fewer tokens than threads it waits
    /// until enough of the first jobs have finished (that is the backpressure of `spawn`). Each
    /// job runs on its thread as for [`ThreadPool::broadcast`], in call order with the other
    /// broadcasts (see there); if the pool is dropped before a job reached its worker and that
    /// worker has stopped, the job runs on the worker that holds it instead
    /// ([`BroadcastContext::index`] still names the one it was meant for).
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// pool.spawn_broadcast(move |ctx| tx.send(ctx.index()).unwrap());
    /// let mut seen: Vec<usize> = rx.iter().collect(); // every sender dropped: all ran
    /// seen.sort();
    /// assert_eq!(seen, [0, 1, 2]);
    /// ```
    pub fn spawn_broadcast<OP>(&self, op: OP)
    where
        OP: Fn(BroadcastContext<'_>) + Send + Sync + 'static,
    {
        spawn_broadcast_in(self.registry(), op);
    }
}

impl<'scope> Scope<'scope> {
    /// Spawns `body` into every thread of the pool, in this scope: it runs once on each thread
    /// before the scope ends, and receives the scope and a [`BroadcastContext`]. `body` may
    /// borrow what the scope may.
    ///
    /// **Admission.** From a worker of the scope's pool, one [`Scope::spawn`] per worker, job
    /// *i* pinned to worker *i*, each admitted like any spawn of the scope (the calling job's
    /// token as a loan, else a pool token, else the call waits and helps), so the call returns
    /// once all are admitted. From any other thread (a job of another pool, a plain thread
    /// inside the scope) it first spawns one ordinary job of the scope
    /// ([`Scope::spawn`]'s rules from there: never waiting), which makes those spawns from a
    /// worker of the pool. A panic in `body` is raised again by the scope, like a spawn's.
    ///
    /// **Order.** From a worker of the scope's pool, the call returns once each job is in its
    /// thread's queue, so its jobs are ordered with the other broadcasts as
    /// [`ThreadPool::broadcast`] says; from any other thread they are made later, by that one
    /// spawned job, and ordered with nothing the caller does next.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(3).max_inflight(1).build().unwrap();
    /// let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
    /// pool.scope(|s| s.spawn_broadcast(|_, ctx| {
    ///     hits[ctx.index()].fetch_add(1, Ordering::Relaxed);
    /// }));
    /// assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    /// ```
    pub fn spawn_broadcast<BODY>(&self, body: BODY)
    where
        BODY: Fn(&Scope<'scope>, BroadcastContext<'_>) + Send + Sync + 'scope,
    {
        spawn_broadcast_in_scope(self, Arc::new(body));
    }
}

/// A scope type whose spawns a broadcast can pin: what [`spawn_broadcast_in_scope`] needs of it
/// (`Scope` and `ScopeFifo`).
pub(crate) trait PinningScope<'scope>: ScopeHandle<'scope> + Sized + 'scope {
    /// An ordinary spawn of the scope, from any thread.
    fn spawn_plain<F: FnOnce(&Self) + Send + 'scope>(&self, f: F);

    /// A spawn of the scope pinned to worker `target`, from a worker of the scope's pool.
    fn spawn_pinned<F: FnOnce(&Self) + Send + 'scope>(&self, f: F, target: usize) {
        self.base().spawn_job(self, f, Order::Pinned(target));
    }
}

impl<'scope> PinningScope<'scope> for Scope<'scope> {
    fn spawn_plain<F: FnOnce(&Self) + Send + 'scope>(&self, f: F) {
        self.spawn(f);
    }
}

impl<'scope> PinningScope<'scope> for ScopeFifo<'scope> {
    fn spawn_plain<F: FnOnce(&Self) + Send + 'scope>(&self, f: F) {
        self.spawn_fifo(f);
    }
}

impl<'scope> ScopeFifo<'scope> {
    /// [`Scope::spawn_broadcast`] in a fifo scope: `body` runs once on each thread of the pool
    /// before the scope ends, and receives the scope and a [`BroadcastContext`].
    ///
    /// **Admission.** As [`Scope::spawn_broadcast`]: from a worker of the scope's pool, one spawn
    /// of the scope per worker, job *i* pinned to worker *i*, each admitted like any spawn (the
    /// calling job's token as a loan, else a pool token, else the call waits and helps); from
    /// any other thread one [`ScopeFifo::spawn_fifo`] whose job makes them. A pinned job goes
    /// to its worker's inbox, not to a fifo lane: each inbox is first in, first out already.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let hits = AtomicUsize::new(0);
    /// pool.scope_fifo(|s| s.spawn_broadcast(|_, _| {
    ///     hits.fetch_add(1, Ordering::Relaxed);
    /// }));
    /// assert_eq!(hits.into_inner(), 2);
    /// ```
    pub fn spawn_broadcast<BODY>(&self, body: BODY)
    where
        BODY: Fn(&ScopeFifo<'scope>, BroadcastContext<'_>) + Send + Sync + 'scope,
    {
        spawn_broadcast_in_scope(self, Arc::new(body));
    }
}

/// The core of `spawn_broadcast` on any scope type: one pinned spawn per worker from a worker of
/// the scope's pool, else one plain spawn that makes them from there.
pub(crate) fn spawn_broadcast_in_scope<'scope, S, BODY>(scope: &S, body: Arc<BODY>)
where
    S: PinningScope<'scope>,
    BODY: Fn(&S, BroadcastContext<'_>) + Send + Sync + 'scope,
{
    let registry = scope.base().registry();
    if registry.own(WorkerThread::current()).is_none() {
        scope.spawn_plain(move |s| spawn_broadcast_in_scope(s, body));
        return;
    }
    for index in 0..registry.num_threads() {
        let body = Arc::clone(&body);
        scope.spawn_pinned(
            move |s| body(s, BroadcastContext::new(index, s.base().registry())),
            index,
        );
    }
}

/// `broadcast` on `worker`, a worker of the target pool: a scope of pinned spawns, each writing
/// its own slot.
fn broadcast_here<OP, R>(worker: &WorkerThread, op: &OP) -> Vec<R>
where
    OP: Fn(BroadcastContext<'_>) -> R + Sync,
    R: Send,
{
    let mut slots: Vec<Option<R>> = (0..worker.registry().num_threads()).map(|_| None).collect();
    scope_in_worker(worker, |s| {
        for (index, slot) in slots.iter_mut().enumerate() {
            let run =
                move |s: &Scope<'_>| *slot = Some(op(BroadcastContext::new(index, s.registry())));
            s.spawn_job(s, run, Order::Pinned(index));
        }
    });
    let ran = |slot: Option<R>| slot.expect("every worker ran its broadcast job");
    slots.into_iter().map(ran).collect()
}

/// `spawn_broadcast` into `registry`, from any thread: one pinned detached spawn per worker, made
/// from a worker of `registry` (inline in the current job there, else in a root job, as
/// `broadcast` does), so that each job is in its inbox when the call returns.
fn spawn_broadcast_in<OP>(registry: &Arc<Registry>, op: OP)
where
    OP: Fn(BroadcastContext<'_>) + Send + Sync + 'static,
{
    let op = Arc::new(op);
    install_in(registry, |worker| {
        for index in 0..worker.registry().num_threads() {
            let op = Arc::clone(&op);
            let job = detached_job(worker.registry(), Some(worker), move || {
                // SAFETY: jobs run only on workers, of the pool they were admitted into.
                let pool = unsafe { WorkerThread::current_unchecked() }.registry();
                op(BroadcastContext::new(index, pool))
            });
            admit_pinned(job, index, worker);
        }
    });
}
