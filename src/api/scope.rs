//! Scopes: spawned jobs that may borrow from the enclosing stack.
//!
//! This module owns the scope's count of unfinished jobs and its stored panic. A scope's body
//! runs inline in the current job; each [`Scope::spawn`] admits a child job through the token
//! table (waiting, and helping, while no token is free); the scope returns once every job spawned
//! in it has finished and released its token, the waiting thread helping meanwhile. It never
//! lets a spawned job outlive the scope.

use std::any::Any;
use std::marker::PhantomData;
use std::panic;
use std::ptr;

use crate::admission::token::LenderRef;
use crate::base::chaos;
use crate::base::job_ref::{drop_quietly, JobResult};
use crate::base::sync::{Arc, AtomicBool, AtomicPtr, Ordering};
use crate::worker::fifo_lanes::Lanes;
use crate::worker::job::{Deferred, HeapJob};
use crate::worker::latch::CountLatch;
use crate::worker::registry::Registry;
use crate::worker::routing;
use crate::worker::thread::WorkerThread;
use crate::worker::wait::wait_on;

/// A scope in which jobs may be spawned that borrow data living at least as long as `'scope`.
///
/// Made by [`scope`](crate::scope) or [`ThreadPool::scope`](crate::ThreadPool::scope). Every job
/// spawned in it has finished when the scope call returns.
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// let mut parts = [0u64; 4];
/// pool.scope(|s| {
///     for (i, part) in parts.iter_mut().enumerate() {
///         s.spawn(move |_| *part = (i as u64 + 1) * 10);
///     }
/// });
/// assert_eq!(parts, [10, 20, 30, 40]);
/// ```
pub struct Scope<'scope> {
    registry: Arc<Registry>,
    latch: CountLatch,
    /// The first panic of the body or of a spawned job; null if none.
    panic: AtomicPtr<Box<dyn Any + Send>>,
    /// Jobs spawned from workers of other pools that the owner has to admit (a stack).
    deferred: AtomicPtr<DeferredNode<'scope>>,
    /// For an in-place scope owned by another pool's worker: the root job, on the caller's
    /// credit, whose children the owner's spawns are (see `scope_fifo`); released on drop.
    credit: Option<LenderRef>,
    /// Whether a spawn of that owner waits for admission as a child of `credit` right now (see
    /// [`Scope::owner_admits`]). Only the owner's thread reads or writes it.
    credit_admits: AtomicBool,
    /// The address of the job the owner's thread ran when it made the scope (0 if none): only
    /// spawns made while it is the current job again are the owner's own (see `spawn_job`).
    owner_job: usize,
    /// Invariant in `'scope`, and spawned closures need not be `Sync`: like rayon's scope.
    marker: PhantomData<SpawnedFn<'scope>>,
}

/// An entry of [`Scope::deferred`].
struct DeferredNode<'scope> {
    job: Box<dyn Deferred + 'scope>,
    next: *mut DeferredNode<'scope>,
}

/// The variance marker of [`Scope`]: the type of what it spawns.
type SpawnedFn<'scope> = Box<dyn FnOnce(&Scope<'scope>) + Send + Sync + 'scope>;

impl<'scope> Scope<'scope> {
    /// Spawns `f` as a child job of the job running on the calling thread.
    ///
    /// Admission happens in the call: `f` runs on its parent's token if the parent is not
    /// lending it right now, else on a free pool token; if neither is free, the call waits
    /// (running other jobs meanwhile) and returns once `f` is admitted. That wait is the
    /// backpressure that bounds jobs in flight to `max_inflight × levels`.
    ///
    /// Called on any thread that is not a worker of the scope's pool (a worker of another pool
    /// the scope was passed to through a call, or a plain thread started inside the scope), the
    /// call never waits: `f` starts at once as a root job if a pool token is free, else it is
    /// left to the scope's owner, which admits it as a child of its own job when it waits for
    /// the scope's end. (Waiting for a pool token instead could deadlock: the
    /// owner may hold the only one while it waits for the caller.) Such spawns are not
    /// backpressured.
    ///
    /// The owner of an in-place scope ([`in_place_scope`](crate::in_place_scope)) that is no
    /// worker of the scope's pool is the one exception: it holds none of this pool's tokens, so
    /// its spawns wait for admission. From a plain thread `f` is a root that waits (parks) for
    /// a pool token; from another pool's worker `f` is a child of the scope's credit root (its
    /// loan, else a pool token), and the worker runs its own pool's jobs while it waits. A spawn
    /// that one of those jobs makes into this scope meanwhile, on the same thread, does not
    /// wait: it is offered or left to the owner, as from any other thread (the credit root has
    /// one waiting child at most).
    ///
    /// A panic in `f` is raised again by the scope call once every job has finished.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let count = AtomicUsize::new(0);
    /// treepool::scope(|s| {
    ///     for _ in 0..3 {
    ///         s.spawn(|s| {
    ///             count.fetch_add(1, Ordering::Relaxed);
    ///             s.spawn(|_| {
    ///                 count.fetch_add(1, Ordering::Relaxed);
    ///             });
    ///         });
    ///     }
    /// });
    /// assert_eq!(count.into_inner(), 6);
    /// ```
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        self.spawn_job(self, f, Order::Lifo);
    }

    /// Spawns `f(handle)` as a job of this scope, where `handle` is this scope or a handle
    /// built on it ([`ScopeFifo`]). `order`: where a spawn from a worker of the scope's pool goes
    /// once admitted (its deque, or a fifo lane); a spawn from any other thread is admitted as
    /// [`Scope::spawn`] says, the same for every handle.
    // Inlined into each spawn (the order is then known and the other arms go): a call of its
    // own cost every spawn of a chain, a tree or a fan-out 20–30 instructions (callgrind).
    #[inline]
    pub(crate) fn spawn_job<H, F>(&self, handle: &H, f: F, order: Order<'_>)
    where
        H: ScopeHandle<'scope> + 'scope,
        F: FnOnce(&H) + Send + 'scope,
    {
        let body = job_body(handle, f);
        let here = WorkerThread::current();
        let Some(worker) = self.registry.own(here) else {
            return self.spawn_from_outside(body, here, order);
        };
        let job = HeapJob::new(self.registry.new_lender_on(Some(worker)), body, &self.latch);
        match order {
            // Counted in the scope at admission (see `Registry::admit`).
            Order::Lifo => job.admit_in_scope(&self.registry, worker),
            Order::Fifo(lanes) => routing::admit_in_scope(job, worker, lanes),
            Order::Pinned(target) => routing::admit_pinned(job, target, worker),
        }
    }

    /// [`Scope::spawn_job`] from a thread that is no worker of the scope's pool (`here`: its
    /// worker state if it is another pool's worker). Out of line: every spawn of a job of the
    /// pool inlines `spawn_job`, and these paths are rare there.
    #[inline(never)]
    fn spawn_from_outside(
        &self,
        body: impl FnOnce() + Send + 'scope,
        here: Option<&WorkerThread>,
        order: Order<'_>,
    ) {
        // The owner of an in-place scope that is no worker of this pool holds none of its
        // tokens, so its own spawns may wait: those of the body, made with the job that opened
        // the scope current on the owner's thread. Another job that thread runs while it waits
        // (a job of its own pool, maybe a root that a job of this scope started) spawns as any
        // other thread does: it may hold what the scope's jobs wait for. And one owner spawn
        // at a time waits on the credit root (a lender has one waiting borrower at most): one
        // made while another waits is left to the owner too.
        let owner_waits = self.owner_may_wait(here);
        let lender = match &self.credit {
            // SAFETY: the credit root lives as long as the scope, which outlives its jobs.
            Some(credit) if owner_waits => unsafe {
                self.registry.new_child(LenderRef::as_ptr(credit))
            },
            _ => self.registry.new_lender_on(None),
        };
        let job = HeapJob::new(lender, body, &self.latch);
        if owner_waits {
            // A plain thread waits (parks) for a pool token; another pool's worker spawns a
            // child of its credit root, admitted on its loan or a pool token, waiting and
            // running its own pool's jobs meanwhile (design §2.3, §4.5).
            self.latch.increment();
            self.owner_admits(|| job.admit(&self.registry, here));
            return;
        }
        // Another pool's worker, a thread outside every pool that a job of this scope started
        // and waits for, or the owner while one of its spawns waits: waiting for a token here
        // could wait for the owner's, or be a second borrower of the credit root. (Checked
        // before the count: a failed check must not leave the scope waiting for no job.)
        debug_assert!(
            !matches!(order, Order::Pinned(_)),
            "a pinned spawn from outside the pool"
        );
        self.latch.increment();
        if let Err(job) = job.offer(&self.registry) {
            self.defer(job);
        }
    }

    /// Spawns `f` as a job of this scope if a token is free right now (the calling job's, as a
    /// loan, else a pool token, as [`Scope::spawn`] from a worker of the pool; a pool token
    /// from any other thread), never waiting and never deferring; returns whether it did (else
    /// `f` is dropped unrun). For callers that can do the work themselves when no token is free
    /// (the ordered stream, see `ordered`).
    pub(crate) fn try_spawn<F>(&self, f: F) -> bool
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let own = self.registry.own(WorkerThread::current());
        let job = HeapJob::new(
            self.registry.new_lender_on(own),
            job_body(self, f),
            &self.latch,
        );
        // Counted before it can run; the caller's own count (a body or a job of this scope, or
        // a thread the body waits for) keeps the latch above zero when the count is taken back.
        self.latch.increment();
        match job.offer(&self.registry) {
            Ok(()) => true,
            Err(job) => {
                drop(job);
                // SAFETY: the latch lives in the scope, which the caller borrows.
                unsafe { CountLatch::decrement(&self.latch, self.registry.sleep()) };
                false
            }
        }
    }

    /// Whether a spawn from the calling thread (worker state `here`, no worker of this pool) is
    /// the owner's own and may wait for admission (see `spawn_job`). Named policy
    /// **OwnerSpawnOnCredit**: the owner's thread is no worker of this pool, so its current job
    /// here is the credit root, reconstructed from the owner's wake target and `owner_job`. The
    /// hang it prevents: another pool's root run on the owner's thread (in the scope's end wait,
    /// or a yield in the body) taken for the owner, waiting for its own caller's token.
    fn owner_may_wait(&self, here: Option<&WorkerThread>) -> bool {
        self.latch.owner().is_caller(here.map(|w| (w.registry().id(), w.index())))
            && job_address(here) == self.owner_job
            // Relaxed: only the owner's thread touches the flag.
            && !self.credit_admits.load(Ordering::Relaxed)
    }

    /// Named policy **AwaitedCarrierAsCall**. Spawns `f` as a job of this scope for a caller that
    /// will wait for it: as [`Scope::spawn`]
    /// on a worker of this pool and for the owner's own spawns. From any other thread, whose
    /// spawn `Scope::spawn` would offer or else leave to the owner (which may be waiting for
    /// this very caller), the job is a root admitted as that thread's calls into the pool are
    /// (design §2.3, §4.8): on the caller's *credit*, at once, from a worker of another pool;
    /// on a pool token, waiting (parked) for one, from a plain thread. For the ordered stream's
    /// carriers.
    pub(crate) fn spawn_awaited<F>(&self, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let here = WorkerThread::current();
        if self.registry.own(here).is_some() || self.owner_may_wait(here) {
            return self.spawn(f);
        }
        let job = HeapJob::new(
            self.registry.new_lender_on(None),
            job_body(self, f),
            &self.latch,
        );
        self.latch.increment();
        match here {
            Some(_) => job.admit_on_credit(&self.registry),
            None => job.admit(&self.registry, None),
        }
    }

    /// Runs `admit`, an admission by the scope's owner that may wait, with the credit root
    /// marked as admitting while it has one: spawns that the wait's jobs make on this thread
    /// meanwhile are then deferred (see [`Scope::spawn`]) instead of waiting on the root too.
    /// Named policy **OneOwnerSpawnWaits** (a job has one child waiting for its token at most):
    /// the hang it prevents is two waiting children of the credit root, the second registered
    /// above the first and waiting for a loan the first holds.
    fn owner_admits(&self, admit: impl FnOnce()) {
        if self.credit.is_none() {
            // A plain thread's wait parks: nothing runs above it.
            return admit();
        }
        // Relaxed: only the owner's thread touches the flag. An admission does not unwind (the
        // jobs a wait runs catch their panics), so the flag is always cleared.
        self.credit_admits.store(true, Ordering::Relaxed);
        admit();
        self.credit_admits.store(false, Ordering::Relaxed);
    }

    /// The scope's pool.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Leaves `job` to the scope's owner (see [`Scope::spawn`]) and wakes it.
    fn defer(&self, job: Box<dyn Deferred + 'scope>) {
        let node = Box::into_raw(Box::new(DeferredNode {
            job,
            next: ptr::null_mut(),
        }));
        // Relaxed first read: the CAS below decides.
        let mut head = self.deferred.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is not published yet, so it is only ours.
            unsafe { (*node).next = head };
            // Release: publishes the node to the owner's acquire in `admit_deferred`.
            match self.deferred.compare_exchange_weak(
                head,
                node,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        chaos::point();
        // The scope is still alive: the calling thread runs inside a job or the body of this
        // scope (that is how it reached `self`), which the scope's count waits for.
        self.latch.owner().clone().wake(self.registry.sleep());
    }

    /// Whether a job waits for the owner in [`Scope::admit_deferred`].
    fn has_deferred(&self) -> bool {
        // Acquire: pairs with `defer`'s release.
        !self.deferred.load(Ordering::Acquire).is_null()
    }

    /// The owner admits the deferred jobs as children of its own job, oldest first.
    fn admit_deferred(&self) {
        // Acquire: pairs with `defer`'s release. Taking the whole list at once leaves no ABA.
        let mut node = self.deferred.swap(ptr::null_mut(), Ordering::Acquire);
        let mut jobs = Vec::new();
        while !node.is_null() {
            // SAFETY: the nodes came from `Box::into_raw` in `defer`, and the swap made this
            // thread their only owner.
            let taken = unsafe { Box::from_raw(node) };
            node = taken.next;
            jobs.push(taken.job);
        }
        let parent = self.credit.as_ref().map_or(ptr::null(), LenderRef::as_ptr);
        for job in jobs.into_iter().rev() {
            // SAFETY: `parent` is null or the credit root, alive while the scope is.
            self.owner_admits(|| unsafe { job.admit_as_child(&self.registry, parent) });
        }
    }

    fn store_panic(&self, payload: Box<dyn Any + Send>) {
        let boxed = Box::into_raw(Box::new(payload));
        // AcqRel: publish the payload; the first one is kept.
        if self
            .panic
            .compare_exchange(ptr::null_mut(), boxed, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Only the first panic is kept. The payload's `Drop` is user code and may panic too:
            // dropped quietly, so that nothing unwinds out of the job or the scope body.
            // SAFETY: `boxed` was not published, so it is still only ours.
            drop_quietly(unsafe { Box::from_raw(boxed) });
        }
    }

    fn take_panic(&self) -> Option<Box<dyn Any + Send>> {
        // Acquire: pairs with `store_panic`.
        let ptr = self.panic.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: a non-null pointer came from `Box::into_raw` in `store_panic`, taken once.
        (!ptr.is_null()).then(|| *unsafe { Box::from_raw(ptr) })
    }
}

/// Where an admitted spawn of a worker of the scope's pool waits to run.
#[derive(Clone, Copy)]
pub(crate) enum Order<'a> {
    /// The worker's deque (rayon's `spawn`).
    Lifo,
    /// A fifo lane of the worker, among the scope's lanes for each worker (rayon's
    /// `spawn_fifo`).
    Fifo(&'a [Lanes]),
    /// The inbox of the given worker, whichever thread admits it (a broadcast's job, see
    /// `broadcast`; spawned from a worker of the scope's pool only).
    Pinned(usize),
}

/// What a spawned job's closure receives: a [`Scope`], or a handle built on one.
pub(crate) trait ScopeHandle<'scope>: Sync {
    /// The scope underneath.
    fn base(&self) -> &Scope<'scope>;
}

impl<'scope> ScopeHandle<'scope> for Scope<'scope> {
    fn base(&self) -> &Scope<'scope> {
        self
    }
}

/// The address of the job that the thread whose worker state is `here` runs now (0 if none).
fn job_address(here: Option<&WorkerThread>) -> usize {
    here.map_or(0, |w| w.current_ptr() as usize)
}

/// The body of a job that runs `f(handle)` and stores its panic in `handle`'s scope.
fn job_body<'scope, H, F>(handle: &H, f: F) -> impl FnOnce() + Send + 'scope
where
    H: ScopeHandle<'scope> + 'scope,
    F: FnOnce(&H) + Send + 'scope,
{
    let handle = HandlePtr(handle, PhantomData);
    move || {
        let handle = handle.get();
        if let JobResult::Panic(payload) = JobResult::call(|| f(handle)) {
            handle.base().store_panic(payload);
        }
    }
}

/// A pointer to a scope's handle that a spawned job may carry to another thread.
struct HandlePtr<'a, H>(*const H, PhantomData<&'a ()>);

impl<'a, H> HandlePtr<'a, H> {
    fn get(&self) -> &'a H {
        // SAFETY: the handle outlives every job spawned in its scope (the scope call, on whose
        // frame the handle lives, waits for their count).
        unsafe { &*self.0 }
    }
}

// SAFETY: `H` is Sync (`ScopeHandle: Sync`), so sharing a pointer to it with the thread that
// runs a spawned job is as sound as sharing `&H`.
unsafe impl<H: Sync> Send for HandlePtr<'_, H> {}

/// `scope` on a worker thread: the body runs inline in the current job.
pub fn scope_in_worker<'scope, OP, R>(worker: &WorkerThread, op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    let scope = Scope::new(worker.registry().clone(), Some(worker));
    run_scope(&scope, Some(worker), op)
}

impl<'scope> Scope<'scope> {
    /// A scope of `registry` owned by the calling thread, whose worker state (if it is a
    /// worker of any pool) is `here`.
    pub(crate) fn new(registry: Arc<Registry>, here: Option<&WorkerThread>) -> Self {
        let owner = registry.waker_for(here);
        let credit = here
            .filter(|w| w.registry().id() != registry.id())
            .map(|_| {
                // SAFETY: a null parent: a root.
                let root = LenderRef::new(unsafe { registry.new_child(ptr::null()) });
                registry.admit_credit(&root);
                root
            });
        Scope {
            registry,
            latch: CountLatch::new(owner),
            panic: AtomicPtr::new(ptr::null_mut()),
            deferred: AtomicPtr::new(ptr::null_mut()),
            credit,
            credit_admits: AtomicBool::new(false),
            owner_job: job_address(here),
            marker: PhantomData,
        }
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        // Every job of the scope has finished (the scope call waited for them): the credit root
        // finishes, and its credit goes back (or stays parked while a detached descendant holds
        // its loan, rule 4).
        if let Some(credit) = self.credit.take() {
            self.registry.finish_job(credit, None);
        }
    }
}

/// Runs the body `op` of `handle`'s scope on the calling thread (the scope's owner, whose worker
/// state, if a worker of any pool, is `here`), then waits for the scope's jobs, admitting the
/// deferred ones; raises the first panic again. A worker waits running its pool's jobs; a plain
/// thread parks, woken by the count's last decrement and by each deferral.
pub(crate) fn run_scope<'scope, H, R>(
    handle: &H,
    here: Option<&WorkerThread>,
    op: impl FnOnce(&H) -> R,
) -> R
where
    H: ScopeHandle<'scope>,
{
    let scope = handle.base();
    let result = JobResult::call(|| op(handle));
    let value = match result {
        JobResult::Ok(value) => Some(value),
        JobResult::Panic(payload) => {
            scope.store_panic(payload);
            None
        }
        JobResult::None => None,
    };
    // SAFETY: the latch lives in the scope, which waits for it right below.
    unsafe { CountLatch::decrement(&scope.latch, scope.registry.sleep()) };
    // Wait site "scope end": context (the scope's pool, the job that opened it) on its
    // worker, else the calling thread's own (another pool's worker: its pool and job; a plain
    // thread: Park); policy AnyAdmitted. The spawns of other pools' jobs left to the owner
    // (ForeignScopeSpawnDeferred) are admitted here, by the owner, between waits.
    loop {
        scope.admit_deferred();
        if scope.latch.probe() {
            break;
        }
        let wait = || wait_on(here, || scope.latch.probe() || scope.has_deferred());
        // An in-place scope owned by another pool's worker is a call into this pool (its
        // credit root) for as long as it waits (CalledOutHalfOnCredit).
        match here.filter(|_| scope.credit.is_some()) {
            Some(worker) => worker.calling_out(wait),
            None => wait(),
        }
    }
    if let Some(payload) = scope.take_panic() {
        drop_quietly(value);
        panic::resume_unwind(payload);
    }
    value.expect("the scope body returned")
}
