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

use crate::chaos;
use crate::job::{drop_quietly, Deferred, HeapJob, JobResult};
use crate::latch::CountLatch;
use crate::registry::{Registry, WorkerThread};
use crate::sync::{Arc, AtomicPtr, Ordering};

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
    /// left to the scope's owner, which admits it as a child of its own job when it next waits,
    /// at the latest at the scope's end. (Waiting for a pool token instead could deadlock: the
    /// owner may hold the only one while it waits for the caller.) Such spawns are not
    /// backpressured.
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
        self.spawn_to(f, None);
    }

    /// [`Scope::spawn`], its job pinned to worker `pin` if given (see `broadcast`; a pinned
    /// spawn is made from a worker of the scope's pool only).
    #[inline]
    pub(crate) fn spawn_to<F>(&self, f: F, pin: Option<usize>)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let scope = ScopePtr(self, PhantomData);
        let body = move || {
            let scope = scope.get();
            if let JobResult::Panic(payload) = JobResult::call(|| f(scope)) {
                scope.store_panic(payload);
            }
        };
        let here = WorkerThread::current();
        let own = self.registry.own(here);
        let job = HeapJob::new(self.registry.new_lender_on(own), body, &self.latch);
        match (own, pin) {
            // Counted in the scope at admission (see `Registry::admit`).
            (Some(worker), None) => job.admit_in_scope(&self.registry, worker),
            (Some(worker), Some(target)) => crate::broadcast::admit_pinned(job, target, worker),
            // Another pool's worker, or a thread outside every pool that a job of this scope
            // started and waits for: waiting for a token here could wait for the owner's.
            (None, _) => {
                debug_assert!(pin.is_none(), "a pinned spawn from outside the pool");
                self.latch.increment();
                if let Err(job) = job.offer(&self.registry) {
                    self.defer(job);
                }
            }
        }
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
        self.registry.sleep().wake_worker(self.latch.owner());
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
        for job in jobs.into_iter().rev() {
            job.admit_as_child(&self.registry);
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

/// A pointer to the scope that a spawned job may carry to another thread.
struct ScopePtr<'a, 'scope>(*const Scope<'scope>, PhantomData<&'a ()>);

impl<'a, 'scope> ScopePtr<'a, 'scope> {
    fn get(&self) -> &'a Scope<'scope> {
        // SAFETY: the scope outlives every job spawned in it (it waits for their count).
        unsafe { &*self.0 }
    }
}

// SAFETY: `Scope` is Sync (its fields are atomics and an Arc), so sharing a pointer to it with
// the thread that runs a spawned job is as sound as sharing `&Scope`.
unsafe impl Send for ScopePtr<'_, '_> {}

/// `scope` on a worker thread: the body runs inline in the current job.
pub fn scope_in_worker<'scope, OP, R>(worker: &WorkerThread, op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    let scope = Scope {
        registry: worker.registry().clone(),
        latch: CountLatch::new(worker.index()),
        panic: AtomicPtr::new(ptr::null_mut()),
        deferred: AtomicPtr::new(ptr::null_mut()),
        marker: PhantomData,
    };
    let result = JobResult::call(|| op(&scope));
    let value = match result {
        JobResult::Ok(value) => Some(value),
        JobResult::Panic(payload) => {
            scope.store_panic(payload);
            None
        }
        JobResult::None => None,
    };
    // SAFETY: the latch lives on this frame, which waits for it right below.
    unsafe { CountLatch::decrement(&scope.latch, worker.registry()) };
    loop {
        scope.admit_deferred();
        if scope.latch.probe() {
            break;
        }
        worker.wait_until(|| scope.latch.probe() || scope.has_deferred());
    }
    if let Some(payload) = scope.take_panic() {
        drop_quietly(value);
        panic::resume_unwind(payload);
    }
    value.expect("the scope body returned")
}
