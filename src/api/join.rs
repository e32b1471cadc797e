//! `join(a, b)`: run two closures, potentially in parallel.
//!
//! This module owns the join protocol. `b` is kept *private* (see `lazy`): only the joiner's
//! thread can see it, and `a` runs inline as part of the current job; then the joiner takes `b`
//! back and runs it inline too. That fast path writes no shared state at all. While another
//! worker wants work (it asked this one, or some worker is idle: `WorkerThread::work_wanted`),
//! every join promotes the thread's oldest private half to its deque; whoever takes a promoted
//! half from there (a thief, or this thread helping deeper in its stack) admits it (see
//! [`JoinJob`]); if it cannot, it hands `b` back and the joiner runs it inline. The joiner of a
//! promoted half pops it back if no one took it; it never blocks: while `b` is away it runs
//! other admitted jobs. A job that already keeps `KEPT_HALVES` private halves, while no work is
//! wanted, does not keep another: it runs `a` and `b` as plain calls.

use std::marker::PhantomData;

use crate::base::job_ref::{join_values, JobResult};
use crate::worker::job::{JoinJob, PlainHalf};
use crate::worker::thread::WorkerThread;

/// `join` on a worker thread: the current job's `a` and `b`.
#[inline]
pub fn join_in_worker<A, B, RA, RB>(worker: &WorkerThread, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    if worker.join_plainly() {
        // Kept for a wait of `a` that needs `b` (PlainHalvesKept), for no thief.
        let half = PlainHalf::new(b);
        // SAFETY: `half` stays on this frame until its slot is popped below.
        let slot = worker.push_plain_half(unsafe { half.as_plain_ref() });
        let result_a = JobResult::call(a);
        worker.pop_plain_half(slot);
        return join_values(result_a, half.into_result());
    }
    let job_b = JoinJob::new(b, worker.index(), worker.current_ptr());
    // SAFETY: `job_b` stays on this frame until it is taken back, popped back or its latch is
    // set below.
    let slot = worker.push_half(unsafe { job_b.as_job_ref() });
    let result_a = JobResult::call(a);
    let result_b = if worker.take_back_half(slot) {
        if slot == 0 {
            worker.runs_its_last_half();
        }
        job_b.run_inline()
    } else {
        promoted_half(worker, &job_b)
    };
    // Both halves have finished; `a`'s panic wins over `b`'s.
    join_values(result_a, result_b)
}

/// Gets the result of a `b` that was promoted to the deque: pops it back and runs it inline if
/// no one took it, else waits (running other jobs) until it ran: on its thief, or, sent back
/// unrun, as part of this job in this very wait (named policy **HalfReturnsToItsJob**).
#[cold]
#[inline(never)]
fn promoted_half<F, R>(worker: &WorkerThread, job_b: &JoinJob<F, R>) -> JobResult<R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    // Wait site "join": context (the joiner's pool, the joiner's job); policy OwnDeque until
    // the deque runs dry (its top is `b`, or jobs pushed above it), then AnyAdmitted. `b` taken
    // by this wait deeper in the stack runs as part of the job (HalfRunsAsPart, `JoinJob`).
    // SAFETY: as in `join_in_worker`; this is the same job, to compare against.
    let b_ref = unsafe { job_b.as_job_ref() };
    loop {
        crate::base::chaos::point();
        if job_b.latch.probe() {
            break;
        }
        match worker.pop() {
            Some(job) if job == b_ref => {
                worker.runs_its_last_half();
                return job_b.run_inline();
            }
            // A job pushed above `b` (a detached spawn of `a`): it is admitted; run it.
            // SAFETY: jobs in the deque are alive and run once.
            Some(job) => unsafe { job.run() },
            None => {
                worker.wait_until(|| job_b.latch.probe());
                break;
            }
        }
    }
    job_b.take_result()
}

/// What a closure of [`join_context`](crate::join_context) learns about where it runs.
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// let (a, b) = pool.install(|| treepool::join_context(|ctx| ctx.migrated(), |ctx| ctx.migrated()));
/// assert!(!a); // `a` runs on the calling worker
/// let _ = b; // true only if another worker took `b`
/// ```
#[derive(Debug)]
pub struct FnContext {
    migrated: bool,
    /// Neither `Send` nor `Sync`, like rayon's: it describes one call on one thread.
    _not_send: PhantomData<*mut ()>,
}

impl FnContext {
    /// Whether the closure runs on another thread than the one that called `join_context`: `b`
    /// taken by another worker, or either closure of a call whose root job runs on another
    /// thread (always, for a call from a thread outside every pool: it is injected).
    #[inline]
    pub fn migrated(&self) -> bool {
        self.migrated
    }
}

/// `join_context` on a worker thread that runs a job. Each closure compares the thread it runs
/// on with `caller`, the thread that called `join_context` (see [`thread_mark`]).
#[inline]
pub fn join_context_in_worker<A, B, RA, RB>(
    worker: &WorkerThread,
    caller: usize,
    a: A,
    b: B,
) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA + Send,
    B: FnOnce(FnContext) -> RB + Send,
    RA: Send,
    RB: Send,
{
    let context = move || FnContext {
        migrated: thread_mark() != caller,
        _not_send: PhantomData,
    };
    join_eagerly(worker, || a(context()), || b(context()))
}

/// `join` with `b` pushed where thieves see it at once, as rayon's `join` does, instead of kept
/// private: for `join_context`, whose callers look at `migrated()` and may wait in `a` for `b`
/// to run on another thread (rayon-core's own `join_context` tests do), which a private half
/// would never do. It costs a deque push and a fence; the un-stolen `b` is popped back and run
/// inline, a stolen one admitted by its thief, exactly as a promoted half (`promoted_half`).
fn join_eagerly<A, B, RA, RB>(worker: &WorkerThread, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = JoinJob::new(b, worker.index(), worker.current_ptr());
    // SAFETY: `job_b` stays on this frame until `promoted_half` popped it back or saw its latch
    // set.
    worker.push_waking(unsafe { job_b.as_job_ref() });
    let result_a = JobResult::call(a);
    join_values(result_a, promoted_half(worker, &job_b))
}

/// A number that tells the calling thread from every other live thread: the address of a
/// thread-local.
#[inline]
pub fn thread_mark() -> usize {
    std::thread_local! {
        static MARK: u8 = const { 0 };
    }
    MARK.with(|mark| mark as *const u8 as usize)
}
