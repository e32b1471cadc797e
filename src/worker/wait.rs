//! The wait loop: what a thread runs while it waits, and when it sleeps.
//!
//! Every wait in the pool is a call of [`wait_on`] (or of the worker's loop it calls), with a
//! *context* (the pool, and the thread's current job in it) and a *policy* that may only narrow
//! what the wait runs (docs/design.md, "The wait rule"). This module owns the loop and its
//! policies, and nothing else: what a wait waits *for* is its caller's.

use std::ptr;
use std::time::Instant;

use crate::admission::token::Lender;
use crate::base::job_ref::JobRef;
use crate::base::pacing::{Pacing, STEAL_BACKOFF};
use crate::base::stack::Headroom;
use crate::base::sync::{thread, Arc};
use crate::worker::registry::{Registry, WorkerSeed};
use crate::worker::thread::{set_current_worker, WorkerThread};

/// Rounds a worker looks for work, yielding the CPU between rounds, before it tries to sleep (a
/// throughput policy: a sleep and its wake-up cost more than a few rounds when work is a moment
/// away, as in the benches' fan-outs).
const SPIN_ROUNDS: u32 = 64;

/// What a wait may run while it waits. [`Policy::AnyAdmitted`] is the rule; every other policy
/// only narrows it (runs a subset of what the rule would run), so the one proof of B3 (design,
/// "Proofs") covers every wait: whatever a wait runs was admitted after the wait began, or is
/// part of the job that waits, and runs above it on this thread's stack.
///
/// The *context* of a wait is the pool it waits in and its current job there: a worker waits
/// in its own pool ([`WorkerThread`] is one pool's worker) with [`WorkerThread::current_ptr`]
/// as its current job; a thread that is no worker has no context and parks (**Park**,
/// [`wait_on`]): it holds no token a job could need. The help-first loop of a spawn
/// (`WorkerThread::help_until_admitted`) is the narrowest instance, **OwnDeque**: the newest
/// jobs of its own deque only, until the spawn is admitted (a throughput policy, `help_first`).
pub enum Policy<'a> {
    /// **The rule**: any admitted job of the context's pool (own deque, newest first; own inbox
    /// of pinned jobs; the injector; other workers' public halves and deques), and the join
    /// halves of this thread's split stack: promoted while work is wanted, and run by the wait
    /// itself once it finds nothing else (`WorkerThread::run_own_half`: the current job's own
    /// halves in place as part of it, else the oldest one claimed as a thief would).
    ///
    /// One narrowing belongs to the rule, **AdmittingKeepsHalves**: while the current job waits
    /// to admit a spawn ([`WorkerThread::current_admits`]), its halves are neither promoted nor
    /// run as part of it, and no other half is claimed unless it lies below a call into another
    /// pool. No token is free to admit one, and one could not run as part of the job (a job has
    /// one child waiting for its token at most, `runs_as_part_of`); kept private, the job's later
    /// wait runs it.
    AnyAdmitted,
    /// **OwnItems** (the ordered-stream consumer on a worker): only what the closure runs (the
    /// stream's own items; it returns whether it ran one) and the jobs pinned to this worker (a
    /// broadcast waits for this very thread); sleeps *aside* (`Sleep::sleep_aside`:
    /// announcements of new work pass it by). Never a job from a deque or the injector. The
    /// hang it prevents: such a job could bury the consumer under unrelated work that outlives
    /// what the consumer waits for (rayon #858), so the stream must progress without it.
    OwnItems(&'a mut dyn FnMut() -> bool),
}

/// What one round of a wait did.
enum Round {
    /// Ran a job (or an own item).
    Ran,
    /// Promoted a private half for a thief and left this round to it: looked at nothing of its
    /// own, so it must not count towards sleeping.
    ThiefWindow,
    /// Found nothing to run.
    Nothing,
}

/// Waits until `done`, in the context of the calling thread: a worker (of any pool) waits by
/// the rule ([`Policy::AnyAdmitted`]) in its own pool; any other thread parks, and is unparked by
/// whoever makes `done` true (it holds no token of any pool that a job could need: B3).
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

impl WorkerThread {
    /// Waits until `done` by the rule ([`Policy::AnyAdmitted`]).
    #[inline]
    pub fn wait_until(&self, done: impl Fn() -> bool) {
        self.wait(done, Policy::AnyAdmitted);
    }

    /// Waits until `done` by [`Policy::OwnItems`], with `own` running the waiter's own items.
    /// Whoever makes `done` true wakes this worker by index
    /// ([`WakeTarget::Worker`](crate::base::wake::WakeTarget)).
    pub fn wait_for_own(&self, done: impl Fn() -> bool, mut own: impl FnMut() -> bool) {
        self.wait(done, Policy::OwnItems(&mut own));
    }

    /// The wait loop: rounds of `policy` until `done`; after `SPIN_ROUNDS` empty rounds, sleep.
    fn wait(&self, done: impl Fn() -> bool, mut policy: Policy<'_>) {
        if let Policy::AnyAdmitted = policy {
            // A wait above a spawn waiting in the help-first loop (a throughput policy).
            self.publish_waiting_spawn();
        }
        let mut idle = 0;
        let mut pacing = Pacing::new();
        while !done() {
            let round = match &mut policy {
                Policy::AnyAdmitted => self.any_admitted_round(&mut pacing),
                Policy::OwnItems(own) => self.own_items_round(own),
            };
            match round {
                Round::Ran => idle = 0,
                // Never sleep after such a round: it did not look at this thread's own deque or
                // private halves, and a sleeper must have none (the half it waits for may be
                // one of them), but for those of a job that waits to admit a spawn: that wait
                // ends with a grant, which wakes this thread.
                Round::ThiefWindow => thread::yield_now(),
                Round::Nothing if idle < SPIN_ROUNDS => {
                    idle += 1;
                    thread::yield_now();
                }
                Round::Nothing => {
                    self.sleep_in(&policy, &done);
                    pacing.forget();
                }
            }
        }
        // Back to the code of the job that waited: busy.
        self.count_busy();
    }

    /// One round of [`Policy::AnyAdmitted`]. Inlined into the loop: a call per round costs
    /// the spawn shapes of `benches/callgrind.sh` several percent.
    #[inline(always)]
    fn any_admitted_round(&self, pacing: &mut Pacing) -> Round {
        // Private halves of the jobs this thread waits in are work an idle worker wants. A half
        // just promoted is left to the thief for this round: the thread's own claim would win
        // it.
        // AdmittingKeepsHalves: see `Policy::AnyAdmitted`.
        let kept = self.current_admits();
        let served = self.halves.has_private() && !kept && self.serve_idle();
        // broadcast: the inbox after the own deque, before the injector and stealing.
        let local = if served {
            self.steal_injected()
        } else {
            let own = self.deque.pop().or_else(|| self.take_pinned());
            // While a job of this thread waits for a call into another pool, its halves come
            // before the injector and other workers' jobs, as `b` in rayon's deque comes before
            // them (CalledOutHalfOnCredit): the call may wait for one of them, and an injected
            // job (another pool's call in) may block without ever waiting, so "no other work"
            // might never come.
            if own.is_none() && self.waits_for_a_call() && self.run_own_half() {
                return Round::Ran;
            }
            own.or_else(|| self.steal_injected())
        };
        // Out of work of its own, the worker counts as idle (`count_idle`) until it finds some:
        // a job it steals keeps it counted until that job joins; anything else is its own work.
        if local.is_none() {
            self.count_idle();
        }
        // With the index of the worker it was stolen from, if it was.
        let found = local
            .map(|job| (job, None))
            .or_else(|| self.steal_from_others().map(|(job, v)| (job, Some(v))));
        crate::base::chaos::point();
        match found {
            Some((job, Some(victim))) => self.run_stolen(job, victim, pacing),
            Some((job, None)) => {
                self.count_busy();
                // SAFETY: jobs in the queues are alive and run once, on a worker of their pool.
                unsafe { job.run() }
            }
            None if served => return Round::ThiefWindow,
            // Last: this thread's own halves.
            None if self.run_own_half() => {}
            None => return Round::Nothing,
        }
        Round::Ran
    }

    /// One round of [`Policy::OwnItems`].
    #[inline(always)]
    fn own_items_round(&self, own: &mut dyn FnMut() -> bool) -> Round {
        if own() {
            return Round::Ran;
        }
        if let Some(job) = self.take_pinned() {
            // SAFETY: a pinned job is admitted and runs once, on its worker.
            unsafe { job.run() };
            return Round::Ran;
        }
        // The current job's own code, as an item is: a half of the job not run yet (private,
        // public and taken back, or declined by a taker).
        let kept = self.current_admits();
        if !kept && self.run_half_of_current_job() {
            return Round::Ran;
        }
        // Its other private halves go to thieves, the oldest first, one a round: this wait
        // runs no deque's job, and one of them may be what an item waits for (shape 2 through
        // a stream), which a thief runs, or leaves to its job.
        if !kept && self.halves.has_private() && self.promote_oldest() {
            return Round::ThiefWindow;
        }
        Round::Nothing
    }

    /// Sleeps until woken, as `policy` sleeps: a waiter by the rule is counted idle, so every
    /// busy worker promotes a half at its next join, and that promotion wakes a sleeper
    /// (`promote_oldest`: no private work outlives every awake thief); it sleeps until new work
    /// or `done`; a waiter for its own items sleeps aside. Either wakes for a
    /// half of its own that a taker declined (`has_declined_half`): the taker wakes it by
    /// index after it declines.
    fn sleep_in(&self, policy: &Policy<'_>, done: &dyn Fn() -> bool) {
        let sleep = &self.registry.sleep;
        match policy {
            Policy::AnyAdmitted => {
                // broadcast: an inbox is to its worker what a latch is to its owner: its pusher
                // wakes this worker by index (`wake_worker`), so the check under the sleep flag
                // must see it, with `done`.
                let done_or_pinned = || done() || self.has_pinned() || self.has_declined_half();
                let since = self.trace_since();
                if sleep.sleep(self.index, || self.has_work(), done_or_pinned) {
                    self.trace_slept(since);
                }
            }
            Policy::OwnItems(_) => {
                let done_or_declined = || done() || self.has_declined_half();
                sleep.sleep_aside(self.index, || self.has_pinned(), done_or_declined)
            }
        }
    }

    /// Runs a job stolen from worker `victim` (a public half, or a job of its deque), then pauses for `STEAL_BACKOFF` if
    /// `pacing` says the job was not worth moving (see `pacing`).
    pub(super) fn run_stolen(&self, job: JobRef, victim: usize, pacing: &mut Pacing) {
        let victim_queue = || self.registry.stealers[victim].len();
        let start = pacing.wants_run_time(victim_queue).then(Instant::now);
        // A join half declined runs nothing here: no level is left from an earlier job.
        self.spawned_level.set(None);
        // SAFETY: jobs in the queues are alive and run once, on a worker of their pool.
        unsafe { job.run() };
        let ran = start.map(|start| start.elapsed());
        if pacing.after_steal(ran, self.spawned_level.get(), victim_queue) {
            let until = Instant::now() + STEAL_BACKOFF;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }

    /// Not a wait: one round, in context (this pool, the yielding job). Runs one pending job,
    /// if there is one (`yield_now`, `yield_local`): from this worker's
    /// deque only when `local`, else from wherever [`WorkerThread::find_work`] looks. Returns
    /// whether it ran one. The job runs above the yielding job as a helped job runs above a
    /// wait: it started later, so the proof of B3 covers it (design §5.1), and it starts
    /// through its own `run` like every job, so B5 does too. This thread's own join halves are
    /// left alone: the current job's run as part of it anyway, a buried job's are its own.
    pub fn yield_one(&self, local: bool) -> bool {
        let job = if local { self.pop() } else { self.find_work() };
        let Some(job) = job else { return false };
        // SAFETY: jobs in the queues are alive and run once, on a worker of their pool.
        unsafe { job.run() };
        true
    }

    /// Not a wait: runs every job this worker finds, until it finds none. The last work of a
    /// worker of a terminated pool, its inbox closed (`main_loop`; the builder's thread of
    /// `use_current_thread` leaving a call: `borrowed`), so that the queued work finishes.
    pub fn drain(&self) {
        while let Some(job) = self.find_work() {
            // SAFETY: jobs in the queues are alive and run once, on a worker of their pool.
            unsafe { job.run() };
        }
    }

    /// Runs `wait`, a wait of the current job's spawn for its admission, with that job marked as
    /// admitting (see [`WorkerThread::runs_as_part_of`]).
    #[inline]
    pub(super) fn while_admitting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let outer = self.admitting.replace(self.current.get());
        let value = wait();
        self.admitting.set(outer);
        value
    }

    /// Named policy **HalfRunsAsPart**. Whether a `join` half of the job `parent`, met by this
    /// thread after its promotion, may run here as part of that job (`JoinJob::run`): `parent` is the current job, so every
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
    pub fn current_admits(&self) -> bool {
        let current = self.current.get();
        !current.is_null() && current == self.admitting.get()
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
    // Wait site "idle worker": context (this pool, no job), policy AnyAdmitted.
    worker.wait_until(|| worker.registry.has_terminated());
    // broadcast: from here on a job pinned to this worker may run where it lands instead.
    worker.registry.inboxes.close(worker.index);
    worker.drain();
    // A half the drain ran last may have counted it idle (`runs_its_last_half`).
    worker.count_busy();
    on_exit(worker.index);
    set_current_worker(ptr::null());
    if let Some(trace) = worker.registry.trace() {
        // The last worker thread out writes the pool's trace file.
        trace.worker_exited();
    }
}
