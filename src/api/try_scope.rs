//! Fallible scopes: [`try_scope`], [`ThreadPool::try_scope`] and [`TryScope`], whose first error
//! cancels the scope.
//!
//! This module owns a fallible scope's first error, its cancellation flag, and the link to the
//! enclosing fallible scope (found through a thread-local that is set while a body or a job of a
//! fallible scope runs on the thread, and restored after each). It adds no admission rule of its
//! own and bypasses nothing: a [`TryScope`] is a [`Scope`] plus that state, every job it spawns
//! goes through `Scope::spawn_job` (counted, admitted, deferred and its panic kept exactly as a
//! `Scope::spawn`), and its calls go through `run_scope`. Cancellation must never wait, admit or
//! release anything itself: a spawn made after it returns without admitting its job, and a job
//! admitted before it finishes at once when it comes up, without running its closure, giving its
//! token back through the ordinary finish path (design §4.7).

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;

use crate::admission::token::Lender;
use crate::api::pool::{from_outside_jobs, install_in, ThreadPool};
use crate::api::scope::{run_scope, Order, Scope, ScopeHandle};
use crate::base::job_ref::drop_quietly;
use crate::base::sync::{Arc, AtomicBool, AtomicPtr, Ordering};
use crate::worker::registry::Registry;
use crate::worker::thread::WorkerThread;

/// A scope whose jobs return `Result`, and whose first error cancels it (see [`try_scope`]).
///
/// Made by [`try_scope`] or [`ThreadPool::try_scope`]. Every job spawned in it that started has
/// finished when the scope call returns; the first error of the body or of a job is what the call
/// returns, unless something panicked (the first panic is raised again then, with its payload).
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// let mut parts = [0u64; 4];
/// let result: Result<(), String> = pool.try_scope(|s| {
///     for (i, part) in parts.iter_mut().enumerate() {
///         s.spawn(move |_| {
///             *part = i as u64 * 10;
///             Ok(())
///         });
///     }
///     Ok(())
/// });
/// assert_eq!(result, Ok(()));
/// assert_eq!(parts, [0, 10, 20, 30]);
/// ```
pub struct TryScope<'scope, E> {
    base: Scope<'scope>,
    cancel: Cancel,
    /// The first error of the body or of a job (a `Box::into_raw`); null if none.
    error: AtomicPtr<E>,
    /// The scope owns the errors it keeps and drops.
    marker: PhantomData<Box<E>>,
}

// SAFETY: the scope is shared with the threads that run its jobs, which store errors into it:
// an `E` is only ever moved in (by the one CAS that wins in `fail`, or dropped by the loser) and
// moved out once by the owner (`take_error`), never shared by reference, which is sound for
// `E: Send` (as `Mutex<Option<E>>` is `Sync`). `cancel.outer` points to the `Cancel` of an
// enclosing scope, read through shared references only (atomics), and alive as long as this
// scope is (see `Cancel::outer`). `base` is `Send + Sync`.
unsafe impl<E: Send> Send for TryScope<'_, E> {}
// SAFETY: as above.
unsafe impl<E: Send> Sync for TryScope<'_, E> {}

impl<'scope, E: Send> ScopeHandle<'scope> for TryScope<'scope, E> {
    fn base(&self) -> &Scope<'scope> {
        &self.base
    }
}

/// A fallible scope's cancellation state, linked to the enclosing fallible scope's.
struct Cancel {
    /// Set by the scope's first error, or by a check that found an enclosing scope cancelled
    /// (a cache: cancellation is never undone).
    flag: AtomicBool,
    /// The enclosing fallible scope's state, or null. It outlives this one: this scope was opened
    /// in a body or a job of that scope (which that scope's call waits for), or in a call made
    /// from one, which the calling job waits for.
    outer: *const Cancel,
}

impl Cancel {
    /// Whether this scope or an enclosing one is cancelled.
    fn is_set(&self) -> bool {
        // Relaxed here and below: the flag publishes no data (the error travels through
        // `TryScope::error`'s own release/acquire, read after the scope's count synchronized),
        // and a check that misses a racing cancellation only lets one more job run, as a check
        // made just before it would.
        if self.flag.load(Ordering::Relaxed) {
            return true;
        }
        let mut outer = self.outer;
        while !outer.is_null() {
            // SAFETY: every `outer` in the chain outlives the scopes it encloses (see the field).
            let enclosing = unsafe { &*outer };
            if enclosing.flag.load(Ordering::Relaxed) {
                self.flag.store(true, Ordering::Relaxed);
                return true;
            }
            outer = enclosing.outer;
        }
        false
    }

    fn set(&self) {
        // Relaxed: see `is_set`.
        self.flag.store(true, Ordering::Relaxed);
    }
}

/// Where a body or a job of a fallible scope runs: its scope's cancellation state, and the
/// thread's current job and `join`-half depth (`WorkerThread::part_depth`) when it started.
type Mark = (*const Cancel, *const Lender, u32);

/// No fallible scope.
const UNMARKED: Mark = (ptr::null(), ptr::null(), 0);

std::thread_local! {
    /// The mark of the fallible scope whose body or job runs on this thread, if any. Set by
    /// [`Entered`], which restores the previous value after each body and job, so a job that the
    /// thread helps with above them sets its own or leaves this one.
    static ENCLOSING: Cell<Mark> = const { Cell::new(UNMARKED) };
}

/// The calling thread's current job and `join`-half depth.
fn here() -> (*const Lender, u32) {
    WorkerThread::current().map_or((ptr::null(), 0), |w| (w.current_ptr(), w.part_depth()))
}

/// The cancellation state of the fallible scope that encloses a call made now on this thread:
/// the one whose body or job is running the calling code, else null. Code that the thread runs
/// above that body or job while it waits is not its own: another job (a plain scope's job there
/// sees the thread-local left by the one below, and is told apart by the current job), or a
/// `join` half of the same job run as part of it (its sibling, not inside the scope: told apart
/// by the half depth).
fn enclosing() -> *const Cancel {
    let (cancel, job, depth) = ENCLOSING.try_with(Cell::get).unwrap_or(UNMARKED);
    if !cancel.is_null() && !job.is_null() && here() == (job, depth) {
        cancel
    } else {
        ptr::null()
    }
}

/// Marks a body or a job of a fallible scope as running on this thread until dropped (also
/// while unwinding), then restores what was marked before. Dropped while unwinding, it cancels
/// the scope: a panic ends the scope's work as an error does (and wins over it).
struct Entered<'a> {
    cancel: &'a Cancel,
    previous: Mark,
}

impl<'a> Entered<'a> {
    fn new(cancel: &'a Cancel) -> Self {
        let (job, depth) = here();
        let previous = ENCLOSING
            .try_with(|cell| cell.replace((cancel, job, depth)))
            .unwrap_or(UNMARKED);
        Entered { cancel, previous }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let _ = ENCLOSING.try_with(|cell| cell.set(self.previous));
        if std::thread::panicking() {
            self.cancel.set();
        }
    }
}

/// An enclosing scope's cancellation state, carried into the job that runs a scope call.
#[derive(Clone, Copy)]
struct Outer(*const Cancel);

impl Outer {
    fn get(self) -> *const Cancel {
        self.0
    }
}

// SAFETY: the pointee is read through shared references only (atomics), from any thread, and
// the calling job that captured it waits for the call that carries it.
unsafe impl Send for Outer {}

impl<'scope, E: Send + 'scope> TryScope<'scope, E> {
    /// A fallible scope of `registry` owned by the calling thread (`here`: its worker state),
    /// enclosed by the fallible scope whose state is `outer` (or by none: null).
    fn new(registry: Arc<Registry>, here: Option<&WorkerThread>, outer: *const Cancel) -> Self {
        TryScope {
            base: Scope::new(registry, here),
            cancel: Cancel {
                flag: AtomicBool::new(false),
                outer,
            },
            error: AtomicPtr::new(ptr::null_mut()),
            marker: PhantomData,
        }
    }

    /// Spawns `f` as a child job of the job running on the calling thread, unless the scope is
    /// cancelled. An `Err` returned by `f` cancels the scope (if it is the scope's first error,
    /// it is what the scope call returns; later ones are dropped).
    ///
    /// **Admission rule**: exactly [`Scope::spawn`]'s (the call goes through the same path). From
    /// a worker of the scope's pool, `f` runs on its parent's token if the parent is not lending
    /// it, else on a free pool token; else the call waits, running other jobs, until `f` is
    /// admitted (backpressure). From other threads: as [`Scope::spawn`] says.
    ///
    /// **Cancellation**: once the scope is cancelled (by its first error, or because an
    /// enclosing fallible scope was), the call returns at once without admitting `f`, and drops
    /// it. A job admitted before the cancellation is dropped without running `f` when it comes
    /// up, and gives its token back through the ordinary finish path. A call that is already
    /// waiting for admission when the cancellation happens cannot return early (it is inside the
    /// token table's wait): its job is admitted, then dropped without running `f` in the same
    /// way. Each such drop is counted in [`Stats::cancelled`](crate::Stats::cancelled). A job
    /// that already runs is not interrupted: it can poll [`TryScope::is_cancelled`].
    ///
    /// A panic in `f` cancels the scope as an error does; it (or a panic in the drop of a
    /// cancelled `f`) is raised again by the scope call once every started job has finished,
    /// and wins over any error.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(1).max_inflight(1).build().unwrap();
    /// let ran = AtomicUsize::new(0);
    /// let result = pool.try_scope(|s| {
    ///     s.spawn(|_| Err("bad input"));
    ///     for _ in 0..100 {
    ///         s.spawn(|_| {
    ///             ran.fetch_add(1, Ordering::Relaxed);
    ///             Ok(())
    ///         });
    ///     }
    ///     Ok(())
    /// });
    /// assert_eq!(result, Err("bad input"));
    /// // One token on one thread: the first job ran (and failed) while the second spawn waited.
    /// assert_eq!(ran.into_inner(), 0);
    /// assert_eq!(pool.stats().cancelled, 100);
    /// ```
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce(&TryScope<'scope, E>) -> Result<(), E> + Send + 'scope,
    {
        if self.is_cancelled() {
            self.note_cancelled();
            drop(f);
            return;
        }
        self.base
            .spawn_job(self, move |s: &Self| s.run_job(f), Order::Lifo);
    }

    /// Whether the scope is cancelled: by its first error, or because a fallible scope that
    /// encloses it was (one in whose body or job this scope was opened, directly or through a
    /// call into a pool). Once true, it stays true. Long-running jobs may poll it and return
    /// early (their return value after the first error is dropped).
    ///
    /// ```
    /// let result = treepool::try_scope(|s| {
    ///     assert!(!s.is_cancelled());
    ///     s.spawn(|s| {
    ///         while !s.is_cancelled() {
    ///             std::hint::spin_loop(); // a long computation that checks now and then
    ///         }
    ///         Ok(())
    ///     });
    ///     Err::<(), _>(7)
    /// });
    /// assert_eq!(result, Err(7));
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_set()
    }

    /// The run of a spawned job: `f`, unless the scope was cancelled since the spawn.
    fn run_job<F>(&self, f: F)
    where
        F: FnOnce(&Self) -> Result<(), E>,
    {
        if self.is_cancelled() {
            self.note_cancelled();
            drop(f);
            return;
        }
        let entered = Entered::new(&self.cancel);
        let result = f(self);
        drop(entered);
        if let Err(error) = result {
            self.fail(error);
        }
    }

    /// Keeps `error` if it is the scope's first, else drops it (quietly: its `Drop` is user code
    /// and may panic), and cancels the scope.
    fn fail(&self, error: E) {
        let boxed = Box::into_raw(Box::new(error));
        // Release on success: publishes the error to `take_error`'s acquire. Relaxed on failure:
        // the error kept is not read here.
        if self
            .error
            .compare_exchange(ptr::null_mut(), boxed, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            // SAFETY: `boxed` was not published, so it is still only ours.
            drop_quietly(unsafe { Box::from_raw(boxed) });
        }
        self.cancel.set();
    }

    fn note_cancelled(&self) {
        self.base.registry().note_cancelled();
    }
}

impl<E> TryScope<'_, E> {
    /// The first error, taken once.
    fn take_error(&self) -> Option<E> {
        // Acquire: pairs with `fail`'s release.
        let ptr = self.error.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: a non-null pointer came from `Box::into_raw` in `fail`, taken once.
        (!ptr.is_null()).then(|| *unsafe { Box::from_raw(ptr) })
    }
}

impl<E> Drop for TryScope<'_, E> {
    fn drop(&mut self) {
        // An error still here lost to a panic that the scope call raises again: dropped quietly,
        // so that its `Drop` cannot panic while that panic unwinds.
        if let Some(error) = self.take_error() {
            drop_quietly(error);
        }
    }
}

/// `try_scope` on `worker`, which runs a job: the body runs inline in it; `outer` is the
/// enclosing fallible scope's state (or null).
fn try_scope_in_worker<'scope, OP, R, E>(
    worker: &WorkerThread,
    outer: *const Cancel,
    op: OP,
) -> Result<R, E>
where
    OP: FnOnce(&TryScope<'scope, E>) -> Result<R, E>,
    E: Send + 'scope,
{
    let scope = TryScope::new(worker.registry().clone(), Some(worker), outer);
    let value = run_scope(&scope, Some(worker), |s| {
        let entered = Entered::new(&s.cancel);
        let result = op(s);
        drop(entered);
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                s.fail(error);
                None
            }
        }
    });
    // No panic (`run_scope` raised it again): every job has finished, so the error is final.
    match scope.take_error() {
        Some(error) => {
            drop_quietly(value);
            Err(error)
        }
        None => Ok(value.expect("the body returned Ok when no error was kept")),
    }
}

/// Creates a fallible scope on the current worker's pool (else the global pool) and runs `op` in
/// it; returns once `op` and every job started in the scope have finished.
///
/// The first `Err`, of `op` or of any job spawned with [`TryScope::spawn`], *cancels* the scope
/// and is what the call returns: later spawns return at once without running, admitted jobs not
/// yet started are dropped without running when they come up (their tokens go back as any
/// job's), and running jobs can poll [`TryScope::is_cancelled`]. Later errors are dropped.
/// Without an error the call returns `op`'s value. A panic cancels the scope too, and wins over
/// an error: if `op` or any job panicked, the first panic is raised again, with its payload,
/// once every started job has finished.
///
/// Cancellation reaches nested fallible scopes: a `try_scope` opened in the body or in a job of
/// this one (also through [`ThreadPool::try_scope`] into another pool) is cancelled when this
/// one is. An inner scope's error cancels only the inner scope, and is returned to the code that
/// opened it; propagate it (with `?`) to cancel the outer one too. An inner scope cancelled from
/// outside without an error of its own returns its body's value. Scopes opened in jobs of a
/// plain [`scope`](crate::scope) inside a fallible one, or in a `join` half that runs apart
/// from the body's own code (stolen, or run by a wait inside the body), are not reached: the
/// link follows the body and the jobs of a fallible scope only.
///
/// **Admission rule**: as [`scope`](crate::scope): on a worker the body runs inline in the
/// current job (it borrows nothing); from outside a root job that waits for a pool token. Its
/// spawns are admitted as [`TryScope::spawn`] says. Cancellation adds no wait and no admission.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let parsed = AtomicUsize::new(0);
/// let inputs = ["1", "2", "x", "4"];
/// let result = treepool::try_scope(|s| {
///     for input in inputs {
///         let parsed = &parsed;
///         s.spawn(move |_| {
///             let n: usize = input.parse().map_err(|_| format!("not a number: {input}"))?;
///             parsed.fetch_add(n, Ordering::Relaxed);
///             Ok(())
///         });
///     }
///     Ok(())
/// });
/// assert_eq!(result, Err("not a number: x".to_string()));
/// ```
pub fn try_scope<'scope, OP, R, E>(op: OP) -> Result<R, E>
where
    OP: FnOnce(&TryScope<'scope, E>) -> Result<R, E> + Send,
    R: Send,
    E: Send + 'scope,
{
    let outer = Outer(enclosing());
    match WorkerThread::current() {
        Some(worker) if !worker.current_ptr().is_null() => {
            try_scope_in_worker(worker, outer.get(), op)
        }
        _ => from_outside_jobs(move || {
            // SAFETY: `from_outside_jobs` runs its closure in a job, on a worker of its pool.
            let worker = unsafe { WorkerThread::current_unchecked() };
            try_scope_in_worker(worker, outer.get(), op)
        }),
    }
}

impl ThreadPool {
    /// [`try_scope`] in this pool: the body runs as [`ThreadPool::install`] runs `op` (inline on
    /// this pool's workers; else a root job, on a pool token from a plain thread, on the
    /// caller's credit from another pool's job). Called in the body or a job of a fallible scope
    /// (of any pool), the new scope is cancelled when that one is.
    ///
    /// **Admission rule**: as [`ThreadPool::scope`]; spawns as [`TryScope::spawn`].
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).max_inflight(2).build().unwrap();
    /// let result: Result<u32, &str> = pool.try_scope(|s| {
    ///     s.spawn(|_| Ok(()));
    ///     Ok(5)
    /// });
    /// assert_eq!(result, Ok(5));
    /// assert_eq!(pool.stats().inflight, 0);
    /// ```
    pub fn try_scope<'scope, OP, R, E>(&self, op: OP) -> Result<R, E>
    where
        OP: FnOnce(&TryScope<'scope, E>) -> Result<R, E> + Send,
        R: Send,
        E: Send + 'scope,
    {
        let outer = Outer(enclosing());
        install_in(self.registry(), move |worker| {
            try_scope_in_worker(worker, outer.get(), op)
        })
    }
}
