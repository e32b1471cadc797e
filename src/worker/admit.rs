//! Admission of a spawn: ask the token table, and wait by the wait loop while no token is free.
//!
//! This module owns the one path every spawned job takes into a pool ([`Registry::admit`]) and
//! the run of an admitted job ([`WorkerThread::run_admitted`]), which releases its token. While
//! no token is free a worker of the pool first runs the help-first loop (a throughput policy,
//! `help_first`), then waits by `wait`'s loop; a thread outside every pool parks; a worker of
//! another pool does not wait at all (the cross-pool rule).

use std::cell::OnceCell;

use crate::admission::stats::Counter;
use crate::admission::token::{Admission, Lender, LenderRef};
use crate::base::job_ref::JobRef;
use crate::worker::grant::count_in;
use crate::worker::help_first::{Helped, WaitingSpawn};
use crate::worker::latch::CountLatch;
use crate::worker::registry::{admission_counter, Registry};
use crate::worker::thread::WorkerThread;
use crate::worker::wait::wait_on;

impl Registry {
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
    /// or a pool token, running the owner's pool's jobs meanwhile; design §4.5.)
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
        // SAFETY: `lender` is valid until `job` is runnable (caller's contract); the reference
        // lives for this call only, which makes nothing runnable.
        if self.try_admit_by(own, unsafe { &*lender }) {
            // SAFETY: the caller's contract.
            unsafe { count_in(scope) };
            self.make_runnable_on(own, job);
            return;
        }
        // No token is free: this admission waits. Wait site "spawn admission": on a worker of
        // this pool, context (this pool, the spawning job), policy OwnDeque (help-first) and then
        // AnyAdmitted with AdmittingKeepsHalves (`while_admitting`); on a thread outside every
        // pool, Park; on a worker of another pool, no wait at all (CrossingSpawnQueued, in
        // `register_waiter`).
        match own {
            Some(worker) => worker.bump(Counter::AdmissionWaits),
            None => self
                .counters
                .bump(self.num_threads(), Counter::AdmissionWaits),
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
        if let Some(lender) = registered {
            self.await_grant(here, lender);
        }
    }

    /// The end of an admission that registered its job as a waiter: waits for the grant, then
    /// settles the registration. Out of line, as `register_waiter` is: a spawn that waits in
    /// the help-first loop runs jobs from `admit`'s frame, which deep trees nest once per level,
    /// so what only this rare path needs must not make that frame bigger.
    /// A worker's wait here is what its trace shows as the spawn's admission wait (the
    /// help-first loop before it runs jobs of its own deque, which the trace shows anyway).
    #[inline(never)]
    fn await_grant(&self, here: Option<&WorkerThread>, lender: LenderRef) {
        let wait = || wait_on(here, || lender.admission().is_some());
        match self.own(here) {
            Some(worker) => {
                let since = worker.trace_since();
                worker.while_admitting(wait);
                worker.trace_admission_wait(since, LenderRef::as_ptr(&lender));
            }
            None => wait(),
        }
        if let Some(child) = self.tokens.settle(&lender) {
            self.start_granted(child);
        }
    }

    /// [`Registry::note_admitted`] for a job that took over a finished job's place in the
    /// in-flight count with its token (see `Spare`): the count does not change. `worker` is the
    /// calling worker (its help loop knows it; no thread-local lookup).
    #[inline]
    pub(super) fn note_carried_in(&self, worker: &WorkerThread, lender: &Lender, how: Admission) {
        worker.bump(admission_counter(how));
        self.counters.job_carried_in(lender.level());
    }
}

impl WorkerThread {
    /// Runs an admitted job's `body` (which must not unwind), then finishes the job. `spawned`:
    /// the job was spawned (not a join's half or a call's root), so thief pacing may judge it.
    /// Always inlined: a spawned job's run must not call it (a traced run is a second caller,
    /// which made the compiler keep it out of line: `benches/callgrind.sh`).
    #[inline(always)]
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
    #[inline]
    pub(super) fn help_until_admitted(&self, spawn: &WaitingSpawn) -> Helped {
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
                    registry.note_admitted_by(Some(self), lender(), how);
                }
                break Helped::Admitted {
                    counted: self.handoff.passed.replace(false),
                };
            }
            if registry.try_admit_by(Some(self), lender()) {
                break Helped::Admitted { counted: false };
            }
        };
        debug_assert!(!self.handoff.passed.get(), "a scope count handed to no one");
        self.waiting_spawn.set(below);
        self.handoff.scope.set(outer_scope);
        self.spare.restore(outer);
        helped
    }
}
