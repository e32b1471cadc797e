//! Idle workers: how they go to sleep and how they are woken.
//!
//! This module owns the per-worker blocking state and the two counters of the protocol. It never
//! looks at queues or latches itself: the caller passes `has_work` and `done` checks, which keeps
//! the protocol small enough for the loom model in `tests/loom_sleep.rs`.
//!
//! # Protocol
//!
//! A worker that found nothing to do for a while calls [`Sleep::sleep`]:
//! 1. it counts itself in `sleepers` (SeqCst), reads the `announcements` counter, and checks once
//!    more for work and for its own latch;
//! 2. under its own mutex it checks that no work was announced since step 1 and that its latch is
//!    still unset, marks itself blocked and waits on its condvar.
//!
//! A thread that makes work available calls [`Sleep::new_work`] after publishing it: if anyone
//! counts as a sleeper it bumps `announcements` and wakes one blocked worker. A worker that
//! pushed to its own deque calls [`Sleep::new_local_work`], the same without the fence (see
//! there why a missed sleeper is harmless then). A thread that sets a
//! latch calls [`Sleep::wake_worker`] for the latch's owner.
//!
//! No lost wake-up: the SeqCst `sleepers` increment and the SeqCst fence in `new_work` order the
//! two sides, so either the sleeper's step-1 check sees the work, or the announcer sees the
//! sleeper; then the sleeper either sees the announcement in step 2 or is already blocked when the
//! announcer takes its mutex to wake it. A latch is set before its setter takes the owner's mutex,
//! and the owner checks it under that mutex, so the same argument holds per worker.

use crossbeam_utils::CachePadded;

use crate::sync::{fence, lock, wait, AtomicUsize, Condvar, Mutex, Ordering};

/// The blocking state of one worker.
struct WorkerSleep {
    /// `true` while the worker is blocked on `wake`.
    blocked: Mutex<bool>,
    wake: Condvar,
}

/// The sleep state of a pool's workers.
pub struct Sleep {
    workers: Box<[CachePadded<WorkerSleep>]>,
    /// Workers between step 1 and waking up.
    sleepers: CachePadded<AtomicUsize>,
    /// Bumped by `new_work` whenever a sleeper may have missed the work.
    announcements: AtomicUsize,
}

impl Sleep {
    /// Sleep state for `n` workers, all awake.
    pub fn new(n: usize) -> Self {
        Sleep {
            workers: (0..n)
                .map(|_| {
                    CachePadded::new(WorkerSleep {
                        blocked: Mutex::new(false),
                        wake: Condvar::new(),
                    })
                })
                .collect(),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            announcements: AtomicUsize::new(0),
        }
    }

    /// Blocks worker `index` until it is woken, unless `has_work` or `done` says there is no need.
    /// Returns early (spuriously) at times; callers loop.
    pub fn sleep(&self, index: usize, has_work: impl Fn() -> bool, done: impl Fn() -> bool) {
        // SeqCst: the sleeper's half of the handshake with `new_work`.
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let seen = self.announcements.load(Ordering::SeqCst);
        if !has_work() && !done() {
            let me = &self.workers[index];
            let mut blocked = lock(&me.blocked);
            if self.announcements.load(Ordering::SeqCst) == seen && !done() {
                *blocked = true;
                while *blocked {
                    blocked = wait(&me.wake, blocked);
                }
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Work was published to the injector, where no worker may look unless woken: wakes a
    /// sleeper if there is one, never missing one.
    pub fn new_work(&self) {
        // SeqCst fence: orders the caller's push before the `sleepers` load (the announcer's half
        // of the handshake).
        fence(Ordering::SeqCst);
        self.announce();
    }

    /// Work was pushed to the calling worker's own deque: wakes a sleeper to steal it if one is
    /// seen. Without the fence of [`Sleep::new_work`] a sleeper that is just settling down can
    /// be missed; that costs parallelism, never progress, because the pushing worker drains its
    /// own deque before it may sleep. This keeps a full fence off `join`'s fast path.
    #[inline]
    pub fn new_local_work(&self) {
        self.announce();
    }

    #[inline]
    fn announce(&self) {
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            self.wake_one();
        }
    }

    /// Announces new work to the sleepers and wakes one that is blocked.
    #[cold]
    fn wake_one(&self) {
        self.announcements.fetch_add(1, Ordering::SeqCst);
        for index in 0..self.workers.len() {
            if self.wake_worker(index) {
                return;
            }
        }
    }

    /// Wakes worker `index` if it is blocked (its latch was set). Returns whether it was.
    pub fn wake_worker(&self, index: usize) -> bool {
        let w = &self.workers[index];
        let mut blocked = lock(&w.blocked);
        if !*blocked {
            return false;
        }
        *blocked = false;
        w.wake.notify_one();
        true
    }

    /// Wakes every blocked worker (the pool is shutting down).
    pub fn wake_all(&self) {
        for index in 0..self.workers.len() {
            self.wake_worker(index);
        }
    }
}
