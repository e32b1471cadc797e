//! Grants: registering a spawn as a waiter for a token, and starting it once granted.
//!
//! This module owns rule 5 of the lending rules on the scheduler's side: whoever frees a token
//! that the token table hands to a waiting job makes that job runnable and wakes its spawner
//! ([`Registry::start_granted`]); the spawner never has to be there. Publication (the help-first
//! policy's registration of a buried spawn) registers through here too. It never waits.

use std::ptr;

use crate::admission::token::{Admission, Lender, LenderRef, Registration, Spare, Ticket};
use crate::base::job_ref::JobRef;
use crate::base::wake::WakeTarget;
use crate::worker::help_first::{WaitingSpawn, BURIED_WAITS};
use crate::worker::latch::CountLatch;
use crate::worker::registry::Registry;
use crate::worker::thread::WorkerThread;

impl Registry {
    /// Registers the job `job` of `*lender` as a waiter for a token, counting it in `scope`
    /// first (unless null): from the registration on, a granter may make it runnable. Returns
    /// the counted reference to wait on and settle, or `None` when there is nothing to wait
    /// for: the job was admitted on the spot (then `run_where` made it runnable), or the calling thread is a
    /// worker of another pool, whose spawn is queued and never waits (design §2.3).
    ///
    /// # Safety
    /// As for [`Registry::admit`]; `job` is not runnable yet, and `lender` not registered.
    #[inline(never)]
    pub(super) unsafe fn register_waiter(
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
        // Named policy CrossingSpawnQueued: a worker of another pool never waits for a token of
        // this one (the cross-pool rule: it may hold a token of its own pool, and waiting for a
        // second one while holding it is the two-lock deadlock), but for a child of the credit
        // root of its own in-place scope (the one kind of non-root it spawns here), which waits
        // for that root's loan or a pool token: for the root's descendants and this pool's jobs
        // only, never for a token its caller holds (OwnerSpawnOnCredit).
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

    /// A waiting job was granted a token by this thread: count it, make it runnable, and wake
    /// the thread waiting in its spawn call.
    pub(super) fn start_granted(&self, child: LenderRef) {
        let how = child.admission().expect("a granted job is admitted");
        self.note_admitted(&child, how);
        if self.trace.is_some() {
            if let Some(worker) = self.own(WorkerThread::current()) {
                worker.trace_grant();
            }
        }
        // SAFETY: this thread's grant won the child's admission, so the ticket is ours.
        let ticket = unsafe { child.take_ticket() }.expect("a waiting job has a ticket");
        self.make_runnable(ticket.job);
        match ticket.waker {
            // The spawner is this very thread (it freed the token while helping): it sees the
            // admission when it next checks.
            Some(WakeTarget::Worker(index)) if self.slot() == index => {}
            Some(waker) => waker.wake(&self.sleep),
            // A spawn from another pool's worker did not wait for its admission.
            None => {}
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
}

/// Counts a job in its scope, unless `scope` is null.
///
/// # Safety
/// `scope` is null or a live latch on which the calling job holds a count.
pub(super) unsafe fn count_in(scope: *const CountLatch) {
    // SAFETY: the caller's contract (the count it holds keeps the latch above zero).
    if let Some(latch) = unsafe { scope.as_ref() } {
        latch.increment();
    }
}

impl WorkerThread {
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
    pub(super) fn publish_waiting_spawn(&self) {
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
    pub(super) fn publish(&self, spawn: &WaitingSpawn) {
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
}
