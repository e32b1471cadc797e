//! `join(a, b)`: run two closures, potentially in parallel.
//!
//! This module owns the join protocol. `b` is pushed where thieves can take it and `a` runs
//! inline as part of the current job; then the joiner pops `b` back and runs it inline too (the
//! fast path: no admission, no shared state beyond the deque). Whoever else takes `b` from the
//! deque (a thief, or this thread helping deeper in its stack) admits it (see [`JoinJob`]); if
//! it cannot, it hands `b` back and the joiner runs it inline. The joiner never
//! blocks: while `b` is away it runs other admitted jobs.

use crate::job::{join_values, JobResult, JoinJob};
use crate::registry::WorkerThread;

/// `join` on a worker thread: the current job's `a` and `b`.
pub fn join_in_worker<A, B, RA, RB>(worker: &WorkerThread, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = JoinJob::new(b, worker.index(), worker.current_ptr());
    // SAFETY: `job_b` stays on this frame until it is popped back or its latch is set below.
    let b_ref = unsafe { job_b.as_job_ref() };
    worker.push(b_ref);
    let result_a = JobResult::call(a);
    let result_b = loop {
        if job_b.latch.probe() {
            break None;
        }
        match worker.pop() {
            Some(job) if job == b_ref => break Some(job_b.run_inline()),
            // A job pushed above `b` (a detached spawn of `a`): it is admitted; run it.
            // SAFETY: jobs in the deque are alive and run once.
            Some(job) => unsafe { job.run() },
            None => {
                worker.wait_until(|| job_b.latch.probe());
                break None;
            }
        }
    };
    let result_b = match result_b {
        Some(result) => result,
        None if job_b.latch.handed_back() => job_b.run_inline(),
        None => job_b.take_result(),
    };
    // Both halves have finished; `a`'s panic wins over `b`'s.
    join_values(result_a, result_b)
}
