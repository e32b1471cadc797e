//! Routed admission: spawns whose runnable ref is not the job itself.
//!
//! This module owns the two shapes of spawn that put something in front of the job when it is
//! admitted, and nothing else: both are admitted by [`HeapJob::admit_via`] exactly as a plain
//! spawn is (same token, same waits), only what is pushed differs.
//!
//! * **fifo** (`spawn_fifo`, `ScopeFifo::spawn_fifo`): the job is parked in its spawning job's
//!   lane (`fifo_lanes`) and the pushed ref is the lane's indirection, which runs the lane's
//!   oldest job: spawn order.
//! * **pinned** (broadcasts): every push that the admission makes (the spawner's own push, the
//!   help-first loop's, a publication's, a granter's in `grant`) pushes a *router* instead of
//!   the job, a small box with the job, the index of its worker and a latch of the spawner's. A
//!   router is an admitted job like any other to the scheduler: whoever takes it runs it, and
//!   its run puts the job in its worker's inbox (`inbox`), wakes that worker by index
//!   (`Sleep::wake_worker`) and sets the latch. The spawn ([`admit_pinned`]) returns only once
//!   that latch is set: it runs the router itself when the router is the top of its own deque
//!   (admitted on the spot or in its help-first loop), else it waits, helping, for whoever runs
//!   it (a granter on another thread). So a pinned job is in its inbox when its spawn returns,
//!   and a worker runs the jobs pinned to it in the order of their spawns.

use crate::base::job_ref::JobRef;
use crate::base::wake::WakeTarget;
use crate::worker::fifo_lanes::Lanes;
use crate::worker::job::HeapJob;
use crate::worker::latch::Latch;
use crate::worker::thread::WorkerThread;

/// Admits `job`, a fifo spawn of a scope made on `worker` (a worker of the scope's pool), through
/// the lane of `worker` in `lanes` (the scope's lanes, one per worker): counted in the scope and
/// admitted exactly as `Scope::spawn` admits (help-first wait, backpressure), then run in order.
pub fn admit_in_scope<F: FnOnce() + Send>(
    job: Box<HeapJob<F>>,
    worker: &WorkerThread,
    lanes: &[Lanes],
) {
    admit(job, worker, &lanes[worker.index()], true);
}

/// Admits `job`, a detached fifo spawn made on `worker`, through `worker`'s lane in its pool.
pub fn admit_detached<F: FnOnce() + Send>(job: Box<HeapJob<F>>, worker: &WorkerThread) {
    admit(
        job,
        worker,
        &worker.registry().fifo_lanes()[worker.index()],
        false,
    );
}

fn admit<F: FnOnce() + Send>(
    job: Box<HeapJob<F>>,
    worker: &WorkerThread,
    lanes: &Lanes,
    in_scope: bool,
) {
    let registry = worker.registry();
    // SAFETY: `lanes` are the calling worker's (indexed by its index, in its own pool or scope),
    // and the admission of a spawn from a worker of the job's own pool returns only once the
    // job is admitted (`Registry::admit`).
    let parent = worker.current_ptr();
    unsafe {
        lanes.lane_for(parent, |park| {
            job.admit_via(registry, Some(worker), in_scope, park)
        })
    }
}

/// Admits `job` (see [`HeapJob::admit_via`]), a job of `worker`'s pool spawned on `worker`,
/// pinned to worker `target`; returns once the job is in `target`'s inbox (or, if `target` has
/// stopped, has started), so the jobs of successive pinned spawns reach an inbox in spawn order.
///
/// Admitted on the spot or in the help-first loop, the router is the top of this worker's own
/// deque: it is taken back and run here at once, which delivers it. Else (granted by another
/// thread, which pushed it where that thread runs, or stolen in between) this worker waits,
/// helping, until whoever runs it has delivered it: a router's run never waits (see
/// [`Pinned::run`]), and this wait can take it from any queue itself.
pub fn admit_pinned<F: FnOnce() + Send>(
    job: Box<HeapJob<F>>,
    target: usize,
    worker: &WorkerThread,
) {
    let arrived = Latch::new(WakeTarget::Worker(worker.index()));
    let mut router = None;
    job.admit_via(worker.registry(), Some(worker), true, |job| {
        let routed = Pinned::route(job, target, &arrived);
        router = Some(routed);
        routed
    });
    // A job popped is run or pushed back: pushing the top back restores the deque. (Only this
    // thread pushes to its deque, so a top equal to the router is the router, or, if a thief
    // ran and freed it meanwhile, another job at its address, which this thread may run as any
    // wait would.)
    if let Some(top) = worker.pop() {
        if Some(top) == router {
            // SAFETY: an admitted job of this pool taken out of the deque, run once, here.
            unsafe { top.run() };
        } else {
            worker.push(top);
        }
    }
    // Wait site "broadcast": context (this pool, the spawning job), policy OwnDeque (the one
    // pop above) then AnyAdmitted.
    if !arrived.probe() {
        worker.wait_until(|| arrived.probe());
    }
}

/// A router: an admitted job, the worker that must run it, and the latch its spawner waits on
/// until the job is in that worker's inbox.
struct Pinned {
    job: JobRef,
    target: usize,
    arrived: *const Latch,
}

impl Pinned {
    /// The router of `job`, pinned to worker `target`; its run sets `arrived`.
    fn route(job: JobRef, target: usize, arrived: &Latch) -> JobRef {
        let data = Box::into_raw(Box::new(Pinned {
            job,
            target,
            arrived,
        }));
        // SAFETY: `run` is sound on any worker of the job's pool while the box lives, and the
        // box lives until its one run (which takes it back).
        unsafe { JobRef::new(data as *const (), Pinned::run) }
    }

    /// Delivers the job to its worker's inbox, where that worker takes it once its own deque is
    /// empty, and sets the spawner's latch. Never waits: the job itself runs here only if its
    /// worker has stopped, after the latch is set. The router runs once (it is in one queue at
    /// a time), and its job is in one inbox.
    unsafe fn run(data: *const ()) {
        // SAFETY: the box came from `Box::into_raw` in `route`; this is its one run.
        let Pinned {
            job,
            target,
            arrived,
        } = *unsafe { Box::from_raw(data as *mut Pinned) };
        // SAFETY: jobs run only on worker threads.
        let registry = unsafe { WorkerThread::current_unchecked() }.registry();
        // SAFETY: the spawner waits for the latch in `admit_pinned`, so it is alive until set.
        unsafe {
            registry
                .inboxes()
                .deliver(target, job, registry.sleep(), arrived)
        };
    }
}
