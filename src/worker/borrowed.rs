//! The builder's own thread as worker 0 of its pool ([`use_current_thread`]).
//!
//! This module owns that thread's worker state, which lives in a thread-local of the thread
//! instead of a main loop's frame, and the rule for it: **the thread is its pool's worker only
//! inside a call into the pool** (an `install`, `join`, `scope` or `spawn` it makes from outside
//! every job), **and only while the pool lives**. Between calls it is a plain thread that leaves
//! nothing another thread could wait for: no private `join` half (every join it was in has
//! returned) and no job in its deque (its jobs go to the injector as it leaves a call), so no
//! job, sleeper or admission ever waits for it to come back. It never runs pool work outside a
//! call, and never admits anything itself: the calls it enters admit their root jobs (see
//! `pool`). Once the pool has terminated (dropped, on any thread), the first look at the state
//! outside a call drops it: the thread is a plain thread again, whose calls go where a plain
//! thread's go, never into the terminated pool, whose workers may have exited. If the thread is
//! the pool's only thread, that look first runs what is left queued in the pool (nothing a pool
//! accepted is dropped unrun: design §4.11).
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

/// The worker index of the calling thread as a borrowed worker outside a call, if it is one.
pub fn index() -> Option<usize> {
    with_worker(|w| w.index())
}

/// The pool the calling thread is a borrowed worker of, outside a call, if any.
pub fn registry() -> Option<Arc<Registry>> {
    with_worker(|w| w.registry().clone())
}

fn with_worker<T>(f: impl FnOnce(&WorkerThread) -> T) -> Option<T> {
    // SAFETY: see `outside_call`; `f` runs before this thread could drop the state.
    outside_call().map(|ptr| f(unsafe { &*ptr }))
}

/// The calling thread's borrowed worker state, if it is a borrowed worker outside a call, of a
/// pool that has not terminated. The state of a terminated pool is dropped here, after its
/// queued work ran if the thread is its only thread ([`leave_terminated`]). The pointer stays
/// valid until the thread's exit or a later look that finds its pool terminated with the thread
/// outside every call: never while a call holds it.
fn outside_call() -> Option<*const WorkerThread> {
    if WorkerThread::current().is_some() {
        return None;
    }
    let (stale, live) = BORROWED
        .try_with(|b| {
            let mut b = b.borrow_mut();
            match b.as_deref() {
                Some(w) if w.registry().has_terminated() => (b.take(), None),
                w => (None, w.map(|w| w as *const WorkerThread)),
            }
        })
        .unwrap_or((None, None));
    // Dropped outside the thread-local's borrow: the registry may go with it.
    if let Some(stale) = stale {
        leave_terminated(stale);
    }
    live
}

/// Drops the calling thread's state as worker 0 of a terminated pool, taken out of the
/// thread-local at the thread's first look outside every call since the pool terminated. If the
/// thread is the pool's only thread (`num_threads(1)`), what it left queued (handed over as it
/// left its last call) and what others queued for it since (spawns from other pools' workers and
/// plain threads, granted or injected) has nobody else to run it: the thread drains the pool
/// first, entered as worker 0, as every worker of a dropped pool does before it exits. A pool
/// with other workers needs nothing here: they drain it after they see it terminated, and the
/// thread's hand-over came before (`Leave`: it saw the pool alive after its pushes and fence).
fn leave_terminated(worker: Box<WorkerThread>) {
    if worker.registry().num_threads() == 1 {
        set_current_worker(&*worker);
        // Runs jobs only (each catches its panic; one that unwinds aborts): nothing unwinds
        // past the reset below.
        worker.drain();
        set_current_worker(std::ptr::null());
        if let Some(trace) = worker.registry().trace() {
            // The pool's one draining thread is done: it writes the trace file.
            trace.worker_exited();
        }
    }
}

/// Runs `f(worker, value)` with the calling thread entered as its pool's worker 0, if it is a
/// borrowed worker outside a call, of the pool `pool` (any, if `None`), and that pool has not
/// terminated; else hands `value` back. On the way out (also when `f` unwinds) the thread's
/// jobs go to the injector.
pub fn enter<T, R>(
    pool: Option<usize>,
    value: T,
    f: impl FnOnce(&WorkerThread, T) -> R,
) -> Result<R, T> {
    // SAFETY: the box stays in the thread-local until a look outside every call drops it (see
    // `outside_call`), and the thread is inside a call from here on.
    let Some(worker) = outside_call().map(|ptr| unsafe { &*ptr }) else {
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
/// it, which then run on other workers) and makes it a plain thread again. If the pool has
/// terminated meanwhile (dropped on another thread), its other workers may have drained it and
/// exited already: the thread drains it too, as they did before they stopped, so that what it
/// handed over runs. (The check follows the hand-over, whose pushes end with a SeqCst fence, and
/// a worker drains after its SeqCst look at the flag and the fence of its inbox's closing: so
/// either this thread sees the flag, or those workers see the jobs.)
struct Leave<'a>(&'a WorkerThread);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let worker = self.0;
        worker.registry().inboxes().close(worker.index());
        worker.hand_over_local_jobs();
        if worker.registry().has_terminated() {
            worker.drain();
        }
        set_current_worker(std::ptr::null());
    }
}

/// Ends the calling thread's service as worker 0 of a pool that has terminated, if it is one
/// and outside every call (inside one, it ends at the first look after the call): for the
/// thread that drops a pool, so that its state goes with the pool.
pub fn release() {
    let _ = outside_call();
}
