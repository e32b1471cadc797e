//! `join(a, b)`: run two closures, potentially in parallel.
//!
//! This module owns the join protocol. `b` goes into the joiner's split stack
//! (`base::half_stack`), *private*: only the joiner's thread can see it, and `a` runs inline as
//! part of the current job; then the joiner takes `b` back and runs it inline too. That fast
//! path writes no shared state at all. While another worker is idle (`Sleep::idle_count`),
//! every join makes the thread's oldest private half public, where it lies; whoever claims a public half (a thief, or this thread
//! helping deeper in its stack) admits it, or runs it as part of its job, or leaves it where it
//! is for its job (see [`JoinJob`]). The joiner of a public half takes it back if no one
//! claimed it; it never blocks: while a taker runs `b` it runs other admitted jobs.

use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};

use crate::base::half_stack::Back;
use crate::base::job_ref::{drop_quietly, join_values, JobResult};
use crate::worker::job::JoinJob;
use crate::worker::thread::WorkerThread;

/// `join` on a worker thread: the current job's `a` and `b`.
///
/// `a` runs under `catch_unwind`; `b`, once taken back, is called directly, as rayon's `join`
/// does: `a` has finished and the half's slot is free again, so a panic of `b` unwinds through
/// nothing the pool still needs. A panic of `a` goes out of line (`a_panicked`), which waits for
/// `b` before raising it.
#[inline]
pub fn join_in_worker<A, B, RA, RB>(worker: &WorkerThread, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = JoinJob::new(b, worker.current_ptr());
    // `job_b` stays on this frame until it is taken back, or settled by a taker below.
    let Some(slot) = worker.push_half(job_b.as_half()) else {
        return join_unkept(a, job_b);
    };
    if worker.any_idle() {
        return join_while_idle(worker, a, &job_b, slot);
    }
    join_kept::<_, _, _, _, false>(worker, a, &job_b, slot)
}

/// The rest of `join_in_worker` once `b` is kept in `slot`. Every call that is not `a` or `b`
/// is out of line and takes what it needs as arguments, so the fast path keeps few values
/// alive across calls (fewer registers to save: `benches/callgrind.sh`). `TRACED`: the pool is
/// traced, and `b` run inline is recorded (only `join_unkept` says so).
#[inline(always)]
fn join_kept<A, F, RA, RB, const TRACED: bool>(
    worker: &WorkerThread,
    a: A,
    job_b: &JoinJob<F, RB>,
    slot: usize,
) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    F: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let result_a = match panic::catch_unwind(AssertUnwindSafe(a)) {
        Ok(value) => value,
        Err(payload) => a_panicked(worker, job_b, slot, payload),
    };
    if worker.take_back_private(slot) {
        return (result_a, job_b.call_inline::<TRACED>(worker));
    }
    finish_public(worker, job_b, slot, result_a)
}

/// A worker is counted idle at the `join`: this one leaves the count, and the oldest private
/// half goes public if another one is idle; then the join as usual.
#[cold]
#[inline(never)]
fn join_while_idle<A, F, RA, RB>(
    worker: &WorkerThread,
    a: A,
    job_b: &JoinJob<F, RB>,
    slot: usize,
) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    F: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    worker.idle_at_join();
    join_kept::<_, _, _, _, false>(worker, a, job_b, slot)
}

/// `b` was not the thread's newest private half with another below: it is its last private
/// one, or public (taken back, or claimed). Its result, with `a`'s.
#[cold]
#[inline(never)]
fn finish_public<F, RA, RB>(
    worker: &WorkerThread,
    job_b: &JoinJob<F, RB>,
    slot: usize,
    result_a: RA,
) -> (RA, RB)
where
    F: FnOnce() -> RB + Send,
    RB: Send,
{
    let back = worker.take_back_half(slot);
    (
        result_a,
        public_half(worker, job_b, slot, back).into_value(),
    )
}

/// `a` panicked: waits until `b` has run (here, caught, or by its taker), drops `b`'s result
/// quietly, and raises `a`'s panic, which wins.
#[cold]
#[inline(never)]
fn a_panicked<F, R>(
    worker: &WorkerThread,
    job_b: &JoinJob<F, R>,
    slot: usize,
    payload: Box<dyn std::any::Any + Send>,
) -> !
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let result_b = match worker.take_back_half(slot) {
        Back::Private | Back::Last => job_b.run_inline(worker),
        back => public_half(worker, job_b, slot, back),
    };
    drop_quietly(result_b);
    panic::resume_unwind(payload)
}

/// A join whose half `WorkerThread::push_half` did not keep: the pool is traced (tracing
/// turns that push off, so that the check costs the untraced join nothing), and the join goes
/// as `join_in_worker` does, recording `b` when it runs inline; or the thread's split stack is
/// full (`HALF_SLOTS` joins deep on one thread): `b` runs after `a`, kept nowhere, so no thief
/// and no wait of `a` can run it. It finds its worker itself: an argument more would cost the
/// fast path a register move (`benches/callgrind.sh`).
#[cold]
#[inline(never)]
fn join_unkept<A, F, RA, R>(a: A, job_b: JoinJob<F, R>) -> (RA, R)
where
    A: FnOnce() -> RA + Send,
    F: FnOnce() -> R + Send,
    RA: Send,
    R: Send,
{
    // SAFETY: a join's halves are kept by workers only (`join_in_worker`, `join_eagerly`).
    let worker = unsafe { WorkerThread::current_unchecked() };
    if let Some(slot) = worker.push_half_traced(job_b.as_half()) {
        if worker.any_idle() {
            worker.idle_at_join();
        }
        return join_kept::<_, _, _, _, true>(worker, a, &job_b, slot);
    }
    let result_a = JobResult::call(a);
    join_values(result_a, job_b.run_inline(worker))
}

/// Gets the result of a `b` that was made public: taken back unclaimed (`Back::Retracted`), it
/// runs inline; claimed, the joiner waits (running other jobs) until its taker is done with it:
/// run, or declined and run here, as part of this job. A wait of this job that runs `b` first
/// (a declined one, in place) settles it too.
#[cold]
#[inline(never)]
fn public_half<F, R>(
    worker: &WorkerThread,
    job_b: &JoinJob<F, R>,
    slot: usize,
    back: Back,
) -> JobResult<R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    if back != Back::Taken {
        // Taken back from the public part, or the thread's bottom half: whatever else the
        // thread has is public or claimed, and it may be its last unclaimed half (which
        // `runs_its_last_half` checks). (Not at every `Back::Last`: while a worker is idle
        // nearly every join's half is its thread's last private one, and counting in and out of
        // the idle count at each made a 1,023-node tree sum on 2 threads 5 times slower.)
        if back == Back::Retracted || slot == 0 {
            worker.runs_its_last_half();
        }
        return job_b.run_inline(worker);
    }
    // Wait site "join": context (the joiner's pool, the joiner's job); policy AnyAdmitted.
    worker.wait_until(|| job_b.settled());
    let result = job_b.result_after_taken(worker);
    worker.release_taken_half(slot);
    result
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

/// `join` with `b` public at once, as rayon's `join` pushes it, instead of kept private: for
/// `join_context`, whose callers look at `migrated()` and may wait in `a` for `b` to run on
/// another thread (rayon-core's own `join_context` tests do), which a private half would never
/// do. It costs a promotion and a fence; the unclaimed `b` is taken back and run inline, a
/// claimed one run by its taker, exactly as a promoted half (`public_half`).
fn join_eagerly<A, B, RA, RB>(worker: &WorkerThread, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = JoinJob::new(b, worker.current_ptr());
    // `job_b` stays on this frame until it is taken back, or settled by a taker below.
    let kept = worker.push_half(job_b.as_half());
    let Some(slot) = kept.or_else(|| worker.push_half_traced(job_b.as_half())) else {
        return join_unkept(a, job_b);
    };
    worker.publish_through(slot);
    let result_a = JobResult::call(a);
    // Unclaimed, the newest public half comes back inline, as `public_half` takes a
    // `Back::Retracted` one; else the general take-back.
    let result_b = if worker.take_back_newest_public(slot) {
        worker.runs_its_last_half();
        job_b.run_inline(worker)
    } else {
        match worker.take_back_half(slot) {
            Back::Private => job_b.run_inline(worker),
            back => public_half(worker, &job_b, slot, back),
        }
    };
    join_values(result_a, result_b)
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
