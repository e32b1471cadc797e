//! The worker's side of tracing: where a worker records what it does into its ring
//! (`base::trace`), while its pool is traced.
//!
//! This module owns the hooks the other worker modules and `api` call at the events a trace
//! shows. Each hook is one load of [`WorkerThread::trace`] and a branch that is never taken
//! while tracing is off, and never does anything else then; the recording itself is out of
//! line. It never decides anything about scheduling or admission.

use crate::admission::token::{Admission, Lender};
use crate::base::trace::{How, Kind};
use crate::worker::thread::WorkerThread;

impl WorkerThread {
    /// Whether this worker's pool is traced.
    #[inline(always)]
    pub fn is_traced(&self) -> bool {
        self.trace.is_some()
    }

    /// Runs `run`, the run of a job of `kind` whose closure has the type `N`, recorded as a job
    /// span while tracing (`how`: how it came to run here; [`How::Admitted`] reads as stolen
    /// after a steal); else just runs it.
    #[inline(always)]
    pub fn traced<N: ?Sized, T>(&self, kind: Kind, how: How, run: impl FnOnce() -> T) -> T {
        match &self.trace {
            None => run(),
            Some(recorder) => recorder.job::<N, T>(kind, how, run),
        }
    }

    /// Records a steal from worker `from`, while tracing.
    #[inline]
    pub(super) fn trace_steal(&self, from: usize) {
        if let Some(recorder) = &self.trace {
            recorder.steal(from);
        }
    }

    /// Records a promotion of a private join half, while tracing.
    #[inline]
    pub(super) fn trace_promote(&self) {
        if let Some(recorder) = &self.trace {
            recorder.promote();
        }
    }

    /// Records a grant of a token to a waiting job, while tracing.
    #[inline]
    pub(super) fn trace_grant(&self) {
        if let Some(recorder) = &self.trace {
            recorder.grant();
        }
    }

    /// The start of a span to record later ([`WorkerThread::trace_slept`],
    /// [`WorkerThread::trace_admission_wait`]): the time while tracing, else 0.
    #[inline]
    pub(super) fn trace_since(&self) -> u64 {
        match &self.trace {
            None => 0,
            Some(recorder) => recorder.now(),
        }
    }

    /// Records a sleep from `since` (see [`WorkerThread::trace_since`]) that ended in a
    /// wake-up, while tracing.
    #[inline]
    pub(super) fn trace_slept(&self, since: u64) {
        if let Some(recorder) = &self.trace {
            recorder.slept(since);
        }
    }

    /// Records a spawn's wait for admission from `since` until now, while tracing. `lender`:
    /// the admitted job's, to tell a loan from a pool token; null if it may be gone.
    #[inline]
    pub(super) fn trace_admission_wait(&self, since: u64, lender: *const Lender) {
        if let Some(recorder) = &self.trace {
            // SAFETY: the caller passes a live lender, or null.
            let how = unsafe { lender.as_ref() }.and_then(Lender::admission);
            recorder.admission_wait(since, how.map(|how| matches!(how, Admission::Loan)));
        }
    }
}
