//! Job references and results: the type-erased handle to a runnable job, what a job's run
//! returns, and how a panic travels out of it.
//!
//! This module owns the one rule every job shape obeys: a `JobRef` runs once, and nothing
//! unwinds out of it into the scheduler (the process aborts instead). It knows no pool, no
//! token and no queue.

use std::any::Any;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};

/// A pointer to a job and the function that runs it. Pushed to deques; runs exactly once.
#[derive(Clone, Copy, Debug)]
pub struct JobRef {
    data: *const (),
    run: unsafe fn(*const ()),
}

/// Two refs are the same job when they point to the same data (a job lives at one address).
impl PartialEq for JobRef {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
    }
}

// SAFETY: a JobRef is handed between threads by design; every job type it points to is built
// from `Send` closures and results, and each is run exactly once.
unsafe impl Send for JobRef {}

impl JobRef {
    /// A job that `run` runs with `data` (for job shapes outside this module: the fifo
    /// indirections of `fifo`, the routers of `broadcast`).
    ///
    /// # Safety
    /// `run(data)` must be sound on a worker of the pool the ref is pushed in, once, for as long
    /// as the ref may sit in a queue.
    #[inline]
    pub unsafe fn new(data: *const (), run: unsafe fn(*const ())) -> Self {
        JobRef { data, run }
    }

    /// The data pointer the job runs with (a `HeapJob`'s address, which is its lender's).
    #[inline]
    pub fn data(&self) -> *const () {
        self.data
    }

    /// Runs the job.
    ///
    /// # Safety
    /// On a worker thread of the job's pool, once per job, while the job is alive.
    #[inline]
    pub unsafe fn run(self) {
        // Job bodies catch their panics and the scheduler around them must not unwind: if
        // anything does, the pool's state (tokens, counts, latches others wait on) is broken,
        // and going on could free what other threads still use. Abort instead, as rayon does.
        let guard = AbortOnUnwind;
        // SAFETY: forwarded from the caller.
        unsafe { (self.run)(self.data) };
        std::mem::forget(guard);
    }
}

/// Aborts the process if dropped, which happens only while unwinding out of a job.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        // `writeln!` to a closed stderr returns an error instead of panicking as `eprintln!` does.
        let _ = writeln!(
            std::io::stderr(),
            "treepool: a panic unwound out of a job into the scheduler; aborting"
        );
        std::process::abort();
    }
}

/// Drops `value` without letting a panic in its `Drop` unwind out: such a panic is caught, and
/// its own payload is leaked rather than dropped (its drop could panic again). For panic
/// payloads and results that a job drops on behalf of user code.
pub fn drop_quietly<T>(value: T) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(move || drop(value))) {
        std::mem::forget(payload);
    }
}

/// The values of two halves of a join, or the first half's panic raised again (else the
/// second's). Whatever is not returned or raised is dropped quietly, so that a panicking `Drop`
/// cannot unwind while a panic is already on its way (that would abort).
#[inline]
pub fn join_values<A, B>(a: JobResult<A>, b: JobResult<B>) -> (A, B) {
    match (a, b) {
        (JobResult::Ok(a), JobResult::Ok(b)) => (a, b),
        (a, b) => join_panicked(a, b),
    }
}

/// [`join_values`] when a half panicked: out of line, so the common path stays small.
#[cold]
#[inline(never)]
fn join_panicked<A, B>(a: JobResult<A>, b: JobResult<B>) -> ! {
    match (a, b) {
        (JobResult::Panic(payload), other) => {
            drop_quietly(other);
            panic::resume_unwind(payload)
        }
        (other, JobResult::Panic(payload)) => {
            drop_quietly(other);
            panic::resume_unwind(payload)
        }
        _ => unreachable!("a join half's result read before it ran"),
    }
}

/// A job's outcome: not yet run, a value, or the panic it raised.
pub enum JobResult<T> {
    /// Not run yet.
    None,
    /// Returned a value.
    Ok(T),
    /// Panicked with this payload.
    Panic(Box<dyn Any + Send>),
}

impl<T> JobResult<T> {
    /// Runs `f`, catching a panic.
    pub fn call(f: impl FnOnce() -> T) -> Self {
        match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(value) => JobResult::Ok(value),
            Err(payload) => JobResult::Panic(payload),
        }
    }

    /// The value, or the panic raised again on this thread.
    pub fn into_value(self) -> T {
        match self {
            JobResult::Ok(value) => value,
            JobResult::Panic(payload) => panic::resume_unwind(payload),
            JobResult::None => unreachable!("a job's result read before it ran"),
        }
    }
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "Box<dyn Any>"
    }
}
