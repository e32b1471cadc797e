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
//! A pinned job is a `HeapJob` spawned on a worker of its pool and admitted through
//! [`HeapJob::admit_via`]: every push that its admission makes (the spawner's own push, the
//! help-first loop's, a publication's, a granter's in `start_granted`) pushes a *router* instead
//! of the job, a small box with the job, the index of its worker and a latch of the spawner's.
//! A router is an admitted job like any other to the scheduler: whoever takes it runs it, and
//! its run puts the job in its worker's inbox (a FIFO), wakes that worker by index
//! (`Sleep::wake_worker`) and sets the latch. The spawn ([`admit_pinned`]) returns only once
//! that latch is set: it runs the router itself when the router is the top of its own deque
//! (admitted on the spot or in its help-first loop), else it waits, helping, for whoever runs
//! it (a granter on another thread). So a pinned job is in its inbox when its spawn returns,
//! and a worker runs the jobs pinned to it in the order of their spawns.
//!
//! A worker looks at its inbox right after its own deque and before the injector and stealing,
//! in every wait loop (`wait_until`, hence every admission wait once its help-first loop has
//! run dry, every `join`, `scope` and call wait) and in the main loop; its sleep checks the
//! inbox under its sleep flag, as it checks a latch, so no push is missed.
//!
//! A worker that stops (its pool was dropped) closes its inbox first: a job that reaches a
//! closed inbox runs where its router ran, so no job is stranded behind an exited thread (only
//! then does a pinned job run off its worker; its context still names its worker's index).

use std::fmt;
use std::marker::PhantomData;

use crossbeam_deque::{Injector, Steal};
use crossbeam_utils::CachePadded;

use crate::job::{HeapJob, JobRef};
use crate::latch::{Latch, WakeTarget};
use crate::pool::{current_registry, detached_job, install_in, ThreadPool};
use crate::registry::{Registry, WorkerThread};
use crate::scope::{scope_in_worker, Order, Scope, ScopeHandle};
use crate::scope_fifo::ScopeFifo;
use crate::sync::{fence, Arc, AtomicBool, Ordering};

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
    install_in(&current_registry(), |worker| broadcast_here(worker, &op))
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
    spawn_broadcast_in(&current_registry(), op);
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

/// Admits `job` (see [`HeapJob::admit_via`]), a job of `worker`'s pool spawned on `worker`,
/// pinned to worker `target`; returns once the job is in `target`'s inbox (or, if `target` has
/// stopped, has started), so the jobs of successive pinned spawns reach an inbox in spawn order.
///
/// Admitted on the spot or in the help-first loop, the router is the top of this worker's own
/// deque: it is taken back and run here at once, which delivers it. Else (granted by another
/// thread, which pushed it where that thread runs, or stolen in between) this worker waits,
/// helping, until whoever runs it has delivered it: a router's run never waits (see
/// [`Pinned::run`]), and this wait can take it from any queue itself.
pub(crate) fn admit_pinned<F: FnOnce() + Send>(
    job: Box<HeapJob<F>>,
    target: usize,
    worker: &WorkerThread,
) {
    let arrived = Latch::new(WakeTarget::Worker(worker.index()));
    let mut router = None;
    job.admit_via(worker.registry(), Some(worker), true, |job| {
        let routed = Pinned::route(job, target, &arrived);
        router = Some(routed);
        routed
    });
    // A job popped is run or pushed back: pushing the top back restores the deque. (Only this
    // thread pushes to its deque, so a top equal to the router is the router, or, if a thief
    // ran and freed it meanwhile, another job at its address, which this thread may run as any
    // wait would.)
    if let Some(top) = worker.pop() {
        if Some(top) == router {
            // SAFETY: an admitted job of this pool taken out of the deque, run once, here.
            unsafe { top.run() };
        } else {
            worker.push(top);
        }
    }
    if !arrived.probe() {
        worker.wait_until(|| arrived.probe());
    }
}

/// A router: an admitted job, the worker that must run it, and the latch its spawner waits on
/// until the job is in that worker's inbox.
struct Pinned {
    job: JobRef,
    target: usize,
    arrived: *const Latch,
}

impl Pinned {
    /// The router of `job`, pinned to worker `target`; its run sets `arrived`.
    fn route(job: JobRef, target: usize, arrived: &Latch) -> JobRef {
        let data = Box::into_raw(Box::new(Pinned {
            job,
            target,
            arrived,
        }));
        // SAFETY: `run` is sound on any worker of the job's pool while the box lives, and the
        // box lives until its one run (which takes it back).
        unsafe { JobRef::new(data as *const (), Pinned::run) }
    }

    /// Delivers the job to its worker's inbox, where that worker takes it once its own deque is
    /// empty, and sets the spawner's latch. Never waits: the job itself runs here only if its
    /// worker has stopped, after the latch is set. The router runs once (it is in one queue at
    /// a time), and its job is in one inbox.
    unsafe fn run(data: *const ()) {
        // SAFETY: the box came from `Box::into_raw` in `route`; this is its one run.
        let Pinned {
            job,
            target,
            arrived,
        } = *unsafe { Box::from_raw(data as *mut Pinned) };
        // SAFETY: jobs run only on worker threads.
        let registry = unsafe { WorkerThread::current_unchecked() }.registry();
        // SAFETY: the spawner waits for the latch in `admit_pinned`, so it is alive until set.
        unsafe { registry.inboxes().deliver(target, job, registry, arrived) };
    }
}

/// One inbox per worker: the jobs pinned to it that its spawners delivered, oldest first.
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

    /// The oldest job in worker `index`'s inbox. An empty inbox costs two plain loads (the
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

    /// Whether worker `index`'s inbox holds a job (its loads are SeqCst: the sleeper's read
    /// of the handshake in `deliver`).
    #[inline]
    pub fn has(&self, index: usize) -> bool {
        !self.boxes[index].jobs.is_empty()
    }

    /// Worker `index` stops looking at its inbox (its pool stops, or the builder's thread of
    /// `use_current_thread` leaves a call); every job that reaches it from now on runs where its
    /// router ran, and the caller drains what is left.
    pub fn close(&self, index: usize) {
        // SeqCst store and fence: the worker's half of the handshake with `deliver` (store,
        // fence, then its last look at the inbox in the drain that follows).
        self.boxes[index].closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Worker `index` looks at its inbox again (the builder's thread of `use_current_thread`,
    /// entering a call: `borrowed`).
    pub fn open(&self, index: usize) {
        // SeqCst: the flag is one side of the handshake with `deliver`.
        self.boxes[index].closed.store(false, Ordering::SeqCst);
    }

    fn closed(&self, index: usize) -> bool {
        // SeqCst: the deliverer's read of the handshake in `deliver`.
        self.boxes[index].closed.load(Ordering::SeqCst)
    }

    /// Puts `job` in worker `target`'s inbox, wakes that worker and sets `arrived`. If the
    /// worker has closed its inbox, runs what is left there here: after the push and a SeqCst
    /// fence either this thread sees the inbox closed, or the worker's look after closing it
    /// sees the job (and both may; the inbox hands each job to one of them).
    ///
    /// # Safety
    /// On a worker of `registry`; `job` is an admitted job of `registry`, in no queue;
    /// `arrived` is valid until set.
    unsafe fn deliver(
        &self,
        target: usize,
        job: JobRef,
        registry: &Registry,
        arrived: *const Latch,
    ) {
        self.boxes[target].jobs.push(job);
        crate::chaos::point();
        // Fences (SeqCst) after the push: a sleeping worker sees it under its flag, or is woken.
        registry.sleep().wake_worker(target);
        // SAFETY: the caller's contract; not touched after this.
        unsafe { Latch::set(arrived, registry) };
        if self.closed(target) {
            while let Some(job) = self.take(target) {
                // SAFETY: an admitted job, taken out of the inbox once, run here since the
                // inbox is closed (this thread is a worker of its pool).
                unsafe { job.run() };
            }
        }
    }
}
