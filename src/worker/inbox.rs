//! Inboxes: one FIFO per worker of the jobs pinned to it (broadcasts).
//!
//! This module owns where a pinned job waits for its worker and the handshake that keeps one
//! from being stranded there. A worker looks at its inbox right after its own deque and before
//! the injector and stealing, in the wait loop and the main loop; its sleep checks the inbox
//! under its sleep flag, as it checks a latch, so no push is missed. A worker that stops (its
//! pool was dropped) closes its inbox first: a job that reaches a closed inbox runs where its
//! router ran, so no job is stranded behind an exited thread (only then does a pinned job run
//! off its worker). It never admits a job: what reaches an inbox was admitted.

use crossbeam_deque::{Injector, Steal};
use crossbeam_utils::CachePadded;

use crate::base::job_ref::JobRef;
use crate::base::sync::{fence, AtomicBool, Ordering};
use crate::worker::latch::Latch;
use crate::worker::sleep::Sleep;

/// One inbox per worker: the jobs pinned to it that its spawners delivered, oldest first.
pub struct Inboxes {
    boxes: Box<[CachePadded<Inbox>]>,
}

struct Inbox {
    jobs: Injector<JobRef>,
    /// Set once the worker stops looking (see the module doc).
    closed: AtomicBool,
}

impl Inboxes {
    /// Empty, open inboxes for `n` workers.
    pub fn new(n: usize) -> Self {
        let inbox = |_| {
            CachePadded::new(Inbox {
                jobs: Injector::new(),
                closed: AtomicBool::new(false),
            })
        };
        Inboxes {
            boxes: (0..n).map(inbox).collect(),
        }
    }

    /// The oldest job in worker `index`'s inbox. An empty inbox costs two plain loads (the
    /// steal of an empty injector costs a fence): every wait round looks.
    #[inline]
    pub fn take(&self, index: usize) -> Option<JobRef> {
        if !self.has(index) {
            return None;
        }
        self.take_slow(index)
    }

    #[cold]
    fn take_slow(&self, index: usize) -> Option<JobRef> {
        loop {
            match self.boxes[index].jobs.steal() {
                Steal::Success(job) => return Some(job),
                Steal::Empty => return None,
                Steal::Retry => {}
            }
        }
    }

    /// Whether worker `index`'s inbox holds a job (its loads are SeqCst: the sleeper's read
    /// of the handshake in `deliver`).
    #[inline]
    pub fn has(&self, index: usize) -> bool {
        !self.boxes[index].jobs.is_empty()
    }

    /// Worker `index` stops looking at its inbox (its pool stops, or the builder's thread of
    /// `use_current_thread` leaves a call); every job that reaches it from now on runs where its
    /// router ran, and the caller drains what is left. Named policy **ClosedInbox**: the hang it
    /// prevents is a broadcast job stranded in the inbox of a thread that no longer looks.
    pub fn close(&self, index: usize) {
        // SeqCst store and fence: the worker's half of the handshake with `deliver` (store,
        // fence, then its last look at the inbox in the drain that follows).
        self.boxes[index].closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Worker `index` looks at its inbox again (the builder's thread of `use_current_thread`,
    /// entering a call: `borrowed`).
    pub fn open(&self, index: usize) {
        // SeqCst: the flag is one side of the handshake with `deliver`.
        self.boxes[index].closed.store(false, Ordering::SeqCst);
    }

    fn closed(&self, index: usize) -> bool {
        // SeqCst: the deliverer's read of the handshake in `deliver`.
        self.boxes[index].closed.load(Ordering::SeqCst)
    }

    /// Puts `job` in worker `target`'s inbox, wakes that worker and sets `arrived`. If the
    /// worker has closed its inbox, runs what is left there here: after the push and a SeqCst
    /// fence either this thread sees the inbox closed, or the worker's look after closing it
    /// sees the job (and both may; the inbox hands each job to one of them).
    ///
    /// # Safety
    /// On a worker of the pool whose inboxes and sleep state these are; `job` is an admitted
    /// job of that pool, in no queue; `arrived` is valid until set.
    pub unsafe fn deliver(&self, target: usize, job: JobRef, sleep: &Sleep, arrived: *const Latch) {
        self.boxes[target].jobs.push(job);
        crate::base::chaos::point();
        // Fences (SeqCst) after the push: a sleeping worker sees it under its flag, or is woken.
        sleep.wake_worker(target);
        // SAFETY: the caller's contract; not touched after this.
        unsafe { Latch::set(arrived, sleep) };
        if self.closed(target) {
            while let Some(job) = self.take(target) {
                // SAFETY: an admitted job, taken out of the inbox once, run here since the
                // inbox is closed (this thread is a worker of its pool).
                unsafe { job.run() };
            }
        }
    }
}
