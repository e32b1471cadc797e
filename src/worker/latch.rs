//! Latches: one-shot signals a waiting thread checks between the jobs it helps with.
//!
//! This module owns the latch states; who gets woken is `base::wake`'s. The rule every setter keeps: copy what
//! it needs to wake the waiter *before* publishing the new state, and touch the latch no more
//! after that, since the waiter may return and free it at once.

use std::ptr;

use crate::base::sync::{AtomicU8, AtomicUsize, Ordering};
use crate::base::wake::WakeTarget;
use crate::worker::sleep::Sleep;

const UNSET: u8 = 0;
const SET: u8 = 1;

/// Set once, when a job completes.
pub struct Latch {
    state: AtomicU8,
    target: WakeTarget,
}

impl Latch {
    /// An unset latch whose setter wakes `target`.
    pub fn new(target: WakeTarget) -> Self {
        Latch {
            state: AtomicU8::new(UNSET),
            target,
        }
    }

    /// Whether the latch is set.
    #[inline]
    pub fn probe(&self) -> bool {
        // Acquire: pairs with the setter's release, so the job's result is visible.
        self.state.load(Ordering::Acquire) == SET
    }

    /// Sets the latch: the job completed.
    ///
    /// # Safety
    /// `this` is valid now; it may be freed by the waiter as soon as the state is published.
    pub unsafe fn set(this: *const Self, here: &Sleep) {
        let publish = || {
            // SAFETY: `this` is valid until this store (caller's contract). Release: publishes
            // the job's result to the waiter's acquire in `probe`.
            unsafe { (*this).state.store(SET, Ordering::Release) };
            true
        };
        // SAFETY: `this` is valid until `publish` runs (caller's contract).
        unsafe { WakeTarget::wake_after(ptr::addr_of!((*this).target), publish, here) };
    }
}

/// Counts the jobs of a scope still to finish, the scope's own body included; the owner (a
/// worker of the scope's pool, or for an in-place scope a worker of another pool or a plain
/// thread, which parks) waits for zero.
pub struct CountLatch {
    count: AtomicUsize,
    owner: WakeTarget,
}

impl CountLatch {
    /// A latch at one (the scope body) whose owner is `owner`.
    pub fn new(owner: WakeTarget) -> Self {
        CountLatch {
            count: AtomicUsize::new(1),
            owner,
        }
    }

    /// One more job to wait for.
    #[inline]
    pub fn increment(&self) {
        // Relaxed: the caller holds a count already, so this cannot race with the final decrement.
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The thread that waits for this latch.
    #[inline]
    pub fn owner(&self) -> &WakeTarget {
        &self.owner
    }

    /// Whether every counted job has finished.
    pub fn probe(&self) -> bool {
        // Acquire: pairs with the decrements' release, so every job's effects are visible.
        self.count.load(Ordering::Acquire) == 0
    }

    /// One counted job finished.
    ///
    /// # Safety
    /// `this` is valid now; once the count reaches zero the owner may free it.
    pub unsafe fn decrement(this: *const Self, here: &Sleep) {
        // SAFETY: `this` is valid until this decrement (caller's contract): the owner may free
        // the latch as soon as the count is zero. AcqRel: release this job's effects; acquire
        // the others' for whoever reaches zero.
        let publish = || unsafe { (*this).count.fetch_sub(1, Ordering::AcqRel) } == 1;
        // SAFETY: as above, `this` is valid until `publish` runs.
        unsafe { WakeTarget::wake_after(ptr::addr_of!((*this).owner), publish, here) };
    }
}
