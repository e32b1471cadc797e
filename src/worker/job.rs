//! Jobs: type-erased units of work in the deques, and the three shapes they come in.
//!
//! This module owns how a job's closure, result and completion signal are stored and how a
//! worker runs one. It never decides admission: a [`HeapJob`] or [`RootJob`] is pushed only once
//! its [`Lender`] is admitted, and a [`JoinJob`] (the second half of a `join`, pushed before any
//! admission) asks the token table itself when a thief picks it up.
//!
//! * [`HeapJob`]: a spawned job (scope or detached), boxed, run once by whoever pops it.
//! * [`RootJob`]: a job that a thread outside the pool (or a worker of another pool) waits for,
//!   on the waiting thread's stack.
//! * [`JoinJob`]: the `b` of `join(a, b)`, on the joiner's stack. Run inline by the joiner when it
//!   pops it back in `join`; anyone else who takes it from the deque (a thief, or the joiner's
//!   own thread helping deeper in its stack) runs it as part of the joiner's job if that job is
//!   current there, else must admit it (loan of the joiner's token, else a pool token) or send
//!   it back unrun to the joiner's thread, for a wait of the joiner's job to run.

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;

use crate::base::sync::Ordering;

use crate::admission::token::{Lender, LenderRef};
use crate::base::job_memory;
use crate::base::job_ref::{JobRef, JobResult};
use crate::base::trace::{How, Kind};
use crate::base::wake::WakeTarget;
use crate::worker::half::{Half, HalfRun, DECLINED, RAN, SETTLED};
use crate::worker::latch::{CountLatch, Latch};
use crate::worker::registry::Registry;
use crate::worker::thread::WorkerThread;

/// A spawned job, admitted before it is pushed. One allocation holds the job and its lender,
/// and lives as long as the lender's last reference (a parked token can outlive the run).
#[repr(C)]
pub struct HeapJob<F> {
    /// The first field, so that the job's address is its lender's: the lender's `free` frees
    /// the whole job. The count starts at one: the runner's reference, taken in `run`.
    lender: Lender,
    /// Taken by the run; `None` after it.
    body: UnsafeCell<Option<F>>,
    /// The scope's latch to count down once the job's token is released; null when detached.
    scope: *const CountLatch,
}

impl<F: FnOnce() + Send> HeapJob<F> {
    /// A job that runs `body` (which must not unwind) as the job of `lender`, then counts down
    /// `scope` if not null.
    ///
    /// The job's memory comes from the calling thread's recycled job blocks (`job_memory`), as a
    /// `Box` would have it: it may be dropped as one.
    #[inline]
    pub fn new(lender: Lender, body: F, scope: *const CountLatch) -> Box<Self> {
        let job = job_memory::alloc(Layout::new::<Self>()) as *mut Self;
        // SAFETY: `job_memory::alloc` returns a block for this layout, allocated by the global
        // allocator with it (the module's rule), which is what `Box::from_raw` requires.
        unsafe {
            job.write(HeapJob {
                lender: lender.embedded(Self::free),
                body: UnsafeCell::new(Some(body)),
                scope,
            });
            Box::from_raw(job)
        }
    }

    /// Admits the job into `registry` and makes it runnable (see [`Registry::admit`]), from
    /// the calling thread, whose worker state (if it is a worker) is `here`. A job of a scope
    /// must have been counted in the scope already.
    pub fn admit(self: Box<Self>, registry: &Registry, here: Option<&WorkerThread>) {
        self.admit_counting(registry, here, std::ptr::null(), |job| job);
    }

    /// [`HeapJob::admit`] for a job of a scope spawned on `worker`, a worker of `registry`: the
    /// job is counted in its scope at admission, or takes over a finished job's place in the
    /// count.
    pub fn admit_in_scope(self: Box<Self>, registry: &Registry, worker: &WorkerThread) {
        let scope = self.scope;
        self.admit_counting(registry, Some(worker), scope, |job| job);
    }

    /// [`HeapJob::admit`] (`in_scope`: [`HeapJob::admit_in_scope`]) where what the admission
    /// makes runnable is `via(job)` instead of the job itself: `via` parks the job's ref where
    /// the ref it returns (an indirection) will run it from. `via` is called before the
    /// admission starts, so the job may run from there only once some ref `via` returned runs.
    pub fn admit_via(
        self: Box<Self>,
        registry: &Registry,
        here: Option<&WorkerThread>,
        in_scope: bool,
        via: impl FnOnce(JobRef) -> JobRef,
    ) {
        let scope = if in_scope {
            self.scope
        } else {
            std::ptr::null()
        };
        self.admit_counting(registry, here, scope, via);
    }

    /// [`HeapJob::admit`], counting the job in `count_in` unless null, making `via(job)`
    /// runnable.
    fn admit_counting(
        self: Box<Self>,
        registry: &Registry,
        here: Option<&WorkerThread>,
        count_in: *const CountLatch,
        via: impl FnOnce(JobRef) -> JobRef,
    ) {
        let job = self.into_job_ref();
        // The lender's address is the job's (`repr(C)`, first field), taken from the job's raw
        // pointer rather than from `&self.lender`: it must be valid for the whole job, which
        // `free` releases through it, and it must not be a borrow of the box, which
        // `into_job_ref` gives up.
        let lender = job.data() as *const Lender;
        let job = via(job);
        // SAFETY: the lender lives in the job, which stays put until it runs and is freed only
        // with its last reference, and `admit` does not dereference it once the job is
        // runnable (through `via`'s ref, which runs it only once that ref runs: see `fifo` and
        // `broadcast`). `count_in` is null or the job's scope, which outlives it, and on which
        // the spawning job or body holds a count.
        unsafe { registry.admit(here, lender, job, count_in) };
    }

    /// Admits the root job on the credit of the calling thread, a worker of another pool that
    /// will wait for it (as a call from another pool's job is admitted: never waiting), and
    /// makes it runnable. A job of a scope must have been counted in the scope already.
    pub fn admit_on_credit(self: Box<Self>, registry: &Registry) {
        let job = self.into_job_ref();
        // SAFETY: the lender is the job's first field (`repr(C)`); the job is not runnable
        // yet, so it is alive, and the reference is not used once `make_runnable` ran.
        registry.admit_credit(unsafe { &*(job.data() as *const Lender) });
        registry.make_runnable(job);
    }

    /// Admits the job now if a token is free (its parent's, else the pool's) and makes it
    /// runnable; else hands it back. Never waits.
    pub fn offer(self: Box<Self>, registry: &Registry) -> Result<(), Box<Self>> {
        if !registry.try_admit(&self.lender) {
            return Err(self);
        }
        registry.make_runnable(self.into_job_ref());
        Ok(())
    }

    /// Erases the job's type. The job is freed with its lender's last reference.
    fn into_job_ref(self: Box<Self>) -> JobRef {
        // SAFETY: `run` takes back the box, once, on a worker of the pool the job is admitted to.
        unsafe { JobRef::new(Box::into_raw(self) as *const (), Self::run) }
    }

    unsafe fn run(data: *const ()) {
        let this = data as *const Self;
        // SAFETY: `data` came from `Box::into_raw` in `into_job_ref`; the job runs once, and
        // only its run touches the body.
        let (body, scope) = unsafe { ((*(*this).body.get()).take(), (*this).scope) };
        let body = body.expect("a job runs once");
        // SAFETY: the job's lender is its first field (`repr(C)`), and its count's first
        // reference, the runner's, is taken over here, once.
        let lender = unsafe { LenderRef::from_raw(this as *const Lender) };
        // SAFETY: jobs run only on worker threads.
        let worker = unsafe { WorkerThread::current_unchecked() };
        // The job may be freed inside (its token released and no other reference left): it is
        // not touched after this.
        match worker.is_traced() {
            false => worker.run_admitted(lender, true, body),
            true => Self::run_traced(worker, lender, body, scope.is_null()),
        }
        if !scope.is_null() {
            // SAFETY: the scope waits for this count before it returns, so the latch is alive.
            unsafe { worker.count_down(scope) };
        }
    }

    /// [`HeapJob::run`]'s run of the body while its pool is traced, out of line: the untraced
    /// spawn pays one branch (`benches/callgrind.sh`), not the setup of a recording closure.
    #[cold]
    #[inline(never)]
    fn run_traced(worker: &WorkerThread, lender: LenderRef, body: F, detached: bool) {
        let kind = match detached {
            true => Kind::Spawn,
            false => Kind::ScopeSpawn,
        };
        worker.traced::<F, _>(kind, How::Admitted, || {
            worker.run_admitted(lender, true, body)
        });
    }

    /// The lender's `free`: frees the job.
    ///
    /// # Safety
    /// `lender` is the lender of a `HeapJob<F>` made by `new` and boxed, and no reference to it
    /// is left.
    unsafe fn free(lender: *const Lender) {
        let job = lender as *mut Self;
        // SAFETY: the caller's contract; the job's address is its lender's, and its block was
        // allocated by the global allocator with this layout (by `new`, or as a `Box`).
        unsafe {
            ptr::drop_in_place(job);
            job_memory::free(job as *mut u8, Layout::new::<Self>());
        }
    }
}

// SAFETY: the closure is Send; the lender is Send and Sync; `scope` points to a
// `CountLatch` (Sync: an atomic and an index) that the scope keeps alive until the job ran.
unsafe impl<F: Send> Send for HeapJob<F> {}

/// A scope's job that was spawned from a worker of another pool and could not be admitted at
/// once: the scope's owner admits it as a child of its own job, at the latest when it waits for
/// the scope's end (see `Scope::spawn`). Named policy **ForeignScopeSpawnDeferred**: the
/// spawner holds a token of its own pool and must not wait for one of this pool (the cross-pool
/// rule), and the owner may be waiting for the spawner.
pub trait Deferred: Send {
    /// Admits the job as a child of `parent` if not null (the credit root of an in-place scope
    /// owned by another pool's worker), else of the calling thread's current job, waiting (and
    /// helping) for a token as any spawn does. Called by the scope's owner.
    ///
    /// # Safety
    /// `parent` is null or a live lender of a job of `registry`.
    unsafe fn admit_as_child(self: Box<Self>, registry: &Registry, parent: *const Lender);
}

impl<F: FnOnce() + Send> Deferred for HeapJob<F> {
    unsafe fn admit_as_child(mut self: Box<Self>, registry: &Registry, parent: *const Lender) {
        // The lender made on the other pool's worker was a root and was never shared.
        let here = WorkerThread::current();
        let lender = if parent.is_null() {
            registry.new_lender_on(registry.own(here))
        } else {
            // SAFETY: the caller's contract.
            unsafe { registry.new_child(parent) }
        };
        self.lender = lender.embedded(Self::free);
        // Counted in the scope when it was spawned.
        self.admit(registry, here);
    }
}

/// A job another thread waits for, on that thread's stack.
pub struct RootJob<F, R> {
    lender: LenderRef,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<JobResult<R>>,
    /// Set once the job has run and released its token.
    pub latch: Latch,
}

impl<F: FnOnce() -> R + Send, R: Send> RootJob<F, R> {
    /// A job that runs `func` as the job of `lender` and sets a latch that wakes `waiter`.
    pub fn new(lender: LenderRef, func: F, waiter: WakeTarget) -> Self {
        RootJob {
            lender,
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(JobResult::None),
            latch: Latch::new(waiter),
        }
    }

    /// The job as a `JobRef`.
    ///
    /// # Safety
    /// The job must stay where it is until its latch is set.
    pub unsafe fn as_job_ref(&self) -> JobRef {
        // SAFETY: forwarded from the caller (the job outlives its ref, which runs once).
        unsafe { JobRef::new(self as *const Self as *const (), Self::run) }
    }

    unsafe fn run(data: *const ()) {
        let this = data as *const Self;
        // SAFETY: jobs run only on worker threads.
        let worker = unsafe { WorkerThread::current_unchecked() };
        // SAFETY: the waiting thread keeps the job alive until the latch is set, and only this
        // run touches `func` and `result` before that.
        unsafe {
            let func = (*(*this).func.get()).take().expect("a job runs once");
            let lender = (*this).lender.clone();
            worker.traced::<F, _>(Kind::Install, How::Admitted, || {
                worker.run_admitted(lender, false, || {
                    *(*this).result.get() = JobResult::call(func)
                })
            });
            Latch::set(&(*this).latch, worker.registry().sleep());
        }
    }

    /// The job's value, or its panic raised again. Call once the latch is set.
    pub fn into_value(self) -> R {
        debug_assert!(self.latch.probe());
        self.result.into_inner().into_value()
    }
}

/// The `b` of `join(a, b)`, on the joiner's stack, kept in its thread's split stack.
///
/// It has no drop glue on the join's fast path: by the time the joiner drops it, `func` was
/// taken (every half runs once; debug builds check it) and `result` was read or never
/// written.
#[repr(C)]
pub struct JoinJob<F, R> {
    head: Half,
    func: UnsafeCell<Option<F>>,
    /// Written by a run away from the joiner's frame (`run_into_result`), exactly when `func`
    /// was taken by such a run; read once by the joiner, which then finds `func` gone.
    result: UnsafeCell<MaybeUninit<JobResult<R>>>,
}

#[cfg(debug_assertions)]
impl<F, R> Drop for JoinJob<F, R> {
    fn drop(&mut self) {
        debug_assert!(self.func.get_mut().is_none(), "a join half never ran");
    }
}

impl<F: FnOnce() -> R + Send, R: Send> JoinJob<F, R> {
    /// `func` as the second half of a join whose current job is `parent`.
    #[inline]
    pub fn new(func: F, parent: *const Lender) -> Self {
        JoinJob {
            head: Half::new(Self::run, parent),
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The half's address, for its thread's split stack. The job must stay where it is until
    /// its joiner has its result.
    #[inline]
    pub fn as_half(&self) -> *const () {
        self as *const Self as *const ()
    }

    /// The half's result, on its joiner's frame, once no taker runs it: runs `b` here, unless a
    /// wait of the job ran it already.
    /// `worker`: the joiner's, which records the run while tracing.
    #[inline]
    pub fn run_inline(&self, worker: &WorkerThread) -> JobResult<R> {
        // SAFETY: only the joiner's thread touches `func` once no taker runs the half.
        match unsafe { (*self.func.get()).take() } {
            Some(func) if worker.is_traced() => Self::call_traced(worker, func),
            Some(func) => JobResult::call(func),
            None => self.take_result(),
        }
    }

    /// `b`'s value, on its joiner's frame after a take-back: calls `b` here, not catching its
    /// panic (the joiner has nothing left to wait for), unless a wait of the job ran it
    /// already (then its result, a panic raised again).
    /// `TRACED`: the join is traced (`join`'s out-of-line path), and `worker` records the run.
    #[inline]
    pub fn call_inline<const TRACED: bool>(&self, worker: &WorkerThread) -> R {
        // SAFETY: as in `run_inline`.
        match unsafe { (*self.func.get()).take() } {
            Some(func) if TRACED => worker.traced::<F, _>(Kind::Join, How::Inline, func),
            Some(func) => func(),
            None => self.take_result().into_value(),
        }
    }

    /// [`JoinJob::run_inline`]'s call while the pool is traced, out of line (see
    /// [`HeapJob::run_traced`]).
    #[cold]
    #[inline(never)]
    fn call_traced(worker: &WorkerThread, func: F) -> JobResult<R> {
        worker.traced::<F, _>(Kind::Join, How::Inline, || JobResult::call(func))
    }

    /// Whether a taker that claimed the half is done with it (ran it, found it run, or
    /// declined it).
    #[inline]
    pub fn settled(&self) -> bool {
        // Acquire: pairs with the taker's release in `Half::settle`.
        self.head.state.load(Ordering::Acquire) & SETTLED != 0
    }

    /// The result of a claimed half, once [`JoinJob::settled`]: a declined one runs here (its
    /// slot stays in use meanwhile, so it is marked run first: a wait inside it must not take
    /// it for a declined half of its job).
    pub fn result_after_taken(&self, worker: &WorkerThread) -> JobResult<R> {
        debug_assert!(self.settled());
        // Relaxed: settled, so only this thread looks at the state now.
        self.head.state.fetch_or(RAN, Ordering::Relaxed);
        self.run_inline(worker)
    }

    /// The result written by a run away from the joiner's frame: called once, by the joiner,
    /// only when it finds `func` gone.
    fn take_result(&self) -> JobResult<R> {
        // SAFETY: `func` is gone, so a run other than the joiner's took it and wrote the
        // result (`run_into_result`), and is done with the cell (its state says so, or it ran
        // on this thread); the joiner reads it once.
        unsafe { (*self.result.get()).assume_init_read() }
    }

    unsafe fn run(this: *const Half, how: HalfRun) {
        // SAFETY: `Half` is the first field of this `repr(C)` job, alive (`Half::run`).
        let job = unsafe { &*(this as *const Self) };
        // SAFETY: jobs run only on worker threads.
        let worker = unsafe { WorkerThread::current_unchecked() };
        crate::base::chaos::point();
        match how {
            HalfRun::Here => {
                // Relaxed: no taker can claim the half (private, or declined and settled).
                job.head.state.fetch_or(RAN, Ordering::Relaxed);
                // Above frames of the job that are not its own (the wait's): a start of its
                // own (B5), one level deeper in `part_depth`.
                worker.start_job(|| worker.as_part(|| job.run_into_result(worker, How::Part)));
            }
            HalfRun::OnCredit => {
                // Relaxed: declined and settled, so only this thread looks at the state.
                job.head.state.fetch_or(RAN, Ordering::Relaxed);
                let lender = job.new_lender(worker);
                let registry = worker.registry();
                if !registry.try_admit(&lender) {
                    registry.admit_credit_half(&lender);
                }
                worker.run_admitted(lender, false, || job.run_into_result(worker, How::Credit));
            }
            HalfRun::Taken { credit } => job.run_taken(worker, credit),
        }
    }

    /// [`HalfRun::Taken`]: see there.
    fn run_taken(&self, worker: &WorkerThread, credit: bool) {
        let registry = worker.registry();
        let this = &self.head as *const Half;
        // Acquire: the owner's `RAN` (a wait ran the half in place while it was private, before
        // the promotion that made it public) is ordered before the claim's acquire.
        if self.head.state.load(Ordering::Acquire) & RAN != 0 {
            // SAFETY: the joiner keeps the half alive until it sees it settled.
            unsafe { Half::settle(this, RAN, registry.sleep()) };
            return;
        }
        if worker.runs_as_part_of(self.head.parent) {
            // `b` is the current job's code, run while its `a` waits, exactly as if taken back.
            // Admitting it instead could leave it to an `a` that waits for it to start (the
            // job's token lent out, none free): a hang.
            worker.start_job(|| worker.as_part(|| self.run_into_result(worker, How::Part)));
            // SAFETY: as above.
            unsafe { Half::settle(this, RAN, registry.sleep()) };
            return;
        }
        // Else `b` would start above frames it is not part of, so it must be admitted like any
        // job (B3, B5), or run on credit, or stay for its job.
        let lender = self.new_lender(worker);
        if !registry.try_admit(&lender) {
            if !credit {
                registry.note_handed_back();
                // SAFETY: as above; the lender, never shared, is dropped here.
                unsafe { Half::settle(this, DECLINED, registry.sleep()) };
                return;
            }
            registry.admit_credit_half(&lender);
        }
        let how = match credit {
            true => How::Credit,
            false => How::Admitted,
        };
        worker.run_admitted(lender, false, || self.run_into_result(worker, how));
        // SAFETY: as above.
        unsafe { Half::settle(this, RAN, registry.sleep()) };
    }

    /// A lender for the half as a child of its joiner's job.
    fn new_lender(&self, worker: &WorkerThread) -> LenderRef {
        // SAFETY: the joiner's job is alive while the joiner waits for its half.
        LenderRef::new(unsafe { worker.registry().new_child(self.head.parent) })
    }

    /// Runs the half away from its joiner's frame, on `worker`, which records the run (`how`)
    /// while tracing.
    fn run_into_result(&self, worker: &WorkerThread, how: How) {
        // SAFETY: the caller claimed the half, so it alone takes `func` (once: the state says
        // it ran, or the joiner runs it only once the taker is done); the joiner reads the
        // result only after that.
        unsafe {
            let func = (*self.func.get()).take().expect("a join half runs once");
            let result = worker.traced::<F, _>(Kind::Join, how, || JobResult::call(func));
            (*self.result.get()).write(result);
        }
    }
}
