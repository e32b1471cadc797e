//! The synchronisation primitives the crate is built on: std's atomics, parking_lot's blocking
//! primitives and crossbeam's lock-free queue in normal builds, loom's under `--cfg loom` so that
//! the models in `tests/loom/` explore every interleaving of the same code.
//!
//! Nothing else in the crate names `std::sync::atomic`, `parking_lot` or `std::thread::park`
//! directly for state that a loom model checks.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub use loom::thread;
#[cfg(not(loom))]
pub use parking_lot::{Condvar, Mutex, MutexGuard};
pub use std::sync::atomic::Ordering;
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub use std::sync::Arc;
#[cfg(not(loom))]
pub use std::thread;

/// Locks `m` (parking_lot's locks cannot be poisoned; loom's are never poisoned in a model).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(loom))]
    return m.lock();
    #[cfg(loom)]
    return m.lock().unwrap();
}

/// Blocks on `cv`, releasing `guard` meanwhile, and returns the guard re-acquired.
pub fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    #[cfg(not(loom))]
    {
        let mut guard = guard;
        cv.wait(&mut guard);
        guard
    }
    #[cfg(loom)]
    return cv.wait(guard).unwrap();
}

/// A multi-producer multi-consumer FIFO queue without a mutex: crossbeam's `Injector` (whose
/// push and steal may spin briefly while a concurrent push completes). Under loom it is a locked
/// `VecDeque`, so the models check the protocol around the queue and take the queue itself as
/// linearizable (crossbeam tests that).
pub struct WaiterQueue<T> {
    #[cfg(not(loom))]
    inner: crossbeam_deque::Injector<T>,
    #[cfg(loom)]
    inner: Mutex<std::collections::VecDeque<T>>,
}

impl<T> WaiterQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        WaiterQueue {
            inner: Default::default(),
        }
    }

    /// Appends `item` at the back.
    pub fn push(&self, item: T) {
        #[cfg(not(loom))]
        self.inner.push(item);
        #[cfg(loom)]
        lock(&self.inner).push_back(item);
    }

    /// Takes the item at the front, if any.
    pub fn pop(&self) -> Option<T> {
        #[cfg(not(loom))]
        loop {
            match self.inner.steal() {
                crossbeam_deque::Steal::Success(item) => return Some(item),
                crossbeam_deque::Steal::Empty => return None,
                crossbeam_deque::Steal::Retry => {}
            }
        }
        #[cfg(loom)]
        return lock(&self.inner).pop_front();
    }

    /// Whether the queue holds no item.
    pub fn is_empty(&self) -> bool {
        #[cfg(not(loom))]
        return self.inner.is_empty();
        #[cfg(loom)]
        return lock(&self.inner).is_empty();
    }

    /// The number of items, as of some moment during the call.
    pub fn len(&self) -> usize {
        #[cfg(not(loom))]
        return self.inner.len();
        #[cfg(loom)]
        return lock(&self.inner).len();
    }
}

impl<T> Default for WaiterQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}
