//! Broadcasts: one job per worker, each run by its own worker, each admitted like any spawn.
//!
//! This module owns the per-worker *inboxes* of pinned jobs, the router that takes a pinned job
//! to its worker, [`BroadcastContext`], and the broadcast entry points ([`broadcast`],
//! [`spawn_broadcast`], [`ThreadPool::broadcast`], [`ThreadPool::spawn_broadcast`],
//! [`Scope::spawn_broadcast`]). It never admits anything itself and never bypasses the token
//! table: a broadcast is `num_threads` ordinary spawns (scope spawns for `broadcast` and
//! `Scope::spawn_broadcast`, detached spawns for `spawn_broadcast`) whose jobs are *pinned*.
//!
//! # Pinning
//!
//! A pinned job is a `HeapJob` admitted through [`HeapJob::admit_pinned`]: every push that its
//! admission makes (the spawner's own push, the help-first loop's, a granter's in
//! `start_granted`, the injector from a thread outside the pool) pushes a *router* instead of
//! the job, a small box with the job and the index of its worker. A router is an admitted job
//! like any other to the scheduler: whoever takes it runs it; on its own worker with an empty
//! deque it runs the job, else it moves to that worker's inbox and wakes that worker by index
//! (`Sleep::wake_worker`). A worker looks at its inbox right after its own deque and before the
//! injector and stealing, in every wait loop (`wait_until`, hence every admission wait once its
//! help-first loop has run dry, every `join`, `scope` and call wait) and in the main loop; its
//! sleep checks the inbox under its sleep flag, as it checks a latch, so no push is missed.
//!
//! A worker that stops (its pool was dropped) closes its inbox first: a router that reaches a
//! closed inbox runs its job where it is, so no job is stranded behind an exited thread (only
//! then does a pinned job run off its worker; its context still names its worker's index).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam_deque::{Injector, Steal};
use crossbeam_utils::CachePadded;

use crate::job::{HeapJob, JobRef};
use crate::pool::{current_registry, detached_job, install_in, ThreadPool};
use crate::registry::{Registry, WorkerThread};
use crate::scope::{scope_in_worker, Scope};
use crate::sync::{fence, AtomicBool, Ordering};

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
    /// of the worker the job is pinned to, which is the worker that runs it (unless its pool
    /// was dropped meanwhile; see [`ThreadPool::spawn_broadcast`]).
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
    install_in(current_registry(), |worker| broadcast_here(worker, &op))
}

/// Spawns `op` on every thread of the current worker's pool (else of the global pool), once on
/// each, as detached jobs. See [`ThreadPool::spawn_broadcast`], which this is on that pool.
///
/// **Admission**: one detached spawn per worker, each admitted like [`spawn`](crate::spawn)
/// (children of the calling job, else roots that wait for a pool token), in turn.
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
    spawn_broadcast_in(current_registry(), op);
}

impl ThreadPool {
    /// Executes `op` within every thread of this pool, once on each, and returns their results
    /// in the order of the threads' indices. `op` may borrow from the caller's stack.
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
    /// loan its predecessor returns. Unlike rayon, the jobs of two broadcasts (or of a
    /// broadcast and a spawn) are not ordered with each other: a job reaches its worker's inbox
    /// when it is admitted.
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
    /// like [`ThreadPool::spawn`]: a child of the current job (its token as a loan, else a pool
    /// token, else the call waits and helps) on a worker of this pool, a root that waits for a
    /// pool token on a thread outside every pool, a root queued without waiting from a job of
    /// another pool. Unlike rayon, which returns at once, the call returns once every job is
    /// admitted: with fewer tokens than threads it waits, inside a job, until enough of the
    /// first jobs have finished (that is the backpressure of `spawn`). Each job runs on its
    /// thread as for [`ThreadPool::broadcast`]; if the pool is dropped before a job reached its
    /// worker and that worker has stopped, the job runs on the worker that holds it instead
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

/// A scope type whose spawns a broadcast can pin: what [`spawn_broadcast_in_scope`] needs of it.
/// (`Scope` is one; a fifo scope gets its `spawn_broadcast` by implementing this.)
pub(crate) trait PinningScope<'scope>: Sync + Sized {
    /// The scope's pool.
    fn pool(&self) -> &Registry;
    /// An ordinary spawn of the scope, from any thread.
    fn spawn_plain<F: FnOnce(&Self) + Send + 'scope>(&self, f: F);
    /// A spawn of the scope pinned to worker `target`, from a worker of the scope's pool.
    fn spawn_pinned<F: FnOnce(&Self) + Send + 'scope>(&self, f: F, target: usize);
}

impl<'scope> PinningScope<'scope> for Scope<'scope> {
    fn pool(&self) -> &Registry {
        self.registry()
    }

    fn spawn_plain<F: FnOnce(&Self) + Send + 'scope>(&self, f: F) {
        self.spawn(f);
    }

    fn spawn_pinned<F: FnOnce(&Self) + Send + 'scope>(&self, f: F, target: usize) {
        self.spawn_to(f, Some(target));
    }
}

/// The core of `spawn_broadcast` on any scope type: one pinned spawn per worker from a worker of
/// the scope's pool, else one plain spawn that makes them from there.
pub(crate) fn spawn_broadcast_in_scope<'scope, S, BODY>(scope: &S, body: Arc<BODY>)
where
    S: PinningScope<'scope>,
    BODY: Fn(&S, BroadcastContext<'_>) + Send + Sync + 'scope,
{
    let registry = scope.pool();
    if registry.own(WorkerThread::current()).is_none() {
        scope.spawn_plain(move |s| spawn_broadcast_in_scope(s, body));
        return;
    }
    for index in 0..registry.num_threads() {
        let body = Arc::clone(&body);
        scope.spawn_pinned(
            move |s| body(s, BroadcastContext::new(index, s.pool())),
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
            let run = move |s: &Scope<'_>| *slot = Some(op(BroadcastContext::new(index, s.pool())));
            s.spawn_to(run, Some(index));
        }
    });
    let ran = |slot: Option<R>| slot.expect("every worker ran its broadcast job");
    slots.into_iter().map(ran).collect()
}

/// `spawn_broadcast` into `registry`, from any thread: one pinned detached spawn per worker.
fn spawn_broadcast_in<OP>(registry: &Registry, op: OP)
where
    OP: Fn(BroadcastContext<'_>) + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let here = WorkerThread::current();
    for index in 0..registry.num_threads() {
        let op = Arc::clone(&op);
        let job = detached_job(registry, here, move || {
            // SAFETY: jobs run only on workers, of the pool they were admitted into.
            let pool = unsafe { WorkerThread::current_unchecked() }.registry();
            op(BroadcastContext::new(index, pool))
        });
        admit_pinned(job, index, registry, here);
    }
}

/// Admits `job` (see [`HeapJob::admit_pinned`]) pinned to worker `target` of `registry`.
pub(crate) fn admit_pinned<F: FnOnce() + Send>(
    job: Box<HeapJob<F>>,
    target: usize,
    registry: &Registry,
    here: Option<&WorkerThread>,
) {
    job.admit_pinned(registry, here, |job| Pinned::route(job, target));
}

/// A router: an admitted job and the worker that must run it.
struct Pinned {
    job: JobRef,
    target: usize,
}

impl Pinned {
    /// The router of `job`, pinned to worker `target`.
    fn route(job: JobRef, target: usize) -> JobRef {
        let data = Box::into_raw(Box::new(Pinned { job, target }));
        // SAFETY: `run` is sound on any worker of the job's pool while the box lives, and the
        // box lives until the job runs (in `run`, which takes it back once).
        unsafe { JobRef::new(data as *const (), Pinned::run) }
    }

    /// Runs the job if this is its worker and its own deque is empty (or the worker has
    /// stopped); else moves the router to that worker's inbox, which the worker looks at once
    /// its deque is empty. Either way the job runs exactly once: the router is in one queue at
    /// a time, and only the run that runs the job frees it.
    unsafe fn run(data: *const ()) {
        let pinned = data as *mut Pinned;
        // SAFETY: jobs run only on worker threads.
        let worker = unsafe { WorkerThread::current_unchecked() };
        // SAFETY: the box is alive until the job runs, below.
        let target = unsafe { (*pinned).target };
        let inboxes = worker.registry().inboxes();
        let here = worker.index() == target && !worker.has_local_work();
        if !here && !inboxes.closed(target) {
            // SAFETY: the same router, moved on; `run` stays sound wherever it is taken.
            let router = unsafe { JobRef::new(data, Pinned::run) };
            inboxes.deliver(target, router, worker.registry());
            return;
        }
        // SAFETY: the box came from `Box::into_raw` in `route`; this is the one run that takes
        // it back (the router left every queue to get here).
        let Pinned { job, .. } = *unsafe { Box::from_raw(pinned) };
        // SAFETY: an admitted job of this pool, run once, here.
        unsafe { job.run() };
    }
}

/// One inbox per worker: the routers of the jobs pinned to it that reached it elsewhere.
pub struct Inboxes {
    boxes: Box<[CachePadded<Inbox>]>,
}

struct Inbox {
    jobs: Injector<JobRef>,
    /// Set once the worker stops looking (see the module doc).
    closed: AtomicBool,
}

impl Inboxes {
    /// Empty, open inboxes for `n` workers.
    pub fn new(n: usize) -> Self {
        let inbox = |_| {
            CachePadded::new(Inbox {
                jobs: Injector::new(),
                closed: AtomicBool::new(false),
            })
        };
        Inboxes {
            boxes: (0..n).map(inbox).collect(),
        }
    }

    /// The oldest router in worker `index`'s inbox. An empty inbox costs two plain loads (the
    /// steal of an empty injector costs a fence): every wait round looks.
    #[inline]
    pub fn take(&self, index: usize) -> Option<JobRef> {
        if !self.has(index) {
            return None;
        }
        self.take_slow(index)
    }

    #[cold]
    fn take_slow(&self, index: usize) -> Option<JobRef> {
        loop {
            match self.boxes[index].jobs.steal() {
                Steal::Success(job) => return Some(job),
                Steal::Empty => return None,
                Steal::Retry => {}
            }
        }
    }

    /// Whether worker `index`'s inbox holds a router (its loads are SeqCst: the sleeper's read
    /// of the handshake in `deliver`).
    #[inline]
    pub fn has(&self, index: usize) -> bool {
        !self.boxes[index].jobs.is_empty()
    }

    /// Worker `index` stops looking at its inbox; every router that reaches it from now on
    /// runs its job where it is.
    pub fn close(&self, index: usize) {
        // SeqCst store and fence: the worker's half of the handshake with `deliver` (store,
        // fence, then its last look at the inbox in the drain that follows).
        self.boxes[index].closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    fn closed(&self, index: usize) -> bool {
        // SeqCst: the deliverer's read of the handshake in `deliver`.
        self.boxes[index].closed.load(Ordering::SeqCst)
    }

    /// Puts `router` in worker `target`'s inbox and wakes that worker. If the worker has closed
    /// its inbox, runs what is left there here: after the push and a SeqCst fence either this
    /// thread sees the inbox closed, or the worker's look after closing it sees the router (and
    /// both may; the inbox hands each router to one of them).
    fn deliver(&self, target: usize, router: JobRef, registry: &Registry) {
        self.boxes[target].jobs.push(router);
        crate::chaos::point();
        // Fences (SeqCst) after the push: a sleeping worker sees it under its flag, or is woken.
        registry.sleep().wake_worker(target);
        if self.closed(target) {
            while let Some(router) = self.take(target) {
                // SAFETY: an admitted job's router, taken out of the inbox once; it runs its
                // job here since the inbox is closed.
                unsafe { router.run() };
            }
        }
    }
}
