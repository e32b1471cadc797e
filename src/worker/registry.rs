//! The registry: a pool's shared state.
//!
//! This module owns what every thread of a pool shares: the workers' stealers, their join
//! halves' split stacks and the global injector, the sleep state (with the idle count), the token table, the event
//! counters, the inboxes of pinned jobs and the detached fifo lanes. It knows no worker thread:
//! what depends on the calling thread (its counter row, its deque) is `thread`'s, and what
//! waits is `wait`'s. It must never make a job runnable that was not admitted.

use std::io::Write;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

use crossbeam_deque::{Injector, Stealer, Worker};

use crate::admission::stats::{Counter, Counters, Stats};
use crate::admission::token::{Admission, Lender, TokenTable};
use crate::base::half_stack::HalfStack;
use crate::base::job_ref::{drop_quietly, panic_message, JobRef};
use crate::base::sync::{Arc, AtomicBool, Ordering};
use crate::base::trace::PoolTrace;
use crate::base::wake::{SleepingPool, WakeWorker};
use crate::worker::fifo_lanes::Lanes;
use crate::worker::inbox::Inboxes;
use crate::worker::sleep::Sleep;

/// A panic handler for detached jobs.
pub type PanicHandler = Box<dyn Fn(Box<dyn std::any::Any + Send>) + Send + Sync>;

static NEXT_POOL_ID: StdAtomicUsize = StdAtomicUsize::new(1);

/// The state shared by a pool's workers and its handles.
pub struct Registry {
    pub(super) id: usize,
    pub(super) stealers: Box<[Stealer<JobRef>]>,
    /// Each worker's split stack of unrun join halves, whose public part any worker may claim.
    pub(super) halves: Box<[Arc<HalfStack>]>,
    pub(super) injector: Injector<JobRef>,
    pub(super) sleep: Sleep,
    pub(super) tokens: TokenTable,
    pub(super) counters: Counters,
    pub(super) terminating: AtomicBool,
    pub(super) panic_handler: Option<PanicHandler>,
    /// broadcast: each worker's inbox of pinned jobs (see `broadcast`).
    pub(super) inboxes: Inboxes,
    /// Each worker's lanes for detached `spawn_fifo` jobs (see `fifo`).
    pub(super) fifo_lanes: Box<[Lanes]>,
    /// The pool's trace, while tracing is on (`base::trace`).
    pub(super) trace: Option<std::sync::Arc<PoolTrace>>,
}

/// What a worker thread needs to start, made before any thread runs.
pub struct WorkerSeed {
    pub(super) deque: Worker<JobRef>,
    pub(super) index: usize,
}

impl WorkerSeed {
    /// The index of the worker this seed starts.
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Registry {
    /// A registry for `num_threads` workers and `max_inflight` tokens, with the seeds the worker
    /// threads start from.
    pub fn new(
        num_threads: usize,
        max_inflight: usize,
        panic_handler: Option<PanicHandler>,
        trace: Option<std::sync::Arc<PoolTrace>>,
    ) -> (Arc<Registry>, Vec<WorkerSeed>) {
        let deques: Vec<Worker<JobRef>> = (0..num_threads).map(|_| Worker::new_lifo()).collect();
        let registry = Arc::new(Registry {
            // Relaxed: only uniqueness matters.
            id: NEXT_POOL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            stealers: deques.iter().map(Worker::stealer).collect(),
            halves: (0..num_threads)
                .map(|_| Arc::new(HalfStack::new()))
                .collect(),
            injector: Injector::new(),
            sleep: Sleep::new(num_threads),
            tokens: TokenTable::new(max_inflight),
            counters: Counters::new(num_threads),
            terminating: AtomicBool::new(false),
            panic_handler,
            inboxes: Inboxes::new(num_threads),
            fifo_lanes: Lanes::per_worker(num_threads),
            trace,
        });
        let seeds = deques
            .into_iter()
            .enumerate()
            .map(|(index, deque)| WorkerSeed { deque, index })
            .collect();
        (registry, seeds)
    }

    /// The pool's unique id.
    #[inline]
    pub fn id(&self) -> usize {
        self.id
    }

    /// The number of worker threads.
    pub fn num_threads(&self) -> usize {
        self.stealers.len()
    }

    /// The number of tokens.
    pub fn max_inflight(&self) -> usize {
        self.tokens.cap()
    }

    /// Each worker's lanes for detached fifo spawns.
    #[inline]
    pub fn fifo_lanes(&self) -> &[Lanes] {
        &self.fifo_lanes
    }

    /// The pool's trace, if tracing is on.
    #[inline]
    pub fn trace(&self) -> Option<&std::sync::Arc<PoolTrace>> {
        self.trace.as_ref()
    }

    /// The workers' sleep state.
    #[inline]
    pub fn sleep(&self) -> &Sleep {
        &self.sleep
    }

    /// The workers' inboxes of pinned jobs (see `broadcast`).
    #[inline]
    pub fn inboxes(&self) -> &Inboxes {
        &self.inboxes
    }

    /// Asks the workers to finish the queued work and exit.
    pub fn terminate(&self) {
        // SeqCst: read by sleepers' `done` checks under their locks.
        self.terminating.store(true, Ordering::SeqCst);
        self.sleep.wake_all();
    }

    /// Whether the pool was asked to terminate ([`Registry::terminate`]): it was dropped, and its
    /// workers exit once they find no queued work.
    pub fn has_terminated(&self) -> bool {
        // SeqCst: pairs with `terminate`'s store, as the workers' `done` checks do.
        self.terminating.load(Ordering::SeqCst)
    }

    /// A snapshot of the pool's statistics.
    pub fn stats(&self) -> Stats {
        let mut stats = self.counters.snapshot(&self.tokens);
        stats.idle_workers = self.sleep.idle_count();
        stats
    }

    /// The state of a job of this pool whose parent is `parent` (a root if null).
    ///
    /// # Safety
    /// `parent` is null or points to the lender of a job of this pool kept alive by its run.
    #[inline]
    pub unsafe fn new_child(&self, parent: *const Lender) -> Lender {
        // SAFETY: the caller's contract.
        Lender::new(unsafe { parent.as_ref() })
    }

    /// Hands a detached job's panic to the pool's handler, or prints it. Never unwinds: a
    /// handler that panics is reported and its panic's payload leaked; the payload itself is
    /// dropped quietly (its `Drop` may panic); printing ignores a closed stderr.
    pub fn handle_panic(&self, payload: Box<dyn std::any::Any + Send>) {
        let mut stderr = std::io::stderr();
        match &self.panic_handler {
            Some(handler) => {
                let call = std::panic::AssertUnwindSafe(|| handler(payload));
                if let Err(second) = std::panic::catch_unwind(call) {
                    std::mem::forget(second);
                    let _ = writeln!(stderr, "treepool: the panic handler itself panicked");
                }
            }
            None => {
                let message = panic_message(payload.as_ref());
                let _ = writeln!(stderr, "treepool: a detached job panicked: {message}");
                drop_quietly(payload);
            }
        }
    }

    /// Pushes an admitted job to the injector, where every worker looks for work.
    pub(super) fn inject(&self, job: JobRef) {
        self.injector.push(job);
        self.sleep.new_work();
    }
}

/// The event counter of an admission.
#[inline]
pub(super) fn admission_counter(how: Admission) -> Counter {
    match how {
        Admission::Loan => Counter::AdmittedOnLoan,
        Admission::Pool => Counter::AdmittedFromPool,
        Admission::Credit => Counter::AdmittedOnCredit,
    }
}

/// The registry as another pool's latches see it: through the `Arc` that keeps it alive.
impl WakeWorker for Arc<Registry> {
    fn wake_worker(&self, index: usize) {
        self.sleep.wake_worker(index);
    }
}

impl SleepingPool for Arc<Registry> {
    fn id(&self) -> usize {
        self.id
    }
}
