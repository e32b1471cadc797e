//! A worker thread's own state: its deque, its split stack of join halves, its current job,
//! and the thread-local that finds it.
//!
//! This module owns where a worker finds work (own deque, inbox, injector, other workers'
//! deques and public halves, its own halves) and everything a registry does *as the calling thread sees
//! it* (its counter row, where it pushes, how a granter wakes it). It never waits: every loop
//! that runs jobs until something happens is `wait`'s.

use std::cell::Cell;
use std::ptr;

use crossbeam_deque::{Steal, Worker};

use crate::admission::stats::{bump_own, Counter, Row};
use crate::admission::token::{Admission, Lender, Spare};
use crate::base::half_stack::{Back, HalfOwner, Place, Steal as HalfSteal};
use crate::base::job_ref::JobRef;
use crate::base::stack::Headroom;
use crate::base::sync::{thread, Arc, Ordering};
use crate::base::trace::Recorder;
use crate::base::wake::WakeTarget;
use crate::worker::half::{Half, HalfRun};
use crate::worker::help_first::{CountHandoff, WaitingSpawn};
use crate::worker::latch::CountLatch;
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
    /// The `b` of every join this thread is in, until its joiner takes it back: the owner's end
    /// of its split stack (`base::half_stack`), whose other end is `registry.halves[index]`.
    pub(super) halves: HalfOwner,
    /// The first slot of `halves` above the current job's start: the current job's own halves
    /// are `[job_base, top)`.
    pub(super) job_base: Cell<usize>,
    /// The innermost call this thread makes into another pool, in progress (null if none):
    /// the halves of the jobs that wait for such calls may run on credit (named policy
    /// **CalledOutHalfOnCredit**, [`WorkerThread::calling_out`]).
    pub(super) calls_out: Cell<*const CallOut>,
    /// `registry.sleep`, whose idle count every join looks at (see
    /// [`WorkerThread::push_half`]).
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
    /// Where this worker records events while its pool is traced (`tracing`); `None` when off.
    pub(super) trace: Option<Box<Recorder>>,
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

    /// Runs `f` with `job` as this thread's current job, above the halves kept now.
    #[inline]
    pub fn with_current<T>(&self, job: *const Lender, f: impl FnOnce() -> T) -> T {
        let outer = self.current.replace(job);
        let outer_base = self.job_base.replace(self.halves.top());
        let value = f();
        self.job_base.set(outer_base);
        self.current.set(outer);
        value
    }

    /// Runs `wait`, this thread's wait for a call the current job made into another pool, with
    /// the job's halves marked as waiting below the call (named policy
    /// **CalledOutHalfOnCredit**): the call may wait for one of them (a `join` whose `a` waits,
    /// through the other pool, for its `b`), and a job this thread runs above them meanwhile
    /// may hold the token such a half would need.
    pub fn calling_out<T>(&self, wait: impl FnOnce() -> T) -> T {
        let call = CallOut {
            halves: self.job_base.get()..self.halves.top(),
            outer: self.calls_out.get(),
        };
        self.calls_out.set(&call);
        let value = wait();
        self.calls_out.set(call.outer);
        value
    }

    /// Whether a job of this thread waits for a call into another pool now.
    #[inline]
    pub(super) fn waits_for_a_call(&self) -> bool {
        !self.calls_out.get().is_null()
    }

    /// Whether the half in `slot` is a half of a job that waits for a call into another pool
    /// (see [`WorkerThread::calling_out`]).
    fn waits_for_call(&self, slot: usize) -> bool {
        let mut call = self.calls_out.get();
        // SAFETY: each `CallOut` in the list lives on the frame of a `calling_out` below, which
        // unlinks it before it returns.
        while let Some(c) = unsafe { call.as_ref() } {
            if c.halves.contains(&slot) {
                return true;
            }
            call = c.outer;
        }
        false
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

    /// Keeps a join's `b` private to this thread, in its split stack; returns its slot, or
    /// `None` if the stack is full. The joiner then looks at [`WorkerThread::any_idle`].
    ///
    /// While the pool is traced this always returns `None` (`HalfOwner::push_out_of_line`):
    /// the joiner's out-of-line path then keeps the half with [`WorkerThread::push_half_traced`].
    #[inline]
    pub fn push_half(&self, half: *const ()) -> Option<usize> {
        let slot = self.halves.push(half)?;
        crate::base::chaos::point();
        Some(slot)
    }

    /// [`WorkerThread::push_half`] for a traced pool: `None` when the pool is not traced or the
    /// split stack is full.
    #[cold]
    pub fn push_half_traced(&self, half: *const ()) -> Option<usize> {
        self.trace.as_ref()?;
        let slot = self.halves.push_any(half)?;
        crate::base::chaos::point();
        Some(slot)
    }

    /// Whether any worker is counted idle, this one or another: a joiner that sees it calls
    /// [`WorkerThread::idle_at_join`] before `a`. A worker counted idle is counted in this very
    /// count, so one load says both whether this one must leave it and whether another one may
    /// want a half.
    #[inline]
    pub fn any_idle(&self) -> bool {
        // SAFETY: the sleep state lives in the registry, which this worker's `Arc` keeps alive.
        unsafe { (*self.sleep).idle_count() != 0 }
    }

    /// A join found the idle count above zero: a join gives this worker a private half of its
    /// own, work another one could take, so it is busy; then, if another worker is idle,
    /// promotes its oldest private half (it may be the one just kept; whether one was
    /// promoted does not matter here: the joiner runs `a` either way).
    #[cold]
    #[inline(never)]
    pub fn idle_at_join(&self) {
        self.count_busy();
        let _ = self.serve_idle();
    }

    /// Makes every private half up to the one in `slot` public at once, and announces it
    /// (`join_context`, whose `b` must be visible to thieves while `a` runs).
    pub fn publish_through(&self, slot: usize) {
        while self.halves.place(slot) == Place::Private && self.halves.promote() {
            self.bump(Counter::Promotions);
            self.trace_promote();
        }
        self.registry.sleep.new_work_after_seqcst_rmw();
    }

    /// Counts this worker in its pool's idle count, if it is not counted yet: it found no work
    /// of its own (its deque, its inbox, the injector), so whatever it steals next leaves it
    /// with nothing to give until that job joins. Other workers' joins publish their halves
    /// meanwhile (`WorkerThread::push_half`), so that the next idle moment (this worker's,
    /// at the end of what it stole) finds them public, as rayon's are.
    #[inline]
    pub(super) fn count_idle(&self) {
        if !self.counted_idle.replace(true) {
            // SAFETY: the sleep state lives in the registry, which this worker's `Arc` keeps
            // alive.
            unsafe { &*self.sleep }.idle();
        }
    }

    /// The worker is about to run a join's `b` inline (its last private half, or taken back from
    /// the public part): if no other half of its own is unclaimed (private, or public with no
    /// taker yet) and no job in its deque is left, that half is all the work it has, so it
    /// counts as idle (`count_idle`) from now until the half joins. A half that joins at once
    /// (most of a fine-grained tree's) leaves the count again at once; one that runs long
    /// without joining (a coarse leaf) has other workers publish their halves meanwhile, so
    /// that this worker finds one when it runs dry.
    ///
    /// An unclaimed public half below is work of its own: this thread takes it back when its
    /// frame returns, unless a thief has claimed it first, so it is not about to run dry.
    /// Counted idle there, it made the other workers promote at every `join` while all were
    /// busy, and those halves came back retracted, which counted their threads idle in turn
    /// (docs/benchmarks-notes.md, "A last half is the last unclaimed one").
    #[inline]
    pub fn runs_its_last_half(&self) {
        if !self.counted_idle.get() {
            self.count_idle_if_out_of_work();
        }
    }

    #[cold]
    #[inline(never)]
    fn count_idle_if_out_of_work(&self) {
        if !self.halves.has_unclaimed() && self.deque.is_empty() {
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

    /// Whether a worker other than this one is counted idle (this one may be, in a wait that
    /// runs a half of its own: it must not promote halves for itself).
    #[inline]
    fn others_idle(&self) -> bool {
        // SAFETY: the sleep state lives in the registry, which this worker's `Arc` keeps alive.
        unsafe { &*self.sleep }.idle_count() > usize::from(self.counted_idle.get())
    }

    /// The joiner of the half in `slot` is done with `a`: takes it back and returns true if it
    /// is private with another private half below (the fast path); else changes nothing.
    #[inline]
    pub fn take_back_private(&self, slot: usize) -> bool {
        self.halves.take_back_private(slot)
    }

    /// The joiner of the half in `slot`, made public at its push, is done with `a`: takes it
    /// back and returns true if it is the newest public half and unclaimed; else changes
    /// nothing (see [`HalfOwner::take_back_newest_public`]).
    #[inline]
    pub fn take_back_newest_public(&self, slot: usize) -> bool {
        self.halves.take_back_newest_public(slot)
    }

    /// The joiner of the half in `slot` is done with `a`: where the half is now (see
    /// [`HalfOwner::take_back`]).
    #[inline]
    pub fn take_back_half(&self, slot: usize) -> Back {
        self.halves.take_back(slot)
    }

    /// The half in `slot`, claimed by a taker, is settled and its result taken: frees the slot.
    pub fn release_taken_half(&self, slot: usize) {
        self.halves.release_taken(slot);
    }

    /// If another worker is idle, promotes the oldest private half. Returns whether it
    /// promoted one.
    #[inline]
    pub(super) fn serve_idle(&self) -> bool {
        self.others_idle() && self.promote_oldest()
    }

    /// Makes the oldest private half public, and announces it. Returns whether there was one.
    #[cold]
    pub(super) fn promote_oldest(&self) -> bool {
        if !self.halves.promote() {
            return false;
        }
        self.bump(Counter::Promotions);
        self.trace_promote();
        // The thread that asked may be settling into sleep, and missing it would leave it
        // asleep while this thread's remaining halves stay private (a sleeper asks no more).
        self.registry.sleep.new_work_after_seqcst_rmw();
        true
    }

    /// A wait of the current job that found no other work: runs one of this thread's halves,
    /// and returns whether it ran one. In order:
    ///
    /// 1. the current job's newest half not run yet, in place, as part of the job: private, or
    ///    public and taken back, or declined by a taker (not while the job admits a spawn:
    ///    named policy **AdmittingKeepsHalves**);
    /// 2. a half of a job that waits for a call into another pool, private or declined by a
    ///    taker, admitted, else on credit (**CalledOutHalfOnCredit**);
    /// 3. the thread's oldest unclaimed half, claimed as a thief would and run by the same rule
    ///    (`HalfRun::Taken`: as part, admitted, on credit below a call, else declined); while
    ///    the current job admits, only one below a call.
    pub(super) fn run_own_half(&self) -> bool {
        let admitting = self.current_admits();
        (!admitting && self.run_half_of_current_job())
            || self.run_half_below_call()
            || self.claim_own_half(admitting)
    }

    /// Step 1 of [`WorkerThread::run_own_half`].
    pub(super) fn run_half_of_current_job(&self) -> bool {
        for slot in (self.job_base.get()..self.halves.top()).rev() {
            let half = self.halves.get(slot) as *const Half;
            let place = self.halves.place(slot);
            // SAFETY: a half in use is alive until its joiner, below, has its result; this is
            // its owner's thread.
            let runs = unsafe { Half::runs_here(half, place == Place::Private) }
                || (place == Place::Public
                    // SAFETY: as above. A half run here while private may have been promoted
                    // since: it is public, and run.
                    && unsafe { Half::never_ran(half) }
                    && self.halves.retract_to(slot));
            if runs {
                self.count_busy();
                // SAFETY: as above; the half is the current job's, not run yet, and no taker
                // can claim it (private, or declined).
                unsafe { Half::run(half, HalfRun::Here) };
                return true;
            }
        }
        false
    }

    /// Step 2 of [`WorkerThread::run_own_half`]: a half of a job that waits for a call, not run
    /// yet and out of every taker's reach (private, or declined by a taker), buried below the
    /// current job, or the current job's own while it admits. Oldest first, whatever lies
    /// between: a half of a job that waits for no call must not hide one that does.
    fn run_half_below_call(&self) -> bool {
        let own_too = self.current_admits();
        for slot in 0..self.halves.top() {
            if slot >= self.job_base.get() && !own_too {
                break;
            }
            let half = self.halves.get(slot) as *const Half;
            // SAFETY: as in `run_half_of_current_job`; a declined half's taker is done with it.
            let runs = unsafe { Half::runs_here(half, self.halves.place(slot) == Place::Private) };
            if runs && self.waits_for_call(slot) {
                self.count_busy();
                // SAFETY: as above.
                unsafe { Half::run(half, HalfRun::OnCredit) };
                return true;
            }
        }
        false
    }

    /// Step 3 of [`WorkerThread::run_own_half`].
    fn claim_own_half(&self, only_below_call: bool) -> bool {
        loop {
            if only_below_call && !self.waits_for_call(self.halves.first_unclaimed()) {
                return false;
            }
            match self.halves.steal() {
                HalfSteal::Taken(slot, half) => {
                    self.bump(Counter::Promotions);
                    self.count_busy();
                    let credit = self.waits_for_call(slot);
                    // SAFETY: claimed here, alive until its joiner (below) has its result.
                    unsafe {
                        let half = Half::claimed_from(half, self.index);
                        Half::run(half, HalfRun::Taken { credit });
                    }
                    return true;
                }
                HalfSteal::Retry => {}
                HalfSteal::Empty if self.halves.promote() => {}
                HalfSteal::Empty => return false,
            }
        }
    }

    /// Whether a half of this thread that a wait could run was declined by a taker: one of the
    /// current job's (unless it admits), or one below a call into another pool. For the check
    /// under the sleep flag: a taker wakes the owner after it declines.
    pub(super) fn has_declined_half(&self) -> bool {
        let base = self.job_base.get();
        let admitting = self.current_admits();
        (0..self.halves.top())
            .filter(|&slot| self.halves.place(slot) == Place::Taken)
            // SAFETY: as in `run_half_of_current_job`.
            .filter(|&slot| unsafe { Half::declined(self.halves.get(slot) as *const Half) })
            .any(|slot| (slot >= base && !admitting) || self.waits_for_call(slot))
    }

    /// Whether this worker has work that a yield can run: jobs in its deque
    /// (`current_thread_has_pending_tasks`; its join halves are its joiners' to run, which no
    /// yield does). Racy by nature: thieves take from the deque at any time.
    pub fn has_local_work(&self) -> bool {
        !self.deque.is_empty()
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
    /// (public halves, deques) from a random start.
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

    /// Steals another worker's oldest public join half, else the oldest job of its deque, from
    /// a random start; returns it with the victim's index.
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
                match self.registry.halves[victim].steal() {
                    HalfSteal::Taken(_, half) => {
                        self.bump(Counter::Steals);
                        self.trace_steal(victim);
                        // SAFETY: claimed here; alive until its joiner has its result.
                        let job = unsafe { Half::as_taken_job(Half::claimed_from(half, victim)) };
                        return Some((job, victim));
                    }
                    HalfSteal::Retry => retry = true,
                    HalfSteal::Empty => {}
                }
                match stealers[victim].steal() {
                    Steal::Success(job) => {
                        self.bump(Counter::Steals);
                        self.trace_steal(victim);
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
        let others_public = || {
            (self.registry.halves.iter().enumerate())
                .any(|(v, halves)| v != self.index && halves.has_public())
        };
        !self.deque.is_empty()
            || self.has_pinned()
            || !self.registry.injector.is_empty()
            || self.registry.stealers.iter().any(|s| !s.is_empty())
            || others_public()
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
        let sleep: *const Sleep = &registry.sleep;
        let grants_elsewhere = registry.num_threads() > 1;
        let counters_row = registry.counters.row(seed.index);
        let mut halves = HalfOwner::new(registry.halves[seed.index].clone());
        let trace = (registry.trace.as_ref()).map(|t| Box::new(t.recorder(seed.index)));
        if trace.is_some() {
            // A traced join takes the out-of-line path that records its inline `b` (`join`).
            halves.push_out_of_line();
        }
        WorkerThread {
            deque: seed.deque,
            index: seed.index,
            registry,
            current: Cell::new(ptr::null()),
            spare: Spare::default(),
            handoff: CountHandoff::default(),
            halves,
            job_base: Cell::new(0),
            calls_out: Cell::new(ptr::null()),
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
            trace,
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

/// A call a job makes into another pool, in progress on its worker's thread (see
/// [`WorkerThread::calling_out`]), on that call's frame.
pub struct CallOut {
    /// The job's halves when the call began.
    halves: std::ops::Range<usize>,
    /// The call in progress below this one, if any.
    outer: *const CallOut,
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

    /// Counts a join half declined by a taker that found no token.
    pub fn note_handed_back(&self) {
        self.counters.bump(self.slot(), Counter::HandedBack);
    }

    /// Admits `lender`, a join half's, on credit (named policy **CalledOutHalfOnCredit**),
    /// never waiting.
    pub fn admit_credit_half(&self, lender: &Lender) {
        // Counted first: a snapshot that shows the credit shows the count (`admit_credit`'s
        // release), so `halves_on_credit` bounds the halves on credit in any snapshot.
        self.counters.bump(self.slot(), Counter::HalvesOnCredit);
        self.admit_credit(lender);
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
