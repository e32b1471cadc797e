//! A worker thread's own state: its deque, its private join halves, its current job, and the
//! thread-local that finds it.
//!
//! This module owns where a worker finds work (own deque, inbox, injector, other workers'
//! deques, its own private halves) and everything a registry does *as the calling thread sees
//! it* (its counter row, where it pushes, how a granter wakes it). It never waits: every loop
//! that runs jobs until something happens is `wait`'s.

use std::cell::Cell;
use std::ptr;

use crossbeam_deque::{Steal, Worker};

use crate::admission::stats::{bump_own, Counter, Row};
use crate::admission::token::{Admission, Lender, Spare};
use crate::base::job_ref::JobRef;
use crate::base::stack::Headroom;
use crate::base::sync::{thread, Arc, Ordering};
use crate::base::wake::WakeTarget;
use crate::worker::help_first::{CountHandoff, WaitingSpawn};
use crate::worker::latch::CountLatch;
use crate::worker::lazy::{PlainHalves, PlainRef, PrivateHalves, RequestFlag, ReturnedHalves};
use crate::worker::registry::{admission_counter, Registry, WorkerSeed};
use crate::worker::sleep::Sleep;

std::thread_local! {
    static WORKER: Cell<*const WorkerThread> = const { Cell::new(ptr::null()) };
}

/// A worker thread's own state, reachable from its thread-local.
pub struct WorkerThread {
    pub(super) deque: Worker<JobRef>,
    pub(super) index: usize,
    pub(super) registry: Arc<Registry>,
    /// The lender of the job this thread is running now; null between jobs.
    pub(super) current: Cell<*const Lender>,
    /// A token kept for the spawn waiting in `help_until_admitted`, from a job that loop ran.
    pub(super) spare: Spare,
    /// The place in a scope's count that goes with the token in `spare`.
    pub(super) handoff: CountHandoff,
    /// The `b` halves of the joins this thread is in, not yet visible to thieves.
    pub(super) halves: PrivateHalves,
    /// The `b` of the plain joins this thread is in (named policy **PlainHalvesKept**).
    pub(super) plain: PlainHalves<PlainRef>,
    /// Promoted halves of the jobs this thread runs that came back unrun, for those jobs'
    /// waits (named policy **HalfReturnsToItsJob**).
    pub(super) returned: ReturnedHalves,
    /// This worker's flag in `registry.requests`, checked at every join.
    pub(super) request: *const RequestFlag,
    /// `registry.sleep`, whose idle count every join looks at (see
    /// [`WorkerThread::work_wanted`]).
    pub(super) sleep: *const Sleep,
    /// Whether this worker is counted in its pool's idle count (`Sleep::idle`): from a wait
    /// round that found no work of its own until the job it then runs joins, or the wait ends.
    pub(super) counted_idle: Cell<bool>,
    /// State of the xorshift generator that picks the first victim to steal from.
    pub(super) rng: Cell<u64>,
    /// The level of the job this thread last finished outermost, if it was a spawned job.
    pub(super) spawned_level: Cell<Option<usize>>,
    /// The job whose spawn this thread waits to admit, innermost (null if none): it has a
    /// child registered for a token, or about to be, so no other code of it may spawn now.
    pub(super) admitting: Cell<*const Lender>,
    /// How many `join` halves run here as part of their job (`runs_as_part_of`), each above
    /// frames of that job that are not its own (see [`WorkerThread::as_part`]).
    pub(super) part_depth: Cell<u32>,
    /// The spawn waiting in the innermost help-first loop on this thread (null if none).
    pub(super) waiting_spawn: Cell<*const WaitingSpawn>,
    /// Where on its stack this thread may start a job (see `stack`).
    pub(super) headroom: Headroom,
    /// Whether another worker could grant a token to a spawn of this one: the pool has more
    /// than one worker (see [`WorkerThread::publish_waiting_spawn`]).
    pub(super) grants_elsewhere: bool,
    /// This worker's row of its pool's event counters.
    pub(super) counters_row: *const Row,
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
        unsafe { CountLatch::decrement(scope, self.registry.sleep()) };
    }

    /// How many admissions this worker has waited for (its `AdmissionWaits` count): the clock
    /// that says how long a waiting spawn has been buried (see [`WaitingSpawn::since`]).
    #[inline]
    pub(super) fn waits(&self) -> u64 {
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
        // A join gives this worker a private half of its own: work another one could take.
        self.count_busy();
        let slot = self.halves.push(half);
        crate::base::chaos::point();
        // Whether a half was promoted does not matter here: the joiner runs `a` either way.
        let _ = self.serve_request();
        slot
    }

    /// Whether this join may skip keeping its `b` at all: the current job keeps enough private
    /// halves below it for any thief that asks, and no work is wanted now. Halves of other jobs, buried
    /// under this one while they wait, do not count: this job's own `b`s must be kept, so that a
    /// wait in its `a` can take them (`take_own_half`) whatever it runs above.
    #[inline]
    pub fn join_plainly(&self) -> bool {
        // A job that kept halves has joined here since it started: `work_wanted`'s condition.
        self.halves.kept_by_current_job() >= crate::worker::lazy::KEPT_HALVES && !self.work_wanted()
    }

    /// Counts this worker in its pool's idle count, if it is not counted yet: it found no work
    /// of its own (its deque, its inbox, the injector), so whatever it steals next leaves it
    /// with nothing to give until that job joins. Other workers' joins publish their halves
    /// meanwhile (`WorkerThread::work_wanted`), so that the next idle moment (this worker's,
    /// at the end of what it stole) finds them public, as rayon's are.
    #[inline]
    pub(super) fn count_idle(&self) {
        if !self.counted_idle.replace(true) {
            // SAFETY: the sleep state lives in the registry, which this worker's `Arc` keeps
            // alive.
            unsafe { &*self.sleep }.idle();
        }
    }

    /// The worker is about to run a join's `b` inline (taken back private, or popped back): if
    /// no private half and no job in its deque is left, that half is all the work it has, so it
    /// counts as idle (`count_idle`) from now until the half joins. A half that joins at once
    /// (most of a fine-grained tree's) leaves the count again at once; one that runs long
    /// without joining (a coarse leaf) has other workers publish their halves meanwhile, so
    /// that this worker finds one when it runs dry.
    #[cold]
    #[inline(never)]
    pub fn runs_its_last_half(&self) {
        if !self.halves.any() && self.deque.is_empty() {
            self.count_idle();
        }
    }

    /// Takes this worker out of its pool's idle count, if it is counted: it has work of its
    /// own again (a private half, a job from its own deque), or its wait ended.
    #[inline]
    pub(super) fn count_busy(&self) {
        if self.counted_idle.get() {
            self.leave_idle();
        }
    }

    #[cold]
    fn leave_idle(&self) {
        self.counted_idle.set(false);
        // SAFETY: as in `count_idle`.
        unsafe { &*self.sleep }.not_idle();
    }

    /// Whether another worker wants work from this one now: one asked (this worker's request
    /// flag is up), or one is idle (the pool's idle count, `Sleep::idle_count`). While a worker is
    /// idle, every `join` gives out a half, as every rayon `join` pushes its `b`; while none
    /// is, a `join` writes nothing shared. Asked by a job that has made a `join` since it
    /// started here, so this worker is not counted idle itself (`push_half` counted it out).
    #[inline]
    pub fn work_wanted(&self) -> bool {
        debug_assert!(!self.counted_idle.get());
        // SAFETY: the flag and the sleep state live in the registry, which this worker's `Arc`
        // keeps alive.
        let asked = unsafe { (*self.request).is_raised() };
        asked || unsafe { &*self.sleep }.idle_count() != 0
    }

    /// Whether a worker other than this one is counted idle (this one may be, in a wait that
    /// runs a half of its own: it must not promote halves for itself).
    #[inline]
    fn others_idle(&self) -> bool {
        // SAFETY: the sleep state lives in the registry, which this worker's `Arc` keeps alive.
        unsafe { &*self.sleep }.idle_count() > usize::from(self.counted_idle.get())
    }

    /// Whether the half kept in `slot` is still private, for its joiner to run inline; drops the
    /// slot either way.
    #[inline]
    pub fn take_back_half(&self, slot: usize) -> bool {
        self.halves.take_back(slot)
    }

    /// If work is wanted (an idle worker asked this one, or any worker is idle:
    /// [`WorkerThread::work_wanted`]), promotes the oldest private half to the deque. Returns
    /// whether it promoted one.
    #[inline]
    pub(super) fn serve_request(&self) -> bool {
        // SAFETY: the flag lives in the registry, which this worker's `Arc` keeps alive.
        let asked = unsafe { &*self.request }.take();
        (asked || self.others_idle()) && self.promote_oldest()
    }

    #[cold]
    pub(super) fn promote_oldest(&self) -> bool {
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
    /// that is the current one, else admitted or sent back). A thread that waits
    /// and finds no other work does this: the half's job may be what it waits for (a `join`
    /// whose `a` waits for `b` to start, across pools), and no one else may be there to ask.
    pub(super) fn take_own_half(&self) -> Option<JobRef> {
        let half = self.halves.promote_oldest()?;
        self.bump(Counter::Promotions);
        Some(half)
    }

    /// Asks other workers to promote a join half, for this idle one to steal: a random one while
    /// it spins, `everyone` before it sleeps (a sleeper asks no more, so its last request must
    /// reach whichever worker is busy).
    pub(super) fn ask_for_work(&self, everyone: bool) {
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

    /// Whether this worker has work of its own pending: jobs in its deque, or private join
    /// halves (`current_thread_has_pending_tasks`). Racy by nature: thieves take from the
    /// deque at any time.
    pub fn has_local_work(&self) -> bool {
        !self.deque.is_empty() || self.halves.any() || self.returned.any() || self.plain.any()
    }

    /// Keeps a plain join's `b` for a wait of its job (**PlainHalvesKept**); returns its slot.
    #[inline]
    pub fn push_plain_half(&self, half: PlainRef) -> usize {
        self.plain.push(half, self.current.get())
    }

    /// The plain join of `slot` is done with `a`; its `b` is its own again.
    #[inline]
    pub fn pop_plain_half(&self, slot: usize) {
        self.plain.pop(slot);
    }

    /// Runs the newest plain join half of the current job that has not run, as part of the
    /// job; returns whether it ran one. The current job is not admitting.
    pub(super) fn run_plain_half(&self) -> bool {
        if self.plain.of_job(self.current.get()).next().is_none() {
            return false;
        }
        // Its own work: not idle while it runs (a `join` in it must not see itself idle).
        self.count_busy();
        // SAFETY: the current job's halves are alive (their joiners are below, in `a`), on this
        // thread, and the caller's job is theirs and not admitting.
        self.plain
            .of_job(self.current.get())
            .any(|half| unsafe { half.run() })
    }

    /// A promoted half of `job` (run by worker `owner` of this pool), taken by this thread and
    /// not admitted (no token free), goes back to `owner` unrun, to run as part of `job` in a
    /// wait of `job` there (named policy **HalfReturnsToItsJob**): kept here if this is
    /// `owner`, else sent to its inbox.
    pub fn return_half(&self, half: JobRef, job: *const Lender, owner: usize) {
        if owner == self.index {
            self.returned.keep(half, job);
        } else {
            self.registry
                .inboxes
                .send_back(owner, half, &self.registry.sleep);
        }
    }

    /// A half of the current job that came back unrun (`return_half`), for a wait of that job
    /// to run as part of it (`JoinJob::run`: `runs_as_part_of`). The caller's job is not
    /// admitting (else the half would only come back again).
    #[inline]
    pub(super) fn take_returned_half(&self) -> Option<JobRef> {
        self.returned.take_for(self.current.get())
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

    /// broadcast: the oldest job pinned to this worker (see `broadcast`).
    #[inline]
    pub(super) fn take_pinned(&self) -> Option<JobRef> {
        self.registry.inboxes.take(self.index)
    }

    /// broadcast: whether a job pinned to this worker waits in its inbox.
    #[inline]
    pub(super) fn has_pinned(&self) -> bool {
        self.registry.inboxes.has(self.index)
    }

    /// Own deque first (newest), then the own inbox, then the injector, then the other workers
    /// from a random start.
    pub(super) fn find_work(&self) -> Option<JobRef> {
        self.deque
            .pop()
            .or_else(|| self.take_pinned())
            .or_else(|| self.steal_injected())
            .or_else(|| self.steal_from_others().map(|(job, _)| job))
    }

    pub(super) fn steal_injected(&self) -> Option<JobRef> {
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
    pub(super) fn steal_from_others(&self) -> Option<(JobRef, usize)> {
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

    pub(super) fn has_work(&self) -> bool {
        !self.deque.is_empty()
            || self.has_pinned()
            || !self.registry.injector.is_empty()
            || self.registry.stealers.iter().any(|s| !s.is_empty())
    }

    pub(super) fn next_random(&self) -> usize {
        // xorshift64: cheap, and only spreads thieves over victims.
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x as usize
    }

    /// The worker state of `seed`'s worker, for the calling thread.
    pub fn new(seed: WorkerSeed, registry: Arc<Registry>, headroom: Headroom) -> Self {
        let request: *const RequestFlag = registry.requests.flag(seed.index);
        let sleep: *const Sleep = &registry.sleep;
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
            returned: ReturnedHalves::default(),
            plain: PlainHalves::default(),
            request,
            sleep,
            counted_idle: Cell::new(false),
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
    /// injector, where any worker finds it, and passes on a wake-up for work it may have spent
    /// without taking that work (`Sleep::pass_on`): for a thread that stops running pool work
    /// for a while (`borrowed`), so that no job waits for it to come back.
    pub fn hand_over_local_jobs(&self) {
        // It stops running pool work: it counts as idle no more (`count_idle`).
        self.count_busy();
        while let Some(job) = self.deque.pop() {
            self.registry.inject(job);
        }
        // Its inbox is closed by now: a job that reaches it after this look runs where it lands.
        while let Some(job) = self.take_pinned() {
            self.registry.inject(job);
        }
        self.registry.sleep.pass_on(|| self.has_work());
    }
}

/// Makes `worker` the calling thread's worker state (null: none). Whoever sets it keeps the
/// `WorkerThread` alive and in place until it resets the pointer.
pub fn set_current_worker(worker: *const WorkerThread) {
    WORKER.with(|w| w.set(worker));
}

impl Registry {
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

    /// Admits `lender` now if a token is free, counting it. No waiting.
    #[inline]
    pub fn try_admit(&self, lender: &Lender) -> bool {
        self.try_admit_by(self.own(WorkerThread::current()), lender)
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

    /// Counts a join half sent back to its joiner's thread unrun.
    pub fn note_handed_back(&self) {
        self.counters.bump(self.slot(), Counter::HandedBack);
    }

    /// Counts a spawn of a cancelled fallible scope dropped unrun (see `try_scope`).
    pub fn note_cancelled(&self) {
        self.counters.bump(self.slot(), Counter::Cancelled);
    }

    /// How a granter wakes the calling thread.
    pub fn waker_for(&self, here: Option<&WorkerThread>) -> WakeTarget {
        match here {
            Some(w) if w.registry.id == self.id => WakeTarget::Worker(w.index),
            Some(w) => WakeTarget::Foreign(std::sync::Arc::new(w.registry.clone()), w.index),
            None => WakeTarget::Thread(thread::current()),
        }
    }

    #[inline]
    pub(super) fn note_admitted(&self, lender: &Lender, how: Admission) {
        self.note_admitted_by(self.own(WorkerThread::current()), lender, how);
    }

    /// [`Registry::try_admit`] by the calling thread, `own` if it is a worker of this pool.
    #[inline]
    pub(super) fn try_admit_by(&self, own: Option<&WorkerThread>, lender: &Lender) -> bool {
        match self.tokens.try_admit(lender) {
            Some(how) => {
                self.note_admitted_by(own, lender, how);
                true
            }
            None => false,
        }
    }

    /// [`Registry::note_admitted`] by the calling thread, `own` if it is a worker of this pool
    /// (which counts the event in its own row, found without a lookup).
    #[inline]
    pub(super) fn note_admitted_by(
        &self,
        own: Option<&WorkerThread>,
        lender: &Lender,
        how: Admission,
    ) {
        match own {
            Some(worker) => worker.bump(admission_counter(how)),
            None => self
                .counters
                .bump(self.num_threads(), admission_counter(how)),
        }
        self.counters.job_admitted(lender.level());
    }

    /// Pushes an admitted job: to the calling worker's deque if it is one of ours, else to the
    /// injector.
    #[inline]
    pub fn make_runnable(&self, job: JobRef) {
        self.make_runnable_on(self.own(WorkerThread::current()), job);
    }

    /// [`Registry::make_runnable`] on `own`, the calling thread if it is a worker of this pool.
    #[inline]
    pub(super) fn make_runnable_on(&self, own: Option<&WorkerThread>, job: JobRef) {
        match own {
            Some(w) => w.push(job),
            None => self.inject(job),
        }
    }

    /// The calling thread's counter slot.
    #[inline]
    pub(super) fn slot(&self) -> usize {
        match WorkerThread::current() {
            Some(w) if w.registry.id == self.id => w.index,
            _ => self.num_threads(),
        }
    }
}
