//! The registry: a pool's shared state, its worker threads, and admission glue.
//!
//! This module owns the deques (one crossbeam `Worker` per thread, their `Stealer`s, a global
//! `Injector`; each worker's broadcast inbox is `broadcast`'s, looked at here right after the own
//! deque), the worker main loop, the help-while-waiting loop, and the glue that connects the
//! token table to the scheduler: a job becomes runnable only after [`TokenTable`] admitted it, and
//! whoever grants a token to a waiting job pushes that job and wakes its spawner (rule 5). It must
//! never run a job that was not admitted (the one exception is a join half run by its own joiner,
//! which is part of the joiner's job).

use std::cell::{Cell, OnceCell};
use std::ptr;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::time::Instant;

use crossbeam_deque::{Injector, Steal, Stealer, Worker};

use std::io::Write;

use crate::broadcast::Inboxes;
use crate::job::{drop_quietly, JobRef, Ticket};
use crate::latch::{CountLatch, WakeTarget};
use crate::lazy::{PrivateHalves, RequestFlag, WorkRequests};
use crate::pacing::{Pacing, STEAL_BACKOFF};
use crate::sleep::Sleep;
use crate::stack::Headroom;
use crate::stats::{bump_own, Counter, Counters, Row, Stats};
use crate::sync::{thread, Arc, AtomicBool, Ordering};
use crate::token::{Admission, Lender, LenderRef, Registration, Spare, TokenTable};

/// A panic handler for detached jobs.
pub type PanicHandler = Box<dyn Fn(Box<dyn std::any::Any + Send>) + Send + Sync>;

/// Rounds a worker looks for work, yielding the CPU between rounds, before it tries to sleep.
const SPIN_ROUNDS: u32 = 64;

static NEXT_POOL_ID: StdAtomicUsize = StdAtomicUsize::new(1);

/// The state shared by a pool's workers and its handles.
pub struct Registry {
    id: usize,
    stealers: Box<[Stealer<JobRef>]>,
    injector: Injector<JobRef>,
    sleep: Sleep,
    /// Idle workers' requests to busy ones for a promoted join half.
    requests: WorkRequests,
    tokens: TokenTable,
    counters: Counters,
    terminating: AtomicBool,
    panic_handler: Option<PanicHandler>,
    /// broadcast: each worker's inbox of pinned jobs (see `broadcast`).
    inboxes: Inboxes,
    /// Each worker's lanes for detached `spawn_fifo` jobs (see `fifo`).
    fifo_lanes: Box<[crate::fifo::Lanes]>,
}

/// What a worker thread needs to start, made before any thread runs.
pub struct WorkerSeed {
    deque: Worker<JobRef>,
    index: usize,
}

impl WorkerSeed {
    /// The index of the worker this seed starts.
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Registry {
    /// A registry for `num_threads` workers and `max_inflight` tokens, with the seeds the worker
    /// threads start from.
    pub fn new(
        num_threads: usize,
        max_inflight: usize,
        panic_handler: Option<PanicHandler>,
    ) -> (Arc<Registry>, Vec<WorkerSeed>) {
        let deques: Vec<Worker<JobRef>> = (0..num_threads).map(|_| Worker::new_lifo()).collect();
        let registry = Arc::new(Registry {
            // Relaxed: only uniqueness matters.
            id: NEXT_POOL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            stealers: deques.iter().map(Worker::stealer).collect(),
            injector: Injector::new(),
            sleep: Sleep::new(num_threads),
            requests: WorkRequests::new(num_threads),
            tokens: TokenTable::new(max_inflight),
            counters: Counters::new(num_threads),
            terminating: AtomicBool::new(false),
            panic_handler,
            inboxes: Inboxes::new(num_threads),
            fifo_lanes: crate::fifo::Lanes::per_worker(num_threads),
        });
        let seeds = deques
            .into_iter()
            .enumerate()
            .map(|(index, deque)| WorkerSeed { deque, index })
            .collect();
        (registry, seeds)
    }

    /// The pool's unique id.
    #[inline]
    pub fn id(&self) -> usize {
        self.id
    }

    /// The number of worker threads.
    pub fn num_threads(&self) -> usize {
        self.stealers.len()
    }

    /// The number of tokens.
    pub fn max_inflight(&self) -> usize {
        self.tokens.cap()
    }

    /// Each worker's lanes for detached fifo spawns.
    #[inline]
    pub fn fifo_lanes(&self) -> &[crate::fifo::Lanes] {
        &self.fifo_lanes
    }

    /// The workers' sleep state.
    #[inline]
    pub fn sleep(&self) -> &Sleep {
        &self.sleep
    }

    /// The workers' inboxes of pinned jobs (see `broadcast`).
    #[inline]
    pub fn inboxes(&self) -> &Inboxes {
        &self.inboxes
    }

    /// Asks the workers to finish the queued work and exit.
    pub fn terminate(&self) {
        // SeqCst: read by sleepers' `done` checks under their locks.
        self.terminating.store(true, Ordering::SeqCst);
        self.sleep.wake_all();
    }

    /// A snapshot of the pool's statistics.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot(&self.tokens)
    }

    /// The state of a new job started by the calling thread in this pool: a child of the
    /// calling thread's current job when it is a worker of this pool, else a root (jobs of
    /// different pools are never linked).
    #[inline]
    pub fn new_lender(&self) -> Lender {
        self.new_lender_on(self.own(WorkerThread::current()))
    }

    /// [`Registry::new_lender`] on `own`, the calling thread if it is a worker of this pool.
    #[inline]
    pub fn new_lender_on(&self, own: Option<&WorkerThread>) -> Lender {
        let parent = own.map_or(ptr::null(), WorkerThread::current_ptr);
        // SAFETY: a thread's current job is alive while it runs there (null between jobs).
        unsafe { self.new_child(parent) }
    }

    /// `here` (the calling thread's worker state, if it is a worker) if it is a worker of this
    /// pool.
    #[inline]
    pub fn own<'a>(&self, here: Option<&'a WorkerThread>) -> Option<&'a WorkerThread> {
        here.filter(|w| w.registry.id == self.id)
    }

    /// The state of a job of this pool whose parent is `parent` (a root if null).
    ///
    /// # Safety
    /// `parent` is null or points to the lender of a job of this pool kept alive by its run.
    #[inline]
    pub unsafe fn new_child(&self, parent: *const Lender) -> Lender {
        // SAFETY: the caller's contract.
        Lender::new(unsafe { parent.as_ref() })
    }

    /// Admits `lender` now if a token is free, counting it. No waiting.
    #[inline]
    pub fn try_admit(&self, lender: &Lender) -> bool {
        self.try_admit_on(self.slot(), lender)
    }

    /// [`Registry::try_admit`] by the thread of counter row `slot`.
    #[inline]
    fn try_admit_on(&self, slot: usize, lender: &Lender) -> bool {
        match self.tokens.try_admit(lender) {
            Some(how) => {
                self.note_admitted_on(slot, lender, how);
                true
            }
            None => false,
        }
    }

    /// Admits the root `lender`, started by a call from a job of another pool, on that call's
    /// credit (never waiting), and makes its job runnable.
    pub fn admit_on_credit(&self, lender: &Lender, job: JobRef) {
        self.admit_credit(lender);
        self.make_runnable(job);
    }

    /// Admits the root `lender` on the credit of a call from a job of another pool, never
    /// waiting; the caller runs it (an in-place scope's body: see `scope_fifo`).
    pub fn admit_credit(&self, lender: &Lender) {
        self.tokens.admit_credit(lender);
        self.note_admitted(lender, Admission::Credit);
    }

    /// Admits the job `job` of `*lender` into this pool and makes it runnable, counting it in
    /// `scope` first (unless null) if the calling thread is a worker of this pool. `here`: the
    /// calling thread's worker state (`WorkerThread::current`), if it is a worker of any pool.
    ///
    /// While no token is free: a worker of this pool waits, running other admitted jobs; a
    /// thread outside every pool parks; a worker of *another* pool does not wait at all (it
    /// may hold a token of its own pool, and waiting for a second one while holding it could
    /// deadlock): the job is queued, and whoever frees a token makes it runnable. Returns once
    /// the job is admitted, or queued. (One exception: a child of an in-place scope's credit
    /// root, spawned by the scope's owner on another pool's worker, waits for that root's loan
    /// or a pool token, running the owner's pool's jobs meanwhile; design §4.10.)
    ///
    /// A worker counts the job in `scope` at the last moment: after its admission, or just
    /// before it registers as a waiter (its granter may make it runnable). In the help-first
    /// loop the job may instead take over the place in `scope`'s count of a finished job of the
    /// same scope whose token it takes (see [`WorkerThread::count_down`]): neither touches the
    /// count. Other threads must have counted the job in already, and pass null.
    ///
    /// # Safety
    /// `lender` points to a live `Arc` that stays put until `job` is runnable; it may live
    /// inside `job`, so it is not dereferenced once the job can run (a reference would have to
    /// stay valid for the whole call). Admission then costs no reference-count traffic on it.
    /// `scope` is null or a latch that outlives the job, on which the calling job holds a count.
    pub unsafe fn admit(
        &self,
        here: Option<&WorkerThread>,
        lender: *const Lender,
        job: JobRef,
        scope: *const CountLatch,
    ) {
        let own = self.own(here);
        let slot = own.map_or(self.num_threads(), |w| w.index);
        // SAFETY: `lender` is valid until `job` is runnable (caller's contract); the reference
        // lives for this call only, which makes nothing runnable.
        if self.try_admit_on(slot, unsafe { &*lender }) {
            // SAFETY: the caller's contract.
            unsafe { count_in(scope) };
            self.make_runnable_on(own, job);
            return;
        }
        // No token is free: this admission waits, helping or registered.
        match own {
            Some(worker) => worker.bump(Counter::AdmissionWaits),
            None => self.counters.bump(slot, Counter::AdmissionWaits),
        }
        let registered = match own {
            Some(worker) => {
                let spawn = WaitingSpawn {
                    lender,
                    parent: worker.current_ptr(),
                    job,
                    scope,
                    published: OnceCell::new(),
                    since: worker.waits(),
                };
                match worker.while_admitting(|| worker.help_until_admitted(&spawn)) {
                    Helped::Admitted { counted } => {
                        if !counted {
                            // SAFETY: the caller's contract.
                            unsafe { count_in(scope) };
                        }
                        worker.push(job);
                        return;
                    }
                    // Registered by a wait above the loop: wait for the grant, if not in yet.
                    Helped::Published => spawn.published.into_inner().flatten(),
                    // SAFETY: the caller's contract; `job` is not runnable yet.
                    Helped::Dry => unsafe {
                        self.register_waiter(lender, job, scope, here, |job| worker.push(job))
                    },
                }
            }
            // SAFETY: as above.
            None => unsafe {
                self.register_waiter(lender, job, scope, here, |job| self.inject(job))
            },
        };
        // Admitted on the spot, or queued from another pool's worker: nothing to wait for.
        let Some(lender) = registered else { return };
        let wait = || wait_on(here, || lender.admission().is_some());
        match own {
            Some(worker) => worker.while_admitting(wait),
            None => wait(),
        }
        if let Some(child) = self.tokens.settle(&lender) {
            self.start_granted(child);
        }
    }

    /// Registers the job `job` of `*lender` as a waiter for a token, counting it in `scope`
    /// first (unless null): from the registration on, a granter may make it runnable. Returns
    /// the counted reference to wait on and settle, or `None` when there is nothing to wait
    /// for: the job was admitted on the spot (then `run_where` made it runnable), or the calling thread is a
    /// worker of another pool, whose spawn is queued and never waits (§1.4 of the design).
    ///
    /// # Safety
    /// As for [`Registry::admit`]; `job` is not runnable yet, and `lender` not registered.
    unsafe fn register_waiter(
        &self,
        lender: *const Lender,
        job: JobRef,
        scope: *const CountLatch,
        here: Option<&WorkerThread>,
        run_where: impl FnOnce(JobRef),
    ) -> Option<LenderRef> {
        // SAFETY: the caller's contract.
        unsafe { count_in(scope) };
        // From here on the job may run and free the lender it holds: take a reference.
        // SAFETY: as above.
        let lender = unsafe { LenderRef::clone_raw(lender) };
        // A worker of another pool never waits for a token of this one (design §1.4), but for a
        // child of the credit root of its own in-place scope (the one kind of non-root it
        // spawns here), which waits for that root's loan or a pool token: for the root's
        // descendants and this pool's jobs only, never for a token its caller holds (§4.10).
        let crossing = here.is_some_and(|w| w.registry.id != self.id) && lender.level() == 1;
        // SAFETY: the lender is not registered anywhere yet.
        unsafe {
            lender.set_ticket(Ticket {
                job,
                waker: (!crossing).then(|| self.waker_for(here)),
            })
        };
        match self.tokens.register(&lender) {
            Registration::Admitted => {
                // SAFETY: admitted by this thread, so the ticket is ours.
                drop(unsafe { lender.take_ticket() });
                self.note_admitted(&lender, Admission::Loan);
                run_where(job);
                None
            }
            Registration::Waiting(granted) => {
                if let Some(child) = granted {
                    self.start_granted(child);
                }
                // Queued: a root (no parent here), so there is nothing to settle.
                (!crossing).then_some(lender)
            }
        }
    }

    /// The job of `lender` has finished: it is no longer in flight, and its token moves on (a
    /// pool token into `spare`, if given and free, for a spawner of the calling thread).
    #[inline]
    pub fn finish_job(&self, lender: LenderRef, spare: Option<&Spare>) {
        let count_out = || self.counters.job_finished();
        if let Some(child) = self.tokens.finish(lender, spare, count_out) {
            self.start_granted(child);
        }
    }

    /// Counts a join half handed back to its joiner unrun.
    pub fn note_handed_back(&self) {
        self.counters.bump(self.slot(), Counter::HandedBack);
    }

    /// Counts a spawn of a cancelled fallible scope dropped unrun (see `try_scope`).
    pub fn note_cancelled(&self) {
        self.counters.bump(self.slot(), Counter::Cancelled);
    }

    /// Hands a detached job's panic to the pool's handler, or prints it. Never unwinds: a
    /// handler that panics is reported and its panic's payload leaked; the payload itself is
    /// dropped quietly (its `Drop` may panic); printing ignores a closed stderr.
    pub fn handle_panic(&self, payload: Box<dyn std::any::Any + Send>) {
        let mut stderr = std::io::stderr();
        match &self.panic_handler {
            Some(handler) => {
                let call = std::panic::AssertUnwindSafe(|| handler(payload));
                if let Err(second) = std::panic::catch_unwind(call) {
                    std::mem::forget(second);
                    let _ = writeln!(stderr, "treepool: the panic handler itself panicked");
                }
            }
            None => {
                let message = panic_message(payload.as_ref());
                let _ = writeln!(stderr, "treepool: a detached job panicked: {message}");
                drop_quietly(payload);
            }
        }
    }

    /// How a granter wakes the calling thread.
    pub fn waker_for(&self, here: Option<&WorkerThread>) -> WakeTarget {
        match here {
            Some(w) if w.registry.id == self.id => WakeTarget::Worker(w.index),
            Some(w) => WakeTarget::Foreign(w.registry.clone(), w.index),
            None => WakeTarget::Thread(thread::current()),
        }
    }

    /// A waiting job was granted a token by this thread: count it, make it runnable, and wake
    /// the thread waiting in its spawn call.
    fn start_granted(&self, child: LenderRef) {
        let how = child.admission().expect("a granted job is admitted");
        self.note_admitted(&child, how);
        // SAFETY: this thread's grant won the child's admission, so the ticket is ours.
        let ticket = unsafe { child.take_ticket() }.expect("a waiting job has a ticket");
        self.make_runnable(ticket.job);
        match ticket.waker {
            // The spawner is this very thread (it freed the token while helping): it sees the
            // admission when it next checks.
            Some(WakeTarget::Worker(index)) if self.slot() == index => {}
            Some(waker) => waker.wake(self),
            // A spawn from another pool's worker did not wait for its admission.
            None => {}
        }
    }

    #[inline]
    fn note_admitted(&self, lender: &Lender, how: Admission) {
        self.note_admitted_on(self.slot(), lender, how);
    }

    /// [`Registry::note_admitted`] by the thread of counter row `slot`.
    #[inline]
    fn note_admitted_on(&self, slot: usize, lender: &Lender, how: Admission) {
        self.counters.bump(slot, admission_counter(how));
        self.counters.job_admitted(lender.level());
    }

    /// [`Registry::note_admitted`] for a job that took over a finished job's place in the
    /// in-flight count with its token (see `Spare`): the count does not change. `worker` is the
    /// calling worker (its help loop knows it; no thread-local lookup).
    #[inline]
    fn note_carried_in(&self, worker: &WorkerThread, lender: &Lender, how: Admission) {
        worker.bump(admission_counter(how));
        self.counters.job_carried_in(lender.level());
    }

    /// Pushes an admitted job: to the calling worker's deque if it is one of ours, else to the
    /// injector.
    #[inline]
    pub fn make_runnable(&self, job: JobRef) {
        self.make_runnable_on(self.own(WorkerThread::current()), job);
    }

    /// [`Registry::make_runnable`] on `own`, the calling thread if it is a worker of this pool.
    #[inline]
    fn make_runnable_on(&self, own: Option<&WorkerThread>, job: JobRef) {
        match own {
            Some(w) => w.push(job),
            None => self.inject(job),
        }
    }

    /// Pushes an admitted job to the injector, where every worker looks for work.
    fn inject(&self, job: JobRef) {
        self.injector.push(job);
        self.sleep.new_work();
    }

    /// The calling thread's counter slot.
    #[inline]
    fn slot(&self) -> usize {
        match WorkerThread::current() {
            Some(w) if w.registry.id == self.id => w.index,
            _ => self.num_threads(),
        }
    }
}

/// The event counter of an admission.
#[inline]
fn admission_counter(how: Admission) -> Counter {
    match how {
        Admission::Loan => Counter::AdmittedOnLoan,
        Admission::Pool => Counter::AdmittedFromPool,
        Admission::Credit => Counter::AdmittedOnCredit,
    }
}

/// Waits until `done`: a worker (of any pool) runs other jobs of its pool meanwhile; any other
/// thread parks, and is unparked by whoever makes `done` true.
pub fn wait_on(here: Option<&WorkerThread>, done: impl Fn() -> bool) {
    match here {
        Some(worker) => worker.wait_until(done),
        None => {
            while !done() {
                thread::park();
            }
        }
    }
}

/// Counts a job in its scope, unless `scope` is null.
///
/// # Safety
/// `scope` is null or a live latch on which the calling job holds a count.
unsafe fn count_in(scope: *const CountLatch) {
    // SAFETY: the caller's contract (the count it holds keeps the latch above zero).
    if let Some(latch) = unsafe { scope.as_ref() } {
        latch.increment();
    }
}

/// How many admission waits of other spawns a thread goes through above a waiting spawn before
/// a wait there publishes it (see [`WaitingSpawn`]): a spawn buried that briefly gets its token
/// back soon, on this thread, and registering it only costs.
const BURIED_WAITS: u64 = 2;

/// A spawn of this thread waiting for admission in the help-first loop, as the waits above it
/// on the same thread see it. The loop registers nothing: a token freed by a job it runs reaches
/// it through the `Spare`. But once a job that the loop runs waits itself, the spawn is buried
/// under that wait for as long as it takes, where a token freed on another thread could not
/// reach it; so that wait *publishes* it first: registers it in the token table, as the slow path
/// does, and its granter makes it runnable (rule 5). The loop then waits for that grant.
struct WaitingSpawn {
    lender: *const Lender,
    /// The spawning job (the thread's current job when it spawned), whose loop this is: alive
    /// while the loop runs, where the lender may be gone once the spawn is published.
    parent: *const Lender,
    job: JobRef,
    scope: *const CountLatch,
    /// Set once published: the reference to wait on and settle, or `None` if the registration
    /// admitted the job at once (then it is runnable).
    published: OnceCell<Option<LenderRef>>,
    /// The thread's count of admission waits when the spawn began to wait (its own included).
    since: u64,
}

/// How a help-first loop ended.
enum Helped {
    /// Admitted on a token the loop found; `counted`: with a place in the scope's count.
    Admitted { counted: bool },
    /// Registered by a wait above the loop (see [`WaitingSpawn`]); maybe admitted already.
    Published,
    /// The thread's deque ran dry first.
    Dry,
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "Box<dyn Any>"
    }
}

std::thread_local! {
    static WORKER: Cell<*const WorkerThread> = const { Cell::new(ptr::null()) };
}

/// The scope of the spawn waiting in `help_until_admitted`, and whether a finished job of that
/// scope handed it its place in the scope's count (with its token, in `Spare`). Plain cells: only
/// the owning thread touches them.
struct CountHandoff {
    scope: Cell<*const CountLatch>,
    passed: Cell<bool>,
}

impl Default for CountHandoff {
    fn default() -> Self {
        CountHandoff {
            scope: Cell::new(ptr::null()),
            passed: Cell::new(false),
        }
    }
}

/// A worker thread's own state, reachable from its thread-local.
pub struct WorkerThread {
    deque: Worker<JobRef>,
    index: usize,
    registry: Arc<Registry>,
    /// The lender of the job this thread is running now; null between jobs.
    current: Cell<*const Lender>,
    /// A token kept for the spawn waiting in `help_until_admitted`, from a job that loop ran.
    spare: Spare,
    /// The place in a scope's count that goes with the token in `spare`.
    handoff: CountHandoff,
    /// The `b` halves of the joins this thread is in, not yet visible to thieves.
    halves: PrivateHalves,
    /// This worker's flag in `registry.requests`, checked at every join.
    request: *const RequestFlag,
    /// State of the xorshift generator that picks the first victim to steal from.
    rng: Cell<u64>,
    /// The level of the job this thread last finished outermost, if it was a spawned job.
    spawned_level: Cell<Option<usize>>,
    /// The job whose spawn this thread waits to admit, innermost (null if none): it has a
    /// child registered for a token, or about to be, so no other code of it may spawn now.
    admitting: Cell<*const Lender>,
    /// How many `join` halves run here as part of their job (`runs_as_part_of`), each above
    /// frames of that job that are not its own (see [`WorkerThread::as_part`]).
    part_depth: Cell<u32>,
    /// The spawn waiting in the innermost help-first loop on this thread (null if none).
    waiting_spawn: Cell<*const WaitingSpawn>,
    /// Where on its stack this thread may start a job (see `stack`).
    headroom: Headroom,
    /// Whether another worker could grant a token to a spawn of this one: the pool has more
    /// than one worker (see [`WorkerThread::publish_waiting_spawn`]).
    grants_elsewhere: bool,
    /// This worker's row of its pool's event counters.
    counters_row: *const Row,
}

impl WorkerThread {
    /// The calling thread's worker state, if it is a worker of some pool.
    #[inline]
    pub fn current<'a>() -> Option<&'a WorkerThread> {
        let ptr = WORKER.with(Cell::get);
        // SAFETY: the pointer is set by `main_loop` for the thread's whole life as a worker, to
        // a `WorkerThread` on that thread's stack, or by `borrowed::enter` for a call, to one in
        // the thread's thread-local; either outlives every job the thread runs meanwhile.
        unsafe { ptr.as_ref() }
    }

    /// The calling thread's worker state.
    ///
    /// # Safety
    /// The calling thread must be a worker.
    #[inline]
    pub unsafe fn current_unchecked<'a>() -> &'a WorkerThread {
        // SAFETY: the caller's contract.
        unsafe { &*WORKER.with(Cell::get) }
    }

    /// This worker's index in its pool.
    pub fn index(&self) -> usize {
        self.index
    }

    /// This worker's pool.
    #[inline]
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The raw pointer to the current job's lender (for join halves).
    #[inline]
    pub fn current_ptr(&self) -> *const Lender {
        self.current.get()
    }

    /// Runs `wait`, a wait of the current job's spawn for its admission, with that job marked as
    /// admitting (see [`WorkerThread::runs_as_part_of`]).
    fn while_admitting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let outer = self.admitting.replace(self.current.get());
        let value = wait();
        self.admitting.set(outer);
        value
    }

    /// Whether a `join` half of the job `parent`, met by this thread after its promotion, may
    /// run here as part of that job (`JoinJob::run`): `parent` is the current job, so every
    /// frame above its `join` is its own (another job's run makes itself current), and no spawn
    /// of it waits for admission (a job has one child waiting for its token at most).
    #[inline]
    pub fn runs_as_part_of(&self, parent: *const Lender) -> bool {
        parent == self.current.get() && !self.current_admits()
    }

    /// Runs `half`, a `join` half that runs as part of the current job above frames of it that
    /// are not its own (`runs_as_part_of`), one level deeper in [`WorkerThread::part_depth`].
    pub fn as_part<T>(&self, half: impl FnOnce() -> T) -> T {
        self.part_depth.set(self.part_depth.get() + 1);
        let value = half();
        self.part_depth.set(self.part_depth.get() - 1);
        value
    }

    /// How many `join` halves run on this thread as part of their job now: code that compares
    /// it with the depth it saw when it started tells its own frames from a half's that runs
    /// above them with the same current job (`try_scope` links scopes so).
    #[inline]
    pub fn part_depth(&self) -> u32 {
        self.part_depth.get()
    }

    /// Whether the current job waits to admit one of its spawns.
    #[inline]
    fn current_admits(&self) -> bool {
        let current = self.current.get();
        !current.is_null() && current == self.admitting.get()
    }

    /// Runs `f` with `job` as this thread's current job, above the private halves kept now.
    #[inline]
    pub fn with_current<T>(&self, job: *const Lender, f: impl FnOnce() -> T) -> T {
        let outer = self.current.replace(job);
        let outer_base = self.halves.enter_job();
        let value = f();
        self.halves.leave_job(outer_base);
        self.current.set(outer);
        value
    }

    /// Runs an admitted job's `body` (which must not unwind), then finishes the job. `spawned`:
    /// the job was spawned (not a join's half or a call's root), so thief pacing may judge it.
    #[inline]
    pub fn run_admitted(&self, lender: LenderRef, spawned: bool, body: impl FnOnce()) {
        self.start_job(|| self.with_current(LenderRef::as_ptr(&lender), body));
        // Jobs run inside this one finished before it: what is left here is the outermost
        // job's (`run_stolen` reads it).
        self.spawned_level.set(spawned.then(|| lender.level()));
        // A job that `help_until_admitted` ran finishes with the spawning job current again;
        // one that finishes deeper, with another job current, releases its token as usual.
        let wanted = self.spare.for_job();
        let spare = (!wanted.is_null() && wanted == self.current.get()).then_some(&self.spare);
        self.registry.finish_job(lender, spare);
    }

    /// The help-first loop of a spawn that found no token free: runs the newest jobs of this
    /// worker's deque (usually the siblings whose tokens the spawn waits for, so running one
    /// frees a token without any queueing or wake-up) until the spawn's job is admitted, on a
    /// token one of them left in `spare` or by `try_admit`, or until a wait above the loop
    /// published it (see [`WaitingSpawn`]). A published spawn's admission comes from its granter.
    fn help_until_admitted(&self, spawn: &WaitingSpawn) -> Helped {
        // This loop is a wait above the waiting spawn below it, if there is one.
        self.publish_waiting_spawn();
        let outer = self.spare.want(self.current.get());
        let outer_scope = self.handoff.scope.replace(spawn.scope);
        let below = self.waiting_spawn.replace(spawn);
        // SAFETY: `lender` is valid while the job is not runnable, as in `admit`; the loop stops
        // at the first sign that it may be (an admission, or a publication).
        let lender = || unsafe { &*spawn.lender };
        let helped = loop {
            let Some(ready) = self.pop() else {
                break Helped::Dry;
            };
            // SAFETY: jobs in the deque are alive and run once, on a worker of their pool.
            unsafe { ready.run() };
            // Published, the job may be runnable (its granter pushed it) and may have run and
            // freed its lender: it is not touched here again.
            if spawn.published.get().is_some() {
                break Helped::Published;
            }
            let registry = &self.registry;
            if let Some((how, counted)) = registry.tokens.admit_spare(lender(), &self.spare) {
                if counted {
                    registry.note_carried_in(self, lender(), how);
                } else {
                    registry.note_admitted(lender(), how);
                }
                break Helped::Admitted {
                    counted: self.handoff.passed.replace(false),
                };
            }
            if registry.try_admit_on(self.index, lender()) {
                break Helped::Admitted { counted: false };
            }
        };
        debug_assert!(!self.handoff.passed.get(), "a scope count handed to no one");
        self.waiting_spawn.set(below);
        self.handoff.scope.set(outer_scope);
        self.spare.restore(outer);
        helped
    }

    /// A wait begins on this thread, above the spawn waiting in the innermost help-first loop,
    /// if there is one: publishes that spawn (see [`WaitingSpawn`]) if the job that waits now is
    /// a sibling of it holding a pool token, the thread has waited for `BURIED_WAITS` other
    /// admissions since the spawn began to wait, and another worker could grant it.
    ///
    /// Published, the spawn gets the first token that frees anywhere, and its granter pushes it
    /// where that thread runs it: a freed token reaches the shallowest waiting spawn, not only
    /// the deepest one on each thread. A spawning loop buried under one of its children that
    /// holds a pool token (its loan is elsewhere, with another child) then keeps feeding other
    /// workers while it is buried; left unpublished, its loan came back to it unused until this
    /// thread returned to it, and idle workers took the buried child's tiny jobs one at a time.
    /// Its cost: a registration and a settlement, several shared read-modify-writes where the
    /// `Spare` needs none, so it is skipped where it gains little: when the waiting job is not a
    /// sibling on a pool token (in a recursive split it holds the spawning job's loan, which
    /// comes back here, to the `Spare`), and while the spawn has been buried only briefly (the
    /// seed's indexer buries its walk under a file job for two chunk jobs at a time, and
    /// publishing those cost it a few percent and doubled its peak files in flight).
    #[inline]
    fn publish_waiting_spawn(&self) {
        if !self.grants_elsewhere {
            return;
        }
        // SAFETY: a pointer set by `help_until_admitted` to a spawn on its own frame, which is
        // below this one on the stack and restores the pointer before it returns.
        let Some(spawn) = (unsafe { self.waiting_spawn.get().as_ref() }) else {
            return;
        };
        // SAFETY: the current job runs on this thread, so its lender is alive. (The spawn's own
        // lender may not be: once published, its job may have run and been freed.)
        let sibling = || {
            unsafe { self.current.get().as_ref() }
                .is_some_and(|job| job.is_pool_child_of(spawn.parent))
        };
        let buried = || self.waits().wrapping_sub(spawn.since) >= BURIED_WAITS;
        if spawn.published.get().is_none() && buried() && sibling() {
            self.publish(spawn);
        }
    }

    /// Registers `spawn`, waiting in the innermost help-first loop, in the token table (see
    /// [`WorkerThread::publish_waiting_spawn`]).
    #[cold]
    #[inline(never)]
    fn publish(&self, spawn: &WaitingSpawn) {
        // The innermost help-first loop is the spawn's own, so these name it (or nothing).
        self.spare.restore(ptr::null());
        self.handoff.scope.set(ptr::null());
        let registry = &self.registry;
        // Admitted at once (its parent's token is back), the job goes where the worker that
        // asked finds it first: pushed here, this thread's next pop would take it.
        let inject = |job| registry.inject(job);
        // SAFETY: the spawn's job is not runnable yet and its lender is registered nowhere (it
        // was not published), as `admit`'s contract requires of its caller.
        let registered = unsafe {
            registry.register_waiter(spawn.lender, spawn.job, spawn.scope, Some(self), inject)
        };
        let _ = spawn.published.set(registered);
    }

    /// A job of `scope` that this thread ran has finished: counts it out of `scope`, unless its
    /// token was just kept in `spare` for a spawn of the same scope waiting in
    /// `help_until_admitted` (the loop that ran it). Then the spawned job takes over the
    /// finished one's place in the count, and the scope's shared counter is not touched at all:
    /// in a spawning loop at saturation that is most spawns.
    ///
    /// # Safety
    /// `scope` is alive, and the finished job holds a place in its count.
    #[inline]
    pub unsafe fn count_down(&self, scope: *const CountLatch) {
        if self.spare.holds() && self.handoff.scope.get() == scope && !self.handoff.passed.get() {
            self.handoff.passed.set(true);
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { CountLatch::decrement(scope, &self.registry) };
    }

    /// How many admissions this worker has waited for (its `AdmissionWaits` count): the clock
    /// that says how long a waiting spawn has been buried (see [`WaitingSpawn::since`]).
    #[inline]
    fn waits(&self) -> u64 {
        // SAFETY: the row is this worker's, in the registry its `Arc` keeps alive. Relaxed: the
        // worker's own count, written only by this thread.
        unsafe { &(*self.counters_row)[Counter::AdmissionWaits as usize] }.load(Ordering::Relaxed)
    }

    /// Counts an event in this worker's own row of its pool's counters.
    #[inline]
    pub fn bump(&self, counter: Counter) {
        // SAFETY: the row is this worker's, in the registry its `Arc` keeps alive.
        unsafe { bump_own(self.counters_row, counter) };
    }

    /// Starts `job`, the run of a job (or of a join half as part of its joiner's job) on this
    /// thread, where the stack has room for it: every job starts through here (see `stack`).
    #[inline]
    pub fn start_job(&self, job: impl FnOnce()) {
        let on_segment = || self.bump(Counter::StackSegments);
        self.headroom.start(job, on_segment);
    }

    /// Keeps a join's `b` private to this thread (see `lazy`); returns its slot. Serves a
    /// pending work request first thing, so the half just kept may be the one promoted.
    #[inline]
    pub fn push_half(&self, half: JobRef) -> usize {
        let slot = self.halves.push(half);
        crate::chaos::point();
        // Whether a half was promoted does not matter here: the joiner runs `a` either way.
        let _ = self.serve_request();
        slot
    }

    /// Whether this join may skip keeping its `b` at all: the current job keeps enough private
    /// halves below it for any thief that asks, and none asks now. Halves of other jobs, buried
    /// under this one while they wait, do not count: this job's own `b`s must be kept, so that a
    /// wait in its `a` can take them (`take_own_half`) whatever it runs above.
    #[inline]
    pub fn join_plainly(&self) -> bool {
        // SAFETY: the flag lives in the registry, which this worker's `Arc` keeps alive.
        self.halves.kept_by_current_job() >= crate::lazy::KEPT_HALVES
            && !unsafe { &*self.request }.is_raised()
    }

    /// Whether the half kept in `slot` is still private, for its joiner to run inline; drops the
    /// slot either way.
    #[inline]
    pub fn take_back_half(&self, slot: usize) -> bool {
        self.halves.take_back(slot)
    }

    /// If an idle worker asked this one for work, promotes the oldest private half to the deque.
    /// Returns whether it promoted one.
    #[inline]
    fn serve_request(&self) -> bool {
        // SAFETY: the flag lives in the registry, which this worker's `Arc` keeps alive.
        unsafe { &*self.request }.take() && self.promote_oldest()
    }

    #[cold]
    fn promote_oldest(&self) -> bool {
        let half = self.take_own_half();
        if let Some(half) = half {
            // The thread that asked may be settling into sleep, and missing it would leave it
            // asleep while this thread's remaining halves stay private (a sleeper asks no more).
            self.push_waking(half);
        }
        half.is_some()
    }

    /// Promotes the oldest private half for this thread itself to run, as if a thief had asked
    /// (`JoinJob::run` runs it like any half taken from a deque: as part of its joiner's job if
    /// that is the current one, else admitted or handed back). A thread that waits
    /// and finds no other work does this: the half's job may be what it waits for (a `join`
    /// whose `a` waits for `b` to start, across pools), and no one else may be there to ask.
    fn take_own_half(&self) -> Option<JobRef> {
        let half = self.halves.promote_oldest()?;
        self.bump(Counter::Promotions);
        Some(half)
    }

    /// Asks other workers to promote a join half, for this idle one to steal: a random one while
    /// it spins, `everyone` before it sleeps (a sleeper asks no more, so its last request must
    /// reach whichever worker is busy).
    fn ask_for_work(&self, everyone: bool) {
        let n = self.registry.num_threads();
        if n == 1 {
            return;
        }
        if everyone {
            (0..n)
                .filter(|&v| v != self.index)
                .for_each(|v| self.registry.requests.flag(v).raise());
        } else {
            let victim = (self.index + 1 + self.next_random() % (n - 1)) % n;
            self.registry.requests.flag(victim).raise();
        }
    }

    /// Runs one pending job, if there is one (`yield_now`, `yield_local`): from this worker's
    /// deque only when `local`, else from wherever [`WorkerThread::find_work`] looks. Returns
    /// whether it ran one. The job runs above the yielding job as a helped job runs above a
    /// wait: it started later, so the proof of B3 covers it (design §4.1), and it starts
    /// through its own `run` like every job, so B5 does too. Private join halves are left
    /// alone: the current job's would run as part of it anyway, a buried job's would be
    /// handed back.
    pub fn yield_one(&self, local: bool) -> bool {
        let job = if local { self.pop() } else { self.find_work() };
        let Some(job) = job else { return false };
        // SAFETY: jobs in the queues are alive and run once, on a worker of their pool.
        unsafe { job.run() };
        true
    }

    /// Whether this worker has work of its own pending: jobs in its deque, or private join
    /// halves (`current_thread_has_pending_tasks`). Racy by nature: thieves take from the
    /// deque at any time.
    pub fn has_local_work(&self) -> bool {
        !self.deque.is_empty() || self.halves.any()
    }

    /// Pushes a job to this worker's deque with the fence of `Sleep::new_work`, unlike other
    /// pushes there: a sleeper that is settling down is woken, not missed, for a job that
    /// another worker must take even if this one never waits (a promoted half, a
    /// `join_context` half).
    pub fn push_waking(&self, job: JobRef) {
        self.deque.push(job);
        self.registry.sleep.new_work();
    }

    /// Pushes a job to this worker's deque, where thieves can take it.
    pub fn push(&self, job: JobRef) {
        self.deque.push(job);
        self.registry.sleep.new_local_work();
    }

    /// Pops the most recently pushed job of this worker's deque.
    #[inline]
    pub fn pop(&self) -> Option<JobRef> {
        self.deque.pop()
    }

    /// Runs other jobs until `done`, sleeping when there are none.
    pub fn wait_until(&self, done: impl Fn() -> bool) {
        self.publish_waiting_spawn();
        let mut idle = 0;
        let mut pacing = Pacing::new();
        while !done() {
            // Private halves of the jobs this thread waits in are work a thief may ask for (a
            // request stays up while there is none, for the next join to serve). A half just
            // promoted is left to the thief for this round: the thread's own pop would win it.
            // While the current job waits to admit a spawn, its halves are neither promoted nor
            // taken: no token is free to admit one, and it could not run as part of the job
            // (`runs_as_part_of`), so it would be handed back, out of reach of a later wait of
            // the job that needs it (shape 2 across pools). Kept private, that wait takes it.
            let admitting = self.current_admits();
            let served = self.halves.any() && !admitting && self.serve_request();
            // broadcast: the inbox after the own deque, before the injector and stealing.
            let local = if served {
                self.steal_injected()
            } else {
                self.deque
                    .pop()
                    .or_else(|| self.take_pinned())
                    .or_else(|| self.steal_injected())
            };
            // With the index of the worker it was stolen from, if it was.
            let found = local
                .map(|job| (job, None))
                .or_else(|| self.steal_from_others().map(|(job, v)| (job, Some(v))))
                .or_else(|| {
                    let own = (!served && !admitting).then(|| self.take_own_half());
                    own.flatten().map(|job| (job, None))
                });
            crate::chaos::point();
            if let Some((job, victim)) = found {
                match victim {
                    Some(victim) => self.run_stolen(job, victim, &mut pacing),
                    // SAFETY: jobs in the queues are alive and run once, on a worker of their
                    // pool.
                    None => unsafe { job.run() },
                }
                idle = 0;
                continue;
            }
            if served {
                // The thief's window. Never sleep after such a round: it did not look at this
                // thread's own deque or private halves, and a sleeper must have none (the half
                // it waits for may be one of them), but for those of a job that waits to admit
                // a spawn: that wait ends with a grant, which wakes this thread.
                thread::yield_now();
                continue;
            }
            if idle < SPIN_ROUNDS {
                self.ask_for_work(false);
                idle += 1;
                thread::yield_now();
            } else {
                // Every busy worker will promote a half at its next join, and that promotion
                // wakes a sleeper (`promote_oldest`): no private work outlives every awake thief.
                self.ask_for_work(true);
                // broadcast: an inbox is to its worker what a latch is to its owner: its pusher
                // wakes this worker by index (`wake_worker`), so the check under the sleep flag
                // must see it, with `done`.
                let done_or_pinned = || done() || self.has_pinned();
                self.registry
                    .sleep
                    .sleep(self.index, || self.has_work(), done_or_pinned);
                pacing.forget();
            }
        }
    }

    /// Waits until `done`, running only what `own` runs (work of the waiting code's own, such
    /// as the items of an ordered stream; it returns whether it ran something) and the jobs
    /// pinned to this worker (a broadcast waits for this very thread), and sleeping aside
    /// otherwise (`Sleep::sleep_aside`: announcements of new work pass it by). Never a job from
    /// a deque or the injector: such a job could bury the wait under unrelated work that
    /// outlives `done` (rayon #858), so whatever `done` waits for must progress without this
    /// thread (design §4.13). Whoever makes `done` true wakes this worker by index
    /// ([`WakeTarget::Worker`](crate::latch::WakeTarget)).
    pub fn wait_for_own(&self, done: impl Fn() -> bool, mut own: impl FnMut() -> bool) {
        let mut idle = 0;
        while !done() {
            if own() {
                idle = 0;
                continue;
            }
            if let Some(job) = self.take_pinned() {
                // SAFETY: a pinned job is admitted and runs once, on its worker.
                unsafe { job.run() };
                idle = 0;
                continue;
            }
            if idle < SPIN_ROUNDS {
                idle += 1;
                thread::yield_now();
                continue;
            }
            let sleep = &self.registry.sleep;
            sleep.sleep_aside(self.index, || self.has_pinned(), &done);
        }
    }

    /// Runs a job stolen from the deque of worker `victim`, then pauses for `STEAL_BACKOFF` if
    /// `pacing` says the job was not worth moving (see `pacing`).
    fn run_stolen(&self, job: JobRef, victim: usize, pacing: &mut Pacing) {
        let victim_queue = || self.registry.stealers[victim].len();
        let start = pacing.wants_run_time(victim_queue).then(Instant::now);
        // A join's half handed back runs nothing here: no level is left from an earlier job.
        self.spawned_level.set(None);
        // SAFETY: as in `wait_until`.
        unsafe { job.run() };
        let ran = start.map(|start| start.elapsed());
        if pacing.after_steal(ran, self.spawned_level.get(), victim_queue) {
            let until = Instant::now() + STEAL_BACKOFF;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }

    /// broadcast: the oldest job pinned to this worker (see `broadcast`).
    #[inline]
    fn take_pinned(&self) -> Option<JobRef> {
        self.registry.inboxes.take(self.index)
    }

    /// broadcast: whether a job pinned to this worker waits in its inbox.
    #[inline]
    fn has_pinned(&self) -> bool {
        self.registry.inboxes.has(self.index)
    }

    /// Own deque first (newest), then the own inbox, then the injector, then the other workers
    /// from a random start.
    fn find_work(&self) -> Option<JobRef> {
        self.deque
            .pop()
            .or_else(|| self.take_pinned())
            .or_else(|| self.steal_injected())
            .or_else(|| self.steal_from_others().map(|(job, _)| job))
    }

    fn steal_injected(&self) -> Option<JobRef> {
        loop {
            match self.registry.injector.steal_batch_and_pop(&self.deque) {
                Steal::Success(job) => return Some(job),
                Steal::Empty => return None,
                Steal::Retry => {}
            }
        }
    }

    /// Steals the oldest job of another worker's deque, from a random start; returns it with
    /// the victim's index.
    fn steal_from_others(&self) -> Option<(JobRef, usize)> {
        let stealers = &self.registry.stealers;
        let n = stealers.len();
        if n <= 1 {
            return None;
        }
        let start = self.next_random() % n;
        loop {
            let mut retry = false;
            for victim in (start..n).chain(0..start).filter(|&v| v != self.index) {
                match stealers[victim].steal() {
                    Steal::Success(job) => {
                        self.bump(Counter::Steals);
                        return Some((job, victim));
                    }
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return None;
            }
        }
    }

    fn has_work(&self) -> bool {
        !self.deque.is_empty()
            || self.has_pinned()
            || !self.registry.injector.is_empty()
            || self.registry.stealers.iter().any(|s| !s.is_empty())
    }

    fn next_random(&self) -> usize {
        // xorshift64: cheap, and only spreads thieves over victims.
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x as usize
    }
}

/// The body of a worker thread: run jobs until the pool terminates and no work is left.
/// `headroom`: the stack-headroom rule of the calling thread (see `stack`). `on_start` and
/// `on_exit` run on the thread as its worker (`current_thread_index` works there), outside any
/// job: first and last.
pub fn main_loop(
    seed: WorkerSeed,
    registry: Arc<Registry>,
    headroom: Headroom,
    on_start: impl FnOnce(usize),
    on_exit: impl FnOnce(usize),
) {
    let worker = WorkerThread::new(seed, registry, headroom);
    set_current_worker(&worker);
    on_start(worker.index);
    // SeqCst: pairs with `terminate`'s store (see `Sleep`).
    worker.wait_until(|| worker.registry.terminating.load(Ordering::SeqCst));
    // broadcast: from here on a job pinned to this worker may run where it lands instead.
    worker.registry.inboxes.close(worker.index);
    while let Some(job) = worker.find_work() {
        // SAFETY: as in `wait_until`.
        unsafe { job.run() };
    }
    on_exit(worker.index);
    set_current_worker(ptr::null());
}

/// Makes `worker` the calling thread's worker state (null: none). Whoever sets it keeps the
/// `WorkerThread` alive and in place until it resets the pointer.
pub fn set_current_worker(worker: *const WorkerThread) {
    WORKER.with(|w| w.set(worker));
}

impl WorkerThread {
    /// The worker state of `seed`'s worker, for the calling thread.
    pub fn new(seed: WorkerSeed, registry: Arc<Registry>, headroom: Headroom) -> Self {
        let request: *const RequestFlag = registry.requests.flag(seed.index);
        let grants_elsewhere = registry.num_threads() > 1;
        let counters_row = registry.counters.row(seed.index);
        WorkerThread {
            deque: seed.deque,
            index: seed.index,
            registry,
            current: Cell::new(ptr::null()),
            spare: Spare::default(),
            handoff: CountHandoff::default(),
            halves: PrivateHalves::default(),
            request,
            rng: Cell::new(
                0x9E37_79B9_7F4A_7C15 ^ (seed.index as u64 + 1).wrapping_mul(0xA24B_AED4),
            ),
            spawned_level: Cell::new(None),
            admitting: Cell::new(ptr::null()),
            part_depth: Cell::new(0),
            waiting_spawn: Cell::new(ptr::null()),
            headroom,
            grants_elsewhere,
            counters_row,
        }
    }

    /// Moves every job of this worker's deque and of its (closed) broadcast inbox to the
    /// injector, where any worker finds it: for a thread that stops running pool work for a
    /// while (`borrowed`), so that no job waits for it to come back.
    pub fn hand_over_local_jobs(&self) {
        while let Some(job) = self.deque.pop() {
            self.registry.inject(job);
        }
        // Its inbox is closed by now: a job that reaches it after this look runs where it lands.
        while let Some(job) = self.take_pinned() {
            self.registry.inject(job);
        }
    }
}
