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

use crate::job::{drop_quietly, HeapJob, JobResult};
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
    /// Invariant in `'scope`, and spawned closures need not be `Sync`: like rayon's scope.
    marker: PhantomData<SpawnedFn<'scope>>,
}

/// The variance marker of [`Scope`]: the type of what it spawns.
type SpawnedFn<'scope> = Box<dyn FnOnce(&Scope<'scope>) + Send + Sync + 'scope>;

impl<'scope> Scope<'scope> {
    /// Spawns `f` as a child job of the job running on the calling thread.
    ///
    /// Admission happens in the call: `f` runs on its parent's token if the parent is not
    /// lending it right now, else on a free pool token; if neither is free, the call waits
    /// (running other jobs meanwhile) and returns once `f` is admitted. That wait is the
    /// backpressure that bounds jobs in flight to `max_inflight × levels`. (Called on a worker
    /// of another pool, the call queues `f` and returns without waiting, as
    /// [`ThreadPool::spawn`](crate::ThreadPool::spawn) does there.)
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
        self.latch.increment();
        let scope = ScopePtr(self, PhantomData);
        let body = move || {
            let scope = scope.get();
            if let JobResult::Panic(payload) = JobResult::call(|| f(scope)) {
                scope.store_panic(payload);
            }
        };
        HeapJob::new(self.registry.new_lender(), body, &self.latch).admit(&self.registry);
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
    worker.wait_until(|| scope.latch.probe());
    if let Some(payload) = scope.take_panic() {
        drop_quietly(value);
        panic::resume_unwind(payload);
    }
    value.expect("the scope body returned")
}
