//! The public entry points: [`ThreadPool`], the global pool, and the free functions.
//!
//! This module owns where a call lands: inline in the current job when the calling thread is a
//! worker of the target pool running one, or as a new root job of that pool otherwise (admitted
//! on a pool token from a thread outside every pool, and from a worker of the pool that runs no
//! job: a start or exit handler, or the builder's thread of `use_current_thread`, entered as
//! worker 0 for the call (see `borrowed`); on the caller's credit from a worker of another pool).
//! It never bypasses the token table.

use crate::admission::stats::Stats;
use crate::admission::token::LenderRef;
use crate::api::builder::{
    global_registry, BuildError, ThreadBuilder, ThreadPoolBuilder, ThreadSpawn,
};
use crate::api::join::{join_context_in_worker, join_in_worker, thread_mark, FnContext};
use crate::api::scope::{scope_in_worker, Scope};
use crate::base::job_ref::JobResult;
use crate::base::sync::Arc;
use crate::worker::borrowed;
use crate::worker::job::{HeapJob, RootJob};
use crate::worker::registry::Registry;
use crate::worker::thread::WorkerThread;
use crate::worker::wait::wait_on;

/// A work-stealing pool whose jobs are admitted through a lending token table.
///
/// Dropping the pool lets the queued work finish, then the workers exit; the drop itself does not
/// wait for them. Nothing the pool accepted is dropped unrun: what its running jobs, its exit
/// handlers and the builder's thread of
/// [`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread) give it after the drop
/// runs too (with `num_threads(1)`, on the builder's thread, at its next call or look at the pool,
/// or in the drop itself when made there).
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).max_inflight(4).build().unwrap();
/// let (a, b) = pool.join(|| 1 + 1, || 2 + 2);
/// assert_eq!((a, b), (2, 4));
/// assert_eq!(pool.install(|| treepool::current_num_threads()), 2);
/// ```
pub struct ThreadPool {
    registry: Arc<Registry>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("num_threads", &self.current_num_threads())
            .field("max_inflight", &self.max_inflight())
            .finish()
    }
}

impl ThreadPool {
    pub(crate) fn from_registry(registry: Arc<Registry>) -> Self {
        ThreadPool { registry }
    }

    /// The pool's registry, for the entry points defined in other modules.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Runs `op` in the pool and returns its result; the calling thread waits (a worker of
    /// another pool runs that pool's jobs meanwhile). On a worker of this pool, `op` runs inline
    /// in the current job. A panic in `op` is raised again here.
    ///
    /// # Across pools
    ///
    /// From a thread outside every pool, `op` starts a root job that waits for one of this
    /// pool's tokens. From a job of *another* pool, it never waits for a token: the caller may
    /// hold a token of its own pool, and waiting for a second one while holding it is how pools
    /// that call each other deadlock. Instead `op` runs as a root job *on its caller's credit*,
    /// a token that is none of this pool's `max_inflight` and lasts as long as the call. So pools
    /// may call each other in any pattern (A → B → A and longer cycles) without deadlock, and
    /// each pool's bounds read: tokens in use ≤ `max_inflight`, executing ≤ `max_inflight` +
    /// calls in progress from other pools' jobs ([`Stats::calls_in`]), in flight ≤ that sum ×
    /// levels.
    ///
    /// On a worker of this pool that runs no job (in a start or exit handler, or on the
    /// builder's thread of [`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread),
    /// outside any job), `op` starts a root job on a pool token, as from outside the pool, but
    /// it runs on the calling thread when a token is free at once, and the thread runs the
    /// pool's jobs while it waits.
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let words = vec!["lend", "one", "token"];
    /// let total: usize = pool.install(|| {
    ///     assert!(treepool::current_thread_index().is_some()); // on a worker
    ///     words.iter().map(|w| w.len()).sum()
    /// });
    /// assert_eq!(total, 12);
    /// ```
    pub fn install<OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce() -> R + Send,
        R: Send,
    {
        in_pool(&self.registry, op)
    }

    /// [`join`](crate::join) in this pool.
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        self.install(|| join(a, b))
    }

    /// [`scope`](crate::scope) in this pool.
    pub fn scope<'scope, OP, R>(&self, op: OP) -> R
    where
        OP: FnOnce(&Scope<'scope>) -> R + Send,
        R: Send,
    {
        self.install(|| scope(op))
    }

    /// Spawns a detached job in this pool: a child of the current job when called from one,
    /// else a root job. Returns once the job is admitted (waiting for a token if none is free):
    /// that wait is the backpressure that keeps a spawning loop from getting ahead of the pool.
    /// A panic in `f` goes to the pool's panic handler, or is printed; it never kills a worker.
    ///
    /// Called from a job of *another* pool, the call never waits (see [`ThreadPool::install`]
    /// for why): if no token is free, the job is queued, the call returns, and the job starts
    /// once a token frees. Spawns across pools are therefore not backpressured.
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) {
        spawn_from_here(Some(&self.registry), f, spawn_in);
    }

    /// The calling thread's index in this pool, if it is one of its workers (`None` on a
    /// worker of another pool, or outside every pool). The builder's thread of a pool built
    /// with [`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread) is worker 0,
    /// inside calls into the pool and between them, for as long as the pool lives.
    pub fn current_thread_index(&self) -> Option<usize> {
        on_worker(Some(&self.registry), WorkerThread::index)
    }

    /// Whether the calling thread, a worker of this pool, has work of its own pending (see
    /// [`current_thread_has_pending_tasks`]); `None` if it is not one of this pool's workers.
    pub fn current_thread_has_pending_tasks(&self) -> Option<bool> {
        on_worker(Some(&self.registry), WorkerThread::has_local_work)
    }

    /// [`yield_now`] if the calling thread is a worker of this pool, else `None`.
    pub fn yield_now(&self) -> Option<Yield> {
        on_worker(Some(&self.registry), |w| {
            Yield::from_ran(w.yield_one(false))
        })
    }

    /// [`yield_local`] if the calling thread is a worker of this pool, else `None`.
    pub fn yield_local(&self) -> Option<Yield> {
        on_worker(Some(&self.registry), |w| Yield::from_ran(w.yield_one(true)))
    }

    /// The number of worker threads.
    pub fn current_num_threads(&self) -> usize {
        self.registry.num_threads()
    }

    /// The number of tokens.
    pub fn max_inflight(&self) -> usize {
        self.registry.max_inflight()
    }

    /// A snapshot of the pool's admission state and counters.
    pub fn stats(&self) -> Stats {
        self.registry.stats()
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.registry.terminate();
        borrowed::release();
    }
}

/// Runs `op` in `registry` from the calling thread: inline in the current job on a worker of
/// `registry` that runs one; as a root job on a pool token from one that runs none (a start or
/// exit handler, or the builder's thread of `use_current_thread`, entered for the call); else
/// as a root job from outside ([`run_root`]).
fn in_pool<OP, R>(registry: &Arc<Registry>, op: OP) -> R
where
    OP: FnOnce() -> R + Send,
    R: Send,
{
    match WorkerThread::current() {
        Some(worker) if worker.registry().id() == registry.id() => {
            match worker.current_ptr().is_null() {
                false => op(),
                true => run_root_here(registry, worker, op),
            }
        }
        Some(here) => run_root(registry, Some(here), op),
        None => borrowed::enter(Some(registry.id()), op, |w, op| {
            run_root_here(registry, w, op)
        })
        .unwrap_or_else(|op| run_root(registry, None, op)),
    }
}

/// A free function's call from a thread that runs no job: into the pool of the calling worker
/// (a handler's thread), else of the borrowed worker the thread is (`use_current_thread`), else
/// the global pool.
#[cold]
pub(crate) fn from_outside_jobs<OP, R>(op: OP) -> R
where
    OP: FnOnce() -> R + Send,
    R: Send,
{
    match WorkerThread::current() {
        Some(worker) => in_pool(worker.registry(), op),
        None => borrowed::enter(None, op, |w, op| run_root_here(w.registry(), w, op))
            .unwrap_or_else(|op| run_root(global_registry(), None, op)),
    }
}

/// Runs `op` as a new root job of `registry` on `worker`, one of its workers that runs no job,
/// and waits for it: admitted on a pool token as any spawn of a worker is (waiting, and running
/// other jobs, while none is free), it runs right here when a token is free at once, else where
/// its granter made it runnable (usually here too: on this worker's deque). The thread holds no
/// token while it waits, so the wait needs nothing of it: B3's argument for a root from outside.
fn run_root_here<OP, R>(registry: &Arc<Registry>, worker: &WorkerThread, op: OP) -> R
where
    OP: FnOnce() -> R + Send,
    R: Send,
{
    let lender = LenderRef::new(registry.new_lender_on(Some(worker)));
    let job = RootJob::new(lender.clone(), op, registry.waker_for(Some(worker)));
    // SAFETY: `job` stays on this frame until its latch is set, which is waited for below.
    let job_ref = unsafe { job.as_job_ref() };
    if registry.try_admit(&lender) {
        // SAFETY: admitted into this worker's pool, run once, here, while alive.
        unsafe { job_ref.run() };
    } else {
        // SAFETY: `lender` lives on this frame for the whole call; no scope.
        unsafe {
            registry.admit(
                Some(worker),
                LenderRef::as_ptr(&lender),
                job_ref,
                std::ptr::null(),
            )
        };
        // Wait site "call from the builder's thread": context (this pool, no job: the thread
        // holds no token), policy AnyAdmitted.
        worker.wait_until(|| job.latch.probe());
    }
    job.into_value()
}

/// Runs `op` as a new root job of `registry`, from a thread that is not one of its workers, and
/// waits for it.
///
/// From a thread outside every pool the root waits for a pool token. From a worker of another
/// pool (a call made inside one of its jobs) it is admitted at once on the caller's credit: the
/// caller may hold a token of its own pool, and waiting here for a second one while holding it
/// is what deadlocks pools that call each other. The caller's worker runs its own pool's jobs
/// while it waits.
fn run_root<OP, R>(registry: &Arc<Registry>, here: Option<&WorkerThread>, op: OP) -> R
where
    OP: FnOnce() -> R + Send,
    R: Send,
{
    let lender = LenderRef::new(registry.new_lender());
    let waiter = registry.waker_for(here);
    let job = RootJob::new(lender.clone(), op, waiter);
    // SAFETY: `job` stays on this frame until its latch is set, which `wait_on` waits for.
    let job_ref = unsafe { job.as_job_ref() };
    match here {
        Some(_) => registry.admit_on_credit(&lender, job_ref),
        // SAFETY: `lender` lives on this frame for the whole call.
        None => unsafe {
            registry.admit(None, LenderRef::as_ptr(&lender), job_ref, std::ptr::null())
        },
    }
    // Wait site "call from outside": on a worker of another pool, context (that pool, the
    // calling job), policy AnyAdmitted in that pool (the credit call: it waits for nothing of
    // this pool's tokens); on a thread outside every pool, Park.
    let wait = || wait_on(here, || job.latch.probe());
    match here {
        // The halves its thread keeps now may be what the call waits for
        // (CalledOutHalfOnCredit).
        Some(worker) => worker.calling_out(wait),
        None => wait(),
    }
    job.into_value()
}

/// [`in_pool`], handing `op` the worker it runs on.
pub(crate) fn install_in<OP, R>(registry: &Arc<Registry>, op: OP) -> R
where
    OP: FnOnce(&WorkerThread) -> R + Send,
    R: Send,
{
    // SAFETY: `in_pool` runs its closure in a job of `registry`, on one of its workers.
    in_pool(registry, || {
        op(unsafe { WorkerThread::current_unchecked() })
    })
}

/// Spawns a detached job into `registry` from any thread.
fn spawn_in<F: FnOnce() + Send + 'static>(registry: &Registry, f: F) {
    let here = WorkerThread::current();
    detached_job(registry, here, f).admit(registry, here);
}

/// The job of a detached spawn of `f` into `registry` from the calling thread, whose worker state
/// (if it is a worker) is `here`: a child of the current job on a worker of `registry`, else a
/// root. A panic in `f` goes to the pool's panic handler.
pub(crate) fn detached_job<F: FnOnce() + Send + 'static>(
    registry: &Registry,
    here: Option<&WorkerThread>,
    f: F,
) -> Box<HeapJob<impl FnOnce() + Send + 'static>> {
    let body = move || {
        if let JobResult::Panic(payload) = JobResult::call(f) {
            // SAFETY: jobs run only on workers, of the pool they were admitted into.
            unsafe { WorkerThread::current_unchecked() }
                .registry()
                .handle_panic(payload);
        }
    };
    let lender = registry.new_lender_on(registry.own(here));
    HeapJob::new(lender, body, std::ptr::null())
}

/// Runs `f` with the pool a free function called on this thread targets: the calling worker's;
/// else the pool whose worker 0 the thread is ([`use_current_thread`](ThreadPoolBuilder::use_current_thread)),
/// the thread entered as that worker for the length of `f`; else the global pool. The thread's
/// borrowed state is looked at once: between two looks its pool could be dropped on another
/// thread, and a call made with the first look's pool after the second found it terminated
/// would go into a pool whose workers have exited.
pub(crate) fn in_current_pool<R>(f: impl FnOnce(&Arc<Registry>) -> R) -> R {
    match WorkerThread::current() {
        Some(worker) => f(worker.registry()),
        None => borrowed::enter(None, f, |worker, f| f(worker.registry()))
            .unwrap_or_else(|f| f(global_registry())),
    }
}

/// Runs `a` and `b`, potentially in parallel, and returns both results.
///
/// On a worker, `a` runs inline while `b` waits in a structure private to the calling thread;
/// then `b` runs inline too, touching no shared state, unless it was *promoted* meanwhile. An
/// idle worker asks a busy one for work, and the busy one promotes its oldest private `b` (the
/// largest piece of a balanced tree) to its deque at its next `join`, or while it waits for
/// anything; a thief that takes a promoted `b` must admit it through the token table first.
/// So `b` becomes stealable only once the calling thread reaches another `join` or a wait: a
/// split into two long sequential halves is best made with [`scope`] or split further (a
/// recursive split, the usual shape, joins often). For the same reason `a` must not wait for
/// `b` outside the pool (a spin on a flag `b` sets, a channel `b` sends to): unlike rayon's,
/// that can hang even while other workers are idle. A job keeps at most three such private
/// halves; its deeper joins run `a` and then `b` as plain calls unless a worker is asking for
/// work at that moment. Outside any pool, the call runs in the global
/// pool. A panic in `a` or `b` is raised again once both have finished (`a`'s wins).
///
/// ```
/// fn fib(n: u32) -> u64 {
///     if n < 2 { return n as u64; }
///     let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
///     a + b
/// }
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// assert_eq!(pool.install(|| fib(20)), 6765);
/// ```
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    match WorkerThread::current() {
        Some(worker) if !worker.current_ptr().is_null() => join_in_worker(worker, a, b),
        _ => from_outside_jobs(|| join(a, b)),
    }
}

/// [`join`] whose closures learn whether they migrated: ran on another thread than the
/// caller (see [`FnContext::migrated`]). rayon-core's `join_context`, with the same admission
/// as `join`: `a` runs inline as part of the current job, and `b` too unless a thief takes it,
/// which admits it first (a loan of the current job's token, else a pool token). Called from
/// outside any job, the call runs as a root job as `join` does (both closures then report
/// `migrated` when that root runs on another thread: always, from a plain thread).
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
/// let (a, b) = pool.install(|| treepool::join_context(|a| a.migrated(), |b| b.migrated()));
/// assert_eq!((a, b), (false, false)); // one thread: nothing can migrate
/// let (a, b) = treepool::join_context(|a| a.migrated(), |b| b.migrated());
/// assert_eq!((a, b), (true, true)); // from outside every pool: injected
/// ```
pub fn join_context<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA + Send,
    B: FnOnce(FnContext) -> RB + Send,
    RA: Send,
    RB: Send,
{
    let caller = thread_mark();
    match WorkerThread::current() {
        Some(worker) if !worker.current_ptr().is_null() => {
            join_context_in_worker(worker, caller, a, b)
        }
        _ => from_outside_jobs(|| {
            // SAFETY: `from_outside_jobs` runs its closure in a job, on a worker of its pool.
            let worker = unsafe { WorkerThread::current_unchecked() };
            join_context_in_worker(worker, caller, a, b)
        }),
    }
}

/// Creates a scope on the current worker's pool (else the global pool) and runs `op` in it;
/// returns once `op` and every job spawned in the scope have finished. A panic in any of them is
/// raised again then.
///
/// ```
/// let words = vec!["tree", "pool"];
/// let mut lengths = vec![0; 2];
/// treepool::scope(|s| {
///     for (word, len) in words.iter().zip(lengths.iter_mut()) {
///         s.spawn(move |_| *len = word.len());
///     }
/// });
/// assert_eq!(lengths, [4, 4]);
/// ```
pub fn scope<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    match WorkerThread::current() {
        Some(worker) if !worker.current_ptr().is_null() => scope_in_worker(worker, op),
        _ => from_outside_jobs(|| scope(op)),
    }
}

/// Spawns a detached job on the current worker's pool (else the global pool). See
/// [`ThreadPool::spawn`].
///
/// ```
/// let (tx, rx) = std::sync::mpsc::channel();
/// treepool::spawn(move || tx.send(42).unwrap());
/// assert_eq!(rx.recv().unwrap(), 42);
/// ```
pub fn spawn<F: FnOnce() + Send + 'static>(f: F) {
    spawn_from_here(None, f, spawn_in);
}

/// Spawns the detached job `f` into `pool` with `spawn_into` (`spawn_in` or its fifo twin),
/// from the calling thread as it is: a worker (of any pool), or else the builder's thread of a
/// `use_current_thread` pool entered as that pool's worker 0 (waiting as a plain thread, it could
/// wait for a token only it can free), or else a plain thread. `pool: None` is the calling
/// thread's pool: the worker's, the entered one, else the global pool.
pub(crate) fn spawn_from_here<F>(pool: Option<&Registry>, f: F, spawn_into: fn(&Registry, F)) {
    match (WorkerThread::current(), pool) {
        (Some(_), Some(pool)) => spawn_into(pool, f),
        (Some(worker), None) => spawn_into(worker.registry(), f),
        (None, _) => borrowed::enter(pool.map(Registry::id), f, |worker, f| {
            spawn_into(pool.unwrap_or(worker.registry()), f)
        })
        .unwrap_or_else(|f| spawn_into(pool.unwrap_or(global_registry()), f)),
    }
}

/// The index of the calling worker thread in its pool, or `None` outside any pool. On the
/// builder's thread of a pool built with
/// [`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread) it is `Some(0)`, inside
/// calls into the pool and between them, as in rayon, until the pool is dropped (on any thread).
///
/// ```
/// assert_eq!(treepool::current_thread_index(), None);
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
/// assert!(pool.install(|| treepool::current_thread_index()).unwrap() < 3);
/// ```
pub fn current_thread_index() -> Option<usize> {
    WorkerThread::current()
        .map(WorkerThread::index)
        .or_else(borrowed::index)
}

/// The number of threads of the calling worker's pool, else of the pool whose worker 0 the
/// calling thread is ([`use_current_thread`](crate::ThreadPoolBuilder::use_current_thread)),
/// else of the global pool.
pub fn current_num_threads() -> usize {
    match WorkerThread::current() {
        Some(worker) => worker.registry().num_threads(),
        None => borrowed::registry()
            .map_or_else(|| global_registry().num_threads(), |r| r.num_threads()),
    }
}

/// A snapshot of the global pool's [`Stats`] (the pool of the free functions outside every
/// pool, and of a rayon program's parallel iterators on treepool), from any thread; builds the
/// global pool with the defaults if it does not exist yet, as any use of it does.
///
/// ```
/// std::env::set_var(treepool::MAX_INFLIGHT_ENV, "3"); // before the global pool's first use
/// treepool::scope(|s| {
///     for _ in 0..100 {
///         s.spawn(|_| {});
///     }
/// });
/// let stats = treepool::global_stats();
/// assert_eq!(treepool::global_max_inflight(), 3);
/// assert!(stats.peak_executing <= 3);
/// assert_eq!(stats.admitted_on_loan + stats.admitted_from_pool, 101); // 100 spawns + the root
/// assert_eq!(stats.inflight, 0);
/// ```
pub fn global_stats() -> Stats {
    global_registry().stats()
}

/// The global pool's number of tokens ([`ThreadPoolBuilder::max_inflight`], else
/// `TREEPOOL_MAX_INFLIGHT`, else the default); builds the global pool with the defaults if it
/// does not exist yet. See [`global_stats`].
pub fn global_max_inflight() -> usize {
    global_registry().max_inflight()
}

/// Whether the calling worker thread has work of its own pending: jobs in its deque, or `join`
/// halves it keeps private until a thief asks (see [`join`]). `None` outside every pool. As
/// racy as rayon-core's: other workers may take the deque's jobs at any moment; a heuristic,
/// for deciding whether to split further.
///
/// ```
/// assert_eq!(treepool::current_thread_has_pending_tasks(), None);
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
/// assert_eq!(pool.install(treepool::current_thread_has_pending_tasks), Some(false));
/// ```
pub fn current_thread_has_pending_tasks() -> Option<bool> {
    on_worker(None, WorkerThread::has_local_work)
}

/// What a yield did: see [`yield_now`] and [`yield_local`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Yield {
    /// A pending job ran (and finished) before the call returned.
    Executed,
    /// No pending job was found.
    Idle,
}

impl Yield {
    fn from_ran(ran: bool) -> Self {
        if ran {
            Yield::Executed
        } else {
            Yield::Idle
        }
    }
}

/// Runs one pending job of the calling worker's pool, if there is one: from its own deque,
/// else the pool's injector, else stolen from another worker (as rayon-core's `yield_now`).
/// `None` outside every pool.
///
/// The job was admitted through the token table when it was queued (a stolen `join` half is
/// admitted now, or sent back unrun to its joiner's thread), so a yield borrows nothing: it runs that job above the
/// caller, as a waiting thread helps, and never waits itself. Join halves that the thread keeps
/// private are not run (see [`join`]); the job may spawn and wait in turn before it finishes.
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
/// pool.scope(|s| {
///     s.spawn(|_| {});
///     // The spawned job was admitted and queued on this thread: the yield runs it.
///     assert_eq!(treepool::yield_now(), Some(treepool::Yield::Executed));
///     assert_eq!(treepool::yield_now(), Some(treepool::Yield::Idle));
/// });
/// assert_eq!(treepool::yield_now(), None);
/// ```
pub fn yield_now() -> Option<Yield> {
    on_worker(None, |w| Yield::from_ran(w.yield_one(false)))
}

/// [`yield_now`] restricted to the calling worker's own deque: never the injector, never
/// another worker's deque. `None` outside every pool.
pub fn yield_local() -> Option<Yield> {
    on_worker(None, |w| Yield::from_ran(w.yield_one(true)))
}

/// Runs `f` on the calling thread's worker state, if it is a worker of `pool` (of any pool if
/// `None`): the worker it runs as now, else the builder's thread of `use_current_thread`
/// outside a call, entered for this one as its pool's worker 0 (so a yield there runs the
/// pool's work, as rayon's does). `None` on any other thread.
fn on_worker<T>(pool: Option<&Registry>, f: impl FnOnce(&WorkerThread) -> T) -> Option<T> {
    let id = pool.map(Registry::id);
    borrowed::with_here(id, |here| {
        here.filter(|w| id.map_or(true, |id| id == w.registry().id()))
            .map(f)
    })
}

/// `build` and `build_scoped` live here, beside what they build, so that the builder never
/// imports the pool.
#[allow(private_bounds)]
impl<S: ThreadSpawn> ThreadPoolBuilder<S> {
    /// Builds the pool and starts its workers.
    pub fn build(self) -> Result<ThreadPool, BuildError> {
        self.build_registry().map(ThreadPool::from_registry)
    }
}

impl ThreadPoolBuilder {
    /// Builds a pool whose workers are scoped threads of a [`std::thread::scope`], calls
    /// `with_pool` with it, and returns what it returns once the pool is dropped and every
    /// worker has exited. Each worker thread starts by calling `wrapper`, which must call
    /// [`ThreadBuilder::run`] (to set up scoped thread-locals around it, for example), as in
    /// rayon-core. Work of the pool admits its jobs as in any pool: the threads only change
    /// who runs the workers.
    ///
    /// ```
    /// let data = vec![1, 2, 3];
    /// let sum = treepool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .build_scoped(|thread| thread.run(), |pool| pool.install(|| data.iter().sum::<i32>()))
    ///     .unwrap();
    /// assert_eq!(sum, 6);
    /// ```
    pub fn build_scoped<W, F, R>(self, wrapper: W, with_pool: F) -> Result<R, BuildError>
    where
        W: Fn(ThreadBuilder) + Sync,
        F: FnOnce(&ThreadPool) -> R,
    {
        std::thread::scope(|scope| {
            let wrapper = &wrapper;
            let pool = self
                .spawn_handler(move |thread| {
                    let mut builder = std::thread::Builder::new();
                    if let Some(name) = thread.name() {
                        builder = builder.name(name.to_string());
                    }
                    if let Some(size) = thread.stack_size() {
                        builder = builder.stack_size(size);
                    }
                    builder.spawn_scoped(scope, move || wrapper(thread))?;
                    Ok(())
                })
                .build()?;
            Ok(with_pool(&pool))
        })
    }
}
