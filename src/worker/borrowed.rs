//! The builder's own thread as worker 0 of its pool ([`use_current_thread`]).
//!
//! This module owns that thread's worker state, which lives in a thread-local of the thread
//! instead of a main loop's frame, and the rule for it: **the thread is its pool's worker only
//! inside a call into the pool** (an `install`, `join`, `scope` or `spawn` it makes from outside
//! every job). Between calls it is a plain thread that leaves nothing another thread could wait
//! for: no private `join` half (every join it was in has returned) and no job in its deque (its
//! jobs go to the injector as it leaves a call), so no job, sleeper or admission ever waits for
//! it to come back. It never runs pool work outside a call, and never admits anything itself:
//! the calls it enters admit their root jobs (see `pool`).
//!
//! [`use_current_thread`]: crate::ThreadPoolBuilder::use_current_thread

use std::cell::RefCell;

use crate::base::stack::Headroom;
use crate::base::sync::Arc;
use crate::worker::registry::{Registry, WorkerSeed};
use crate::worker::thread::{set_current_worker, WorkerThread};

std::thread_local! {
    /// The worker state of the pool this thread is worker 0 of, if it is one.
    static BORROWED: RefCell<Option<Box<WorkerThread>>> = const { RefCell::new(None) };
}

/// Makes the calling thread worker `seed` of `registry` (index 0), until [`release`] or the
/// thread's exit. The builder checked that the thread is no worker yet.
pub fn borrow(seed: WorkerSeed, registry: Arc<Registry>, segment_size: usize) {
    // The thread is anywhere on a stack of any size: the rule reads its bounds.
    let worker = WorkerThread::new(seed, registry, Headroom::new(segment_size, false));
    // Outside a call the thread looks at no inbox: a broadcast's job pinned to it runs where it
    // lands instead, never holding a token while it waits for the thread (see `broadcast`).
    worker.registry().inboxes().close(worker.index());
    BORROWED.with(|b| *b.borrow_mut() = Some(Box::new(worker)));
}

/// The worker index of the calling thread as a borrowed worker, if it is one.
pub fn index() -> Option<usize> {
    with_worker(|w| w.index())
}

/// The pool the calling thread is a borrowed worker of, if any.
pub fn registry() -> Option<Arc<Registry>> {
    with_worker(|w| w.registry().clone())
}

fn with_worker<T>(f: impl FnOnce(&WorkerThread) -> T) -> Option<T> {
    BORROWED
        .try_with(|b| b.borrow().as_deref().map(f))
        .ok()
        .flatten()
}

/// Runs `f(worker, value)` with the calling thread entered as its pool's worker 0, if it is a
/// borrowed worker outside a call, of the pool `pool` (any, if `None`); else hands `value`
/// back. On the way out (also when `f` unwinds) the thread's jobs go to the injector.
pub fn enter<T, R>(
    pool: Option<usize>,
    value: T,
    f: impl FnOnce(&WorkerThread, T) -> R,
) -> Result<R, T> {
    let ptr = BORROWED
        .try_with(|b| b.borrow().as_deref().map(|w| w as *const WorkerThread))
        .ok()
        .flatten();
    // SAFETY: the box stays in the thread-local until `release` (which refuses while the
    // thread is inside a call, as it is from here on) or the thread's exit.
    let Some(worker) = ptr.map(|ptr| unsafe { &*ptr }) else {
        return Err(value);
    };
    if pool.is_some_and(|id| id != worker.registry().id()) {
        return Err(value);
    }
    set_current_worker(worker);
    worker.registry().inboxes().open(worker.index());
    let _leave = Leave(worker);
    Ok(f(worker, value))
}

/// Runs `f` with the calling thread's worker state: the worker it is, if any; else, on the
/// builder's thread of a pool (`pool`, or any if `None`) outside a call, that thread entered as
/// the pool's worker 0 for the length of `f` (see [`enter`]); else none.
pub fn with_here<T>(pool: Option<usize>, f: impl FnOnce(Option<&WorkerThread>) -> T) -> T {
    match WorkerThread::current() {
        Some(here) => f(Some(here)),
        None => enter(pool, f, |worker, f| f(Some(worker))).unwrap_or_else(|f| f(None)),
    }
}

/// Leaves a call: hands the thread's jobs over (its deque's, and the broadcast jobs pinned to
/// it, which then run on other workers) and makes it a plain thread again.
struct Leave<'a>(&'a WorkerThread);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.registry().inboxes().close(self.0.index());
        self.0.hand_over_local_jobs();
        set_current_worker(std::ptr::null());
    }
}

/// Ends the calling thread's service as worker 0 of pool `pool` (dropped or never installed),
/// unless it is inside a call (then it ends with the thread).
pub fn release(pool: usize) {
    if WorkerThread::current().is_some() {
        return;
    }
    let worker = BORROWED
        .try_with(|b| {
            let mut b = b.borrow_mut();
            match b.as_ref() {
                Some(w) if w.registry().id() == pool => b.take(),
                _ => None,
            }
        })
        .ok()
        .flatten();
    drop(worker);
}
