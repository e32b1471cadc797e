//! Wake targets: who waits for a latch or a grant, and how its setter wakes it.
//!
//! This module owns the one rule of waking: a setter copies the target before it publishes, and
//! wakes a worker by index through its pool (handed down as a [`WakeWorker`]), or unparks a
//! thread that is no worker. It knows no pool, no latch and no token.

use crate::base::sync::thread;

/// What wakes a pool's worker by index: the pool's sleep state (`Sleep`), handed down by the
/// worker layer.
pub trait WakeWorker {
    /// Wakes worker `index` if it sleeps, or makes its next sleep return at once.
    fn wake_worker(&self, index: usize);
}

/// A pool as a wake target of another pool sees it: its workers to wake and its identity
/// (handed down by the registry, which this layer does not know).
pub trait SleepingPool: WakeWorker + Send + Sync {
    /// The pool's unique id.
    fn id(&self) -> usize;
}

/// Who waits, so a setter or a token granter can wake it.
#[derive(Clone)]
pub enum WakeTarget {
    /// Worker `index` of the pool in which the latch is set or the token granted.
    Worker(usize),
    /// Worker `index` of another pool (a call that crossed pools). A std `Arc` whatever the
    /// build: loom's `Arc` cannot hold a trait object.
    Foreign(std::sync::Arc<dyn SleepingPool>, usize),
    /// A thread that is no pool's worker; it parks.
    Thread(thread::Thread),
}

impl WakeTarget {
    /// The setter's rule: copies what waking the target needs, runs `publish` (after which the
    /// target, and whatever holds it, may be freed by the waiter), and wakes the target if
    /// `publish` returns true. A worker's index is copied as it is; only the other targets are
    /// cloned (a reference count, a thread handle), so a setter that wakes a worker of its own
    /// pool, the common case, copies one word and drops nothing.
    ///
    /// # Safety
    /// `this` is valid until `publish` runs; it is not touched after.
    #[inline]
    pub unsafe fn wake_after(
        this: *const Self,
        publish: impl FnOnce() -> bool,
        here: &impl WakeWorker,
    ) {
        // SAFETY: valid until `publish` (caller's contract); only copies are kept past it.
        match unsafe { &*this } {
            WakeTarget::Worker(index) => {
                let index = *index;
                if publish() {
                    here.wake_worker(index);
                }
            }
            other => {
                let target = other.clone();
                if publish() {
                    target.wake(here);
                }
            }
        }
    }

    /// Wakes the target; `here` wakes the workers of the pool the setter belongs to.
    #[inline]
    pub fn wake(self, here: &impl WakeWorker) {
        match self {
            WakeTarget::Worker(index) => {
                here.wake_worker(index);
            }
            WakeTarget::Foreign(pool, index) => {
                pool.wake_worker(index);
            }
            WakeTarget::Thread(thread) => thread.unpark(),
        }
    }

    /// Whether the target is the calling thread, which is worker `(pool id, index)` if `here`
    /// says so, else no worker.
    pub fn is_caller(&self, here: Option<(usize, usize)>) -> bool {
        match (self, here) {
            (WakeTarget::Foreign(pool, index), Some((pool_id, worker))) => {
                pool.id() == pool_id && *index == worker
            }
            (WakeTarget::Thread(thread), None) => thread.id() == thread::current().id(),
            // A worker of the latch's own pool is checked by pool membership, never through here.
            _ => false,
        }
    }
}
