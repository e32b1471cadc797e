//! FIFO lanes: the order of `spawn_fifo` jobs spawned from one worker thread.
//!
//! This module owns where an admitted fifo job waits until it runs, and which one runs next.
//! A fifo spawn parks its job in a *lane* (a lock-free FIFO queue) before it asks for
//! admission, and asks the token table to make an *indirection* runnable instead of the job: a
//! ref to the lane that, wherever and whenever it runs, runs the lane's oldest job. The
//! indirections sit in the ordinary LIFO deques, so a worker meets them exactly where it would
//! have met the jobs, and each runs the oldest job of its lane: spawn order.
//!
//! It never admits anything itself and never runs a job that was not admitted. That rests on one
//! rule, the *prefix rule*: a lane's jobs are admitted in the order they were parked in it. Then
//! an indirection always finds an admitted job at the head of its lane: indirections are made
//! runnable only after an admission, one per job, so when the n-th indirection of a lane runs,
//! n of its jobs were admitted, the first n by the prefix rule, and n - 1 were taken.
//!
//! The rule holds because a lane is used by one thread, and by one spawn call at a time per
//! nesting: a fifo spawn returns only once admitted, and a spawn that waits for admission runs
//! other jobs meanwhile, whose own fifo spawns go to lanes of the *next* nesting (see
//! [`Lanes::lane_for`]), never into a lane where a job waits. Within a nesting each spawning
//! job has a lane of its own (recycled once empty), so that the spawns of one job run in spawn
//! order even when an admission wait runs older jobs of the thread in between (design §4.4).
//!
//! A lane and its indirections must outlive one another's use: a scope's lanes live in the scope,
//! which ends only after every job it counts has run (and so every indirection, one per job, has
//! run: an indirection does not touch its lane after starting the job); the detached lanes live
//! in the registry.

use std::cell::{Cell, UnsafeCell};

use crossbeam_deque::{Injector, Steal};

use crate::admission::token::Lender;
use crate::base::job_ref::JobRef;

/// One FIFO of admitted-or-waiting fifo jobs, pushed by one thread, run from any.
#[derive(Default)]
pub struct Lane {
    jobs: Injector<JobRef>,
}

impl Lane {
    /// Parks `job` at the lane's tail; returns the indirection to make runnable once it is
    /// admitted.
    fn park(&self, job: JobRef) -> JobRef {
        self.jobs.push(job);
        // SAFETY: `run_oldest` takes a lane pointer; the lane outlives its indirections (module
        // doc), and each runs once, on a worker of the pool the job was admitted into.
        unsafe { JobRef::new(self as *const Lane as *const (), Lane::run_oldest) }
    }

    /// The indirection: runs the oldest job of the lane.
    unsafe fn run_oldest(data: *const ()) {
        // SAFETY: `data` is a lane that outlives its indirections (module doc).
        let lane = unsafe { &*(data as *const Lane) };
        let job = loop {
            match lane.jobs.steal() {
                Steal::Success(job) => break job,
                Steal::Retry => {}
                // The prefix rule says this cannot happen; running nothing would lose a job.
                Steal::Empty => unreachable!("treepool: a fifo indirection found its lane empty"),
            }
        };
        // The lane is not touched after this: the job's end may end its scope (and free it).
        // SAFETY: the job is admitted (prefix rule) and taken once, here, on a worker.
        unsafe { job.run() };
    }
}

/// The lanes of one nesting of [`Lanes`], each with the job whose spawns it takes now.
type Nesting = Vec<(*const Lender, Box<Lane>)>;

/// The lanes of one worker thread (in one scope, or in the pool for detached spawns).
#[derive(Default)]
pub struct Lanes {
    /// By nesting `d`: the lanes that take the fifo spawns made while `d` fifo spawn calls are
    /// in progress below on this thread, each with the job whose spawns it takes now. Boxed:
    /// indirections point to them while the vectors grow.
    lanes: UnsafeCell<Vec<Nesting>>,
    /// Fifo spawn calls in progress on this thread (nested by helping).
    open: Cell<usize>,
}

// SAFETY: `lanes` (the vectors, and the parent pointers, only compared) and `open` are touched
// only by the worker thread these lanes belong to (`lane_for`'s contract); other threads reach
// only the boxed `Lane`s, through indirections, and a `Lane` is `Sync` (an `Injector`).
unsafe impl Sync for Lanes {}
// SAFETY: as for `Sync`; the parent pointers are never dereferenced.
unsafe impl Send for Lanes {}

impl Lanes {
    /// Lanes for each of `n` worker threads.
    pub fn per_worker(n: usize) -> Box<[Lanes]> {
        (0..n).map(|_| Lanes::default()).collect()
    }

    /// Runs `spawn`, one fifo spawn's admission on this thread by the job `parent`, with the
    /// function that parks its job in `parent`'s lane of this nesting and returns the
    /// indirection to make runnable.
    ///
    /// Which lane of the nesting a spawn takes decides only the order: every lane of nesting
    /// `d` is parked in only while exactly `d` fifo spawn calls are in progress below, so no
    /// spawn of it waits for admission then (prefix rule). Each spawning job gets a lane of its
    /// own, so that its spawns run in its order even when a wait in between runs older jobs of
    /// the same thread (a job that runs inside such a wait spawns into its own lane); an empty
    /// lane is handed to the next job that needs one.
    ///
    /// # Safety
    /// Only the worker thread these lanes belong to calls this, and `spawn` must not return
    /// before its job is admitted (nothing else may park in the lane before then).
    pub unsafe fn lane_for<T>(
        &self,
        parent: *const Lender,
        spawn: impl FnOnce(&dyn Fn(JobRef) -> JobRef) -> T,
    ) -> T {
        let depth = self.open.get();
        // SAFETY: only this thread touches the vectors (caller's contract); the borrow ends
        // before `spawn` runs (which may nest a call of this function).
        let lane: *const Lane = unsafe {
            let lanes = &mut *self.lanes.get();
            if lanes.len() == depth {
                lanes.push(Vec::new());
            }
            pick(&mut lanes[depth], parent)
        };
        self.open.set(depth + 1);
        // Restored by the guard: admission does not unwind, but a wrong count would break the
        // prefix rule, so the guard is cheap insurance.
        let _close = Close(&self.open, depth);
        // SAFETY: the lane is boxed in the vectors, which never drop a lane while `self` lives.
        spawn(&|job| unsafe { &*lane }.park(job))
    }
}

/// The lane of `parent` among `lanes` (one nesting's): its own, else an empty one handed over,
/// else a new one.
fn pick(lanes: &mut Nesting, parent: *const Lender) -> *const Lane {
    let found = lanes.iter().position(|(owner, _)| *owner == parent);
    let index = found
        .or_else(|| lanes.iter().position(|(_, lane)| lane.jobs.is_empty()))
        .unwrap_or_else(|| {
            lanes.push((parent, Box::default()));
            lanes.len() - 1
        });
    lanes[index].0 = parent;
    &*lanes[index].1
}

/// Restores a `Lanes::open` count.
struct Close<'a>(&'a Cell<usize>, usize);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        self.0.set(self.1);
    }
}
