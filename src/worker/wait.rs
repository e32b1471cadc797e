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
use crate::base::sync::{thread, Arc, Ordering};
use crate::worker::registry::{Registry, WorkerSeed};
use crate::worker::thread::{set_current_worker, WorkerThread};

/// Rounds a worker looks for work, yielding the CPU between rounds, before it tries to sleep.
const SPIN_ROUNDS: u32 = 64;

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

impl WorkerThread {
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
            crate::base::chaos::point();
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
    /// ([`WakeTarget::Worker`](crate::worker::latch::WakeTarget)).
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
    pub(super) fn run_stolen(&self, job: JobRef, victim: usize, pacing: &mut Pacing) {
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

    /// Runs `wait`, a wait of the current job's spawn for its admission, with that job marked as
    /// admitting (see [`WorkerThread::runs_as_part_of`]).
    pub(super) fn while_admitting<T>(&self, wait: impl FnOnce() -> T) -> T {
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
    pub(super) fn current_admits(&self) -> bool {
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
