//! Idle workers: how they go to sleep and how they are woken.
//!
//! This module owns the per-worker blocking state and the two counters of the protocol. It never
//! looks at queues or latches itself: the caller passes `has_work` and `done` checks, which keeps
//! the protocol small enough for the loom model in `tests/loom/sleep.rs`.
//!
//! # Protocol
//!
//! A worker that found nothing to do for a while calls [`Sleep::sleep`]:
//! 1. it counts itself in `sleepers` (SeqCst), reads the `announcements` counter, and checks once
//!    more for work and for its own latch;
//! 2. under its own mutex it raises its `asleep` flag (SeqCst, then a SeqCst fence), checks that
//!    no work was announced since step 1 and that its latch is still unset, marks itself blocked
//!    and waits on its condvar. If a check fails it lowers the flag and leaves.
//!
//! Whoever wakes a blocked worker (clears `blocked` under its mutex) also lowers its `asleep`
//! flag and takes it out of `sleepers`: from then on it counts as awake, and it is, or is about
//! to be, running its wait loop again, which looks for work before it could sleep again. A worker
//! that leaves `sleep` without being woken takes itself out of `sleepers`.
//!
//! A wake-up for work goes to one blocked worker, which may not take that work: its wait may end
//! first (its condition came true meanwhile), or run other work that was never announced (its
//! own private half, a pinned job). A worker that goes on running pool work looks again at its
//! next wait, so the work waits at most that long. A thread that stops running pool work for
//! good (the builder's thread of `use_current_thread` leaving a call) passes the wake-up on as
//! it stops ([`Sleep::pass_on`]): else the work would wait for a wake-up that was spent.
//!
//! A thread that makes work available calls [`Sleep::new_work`] after publishing it: if anyone
//! counts as a sleeper it bumps `announcements` and wakes one blocked worker. A worker that
//! pushed to its own deque calls [`Sleep::new_local_work`], the same without the fence (see
//! there why a missed sleeper is harmless then). A thread that published with a SeqCst
//! read-modify-write (a promoted half) calls [`Sleep::new_work_after_seqcst_rmw`], also without
//! the fence, and missing no sleeper (see there why). A thread that sets a latch calls
//! [`Sleep::wake_worker`] for the latch's owner. Neither takes the mutex of a worker whose
//! `asleep` flag is down: a hot path (every spawn pushes, every loan returned across threads
//! wakes its spawner) never blocks on a lock that a worker settling into sleep holds.
//!
//! No lost wake-up:
//! * work: the SeqCst `sleepers` increment and the SeqCst fence in `new_work` (or the
//!   publisher's SeqCst read-modify-write) order the two sides, so either the sleeper's step-1
//!   check sees the work, or the announcer sees the sleeper. Then the announcer's
//!   `announcements` increment and the sleeper's flag (each SeqCst, each followed by a SeqCst
//!   fence and a load of the other) are the same store-fence-load handshake: either the
//!   sleeper's step-2 load sees the announcement, or the announcer sees the flag up, takes the
//!   mutex, and finds the worker blocked (or gone);
//! * a latch: it is set, then a SeqCst fence, then the owner's flag is read; the owner raises
//!   its flag, fences, then reads its latch. Either the owner sees the latch, or the setter sees
//!   the flag up and takes the mutex, under which the owner is blocked or has left.

use crossbeam_utils::CachePadded;

use crate::base::sync::{fence, lock, wait, AtomicBool, AtomicUsize, Condvar, Mutex, Ordering};
use crate::base::wake::WakeWorker;

/// The blocking state of one worker.
struct WorkerSleep {
    /// `true` while the worker is blocked on `wake`.
    blocked: Mutex<bool>,
    wake: Condvar,
    /// Up from just before the worker's last checks under `blocked` until it is woken or leaves:
    /// a waker that sees it down needs no lock (see the module doc).
    asleep: AtomicBool,
    /// Set, under `blocked`, while the worker sleeps *aside* ([`Sleep::sleep_aside`]): for a
    /// condition of its own, not for work. Read under `blocked`.
    aside: AtomicBool,
}

/// The sleep state of a pool's workers.
pub struct Sleep {
    workers: Box<[CachePadded<WorkerSleep>]>,
    /// Workers between step 1 and being woken (or leaving without blocking).
    sleepers: CachePadded<AtomicUsize>,
    /// Bumped by `new_work` whenever a sleeper may have missed the work.
    announcements: AtomicUsize,
    /// Workers in a wait by the rule that found no work for `IDLE_ROUNDS` rounds in a row
    /// (asleep or not), on a line of its own: every `join` reads it, and it changes only when a
    /// worker runs out of work or finds some again.
    idle: CachePadded<AtomicUsize>,
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
                        asleep: AtomicBool::new(false),
                        aside: AtomicBool::new(false),
                    })
                })
                .collect(),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            announcements: AtomicUsize::new(0),
            idle: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Blocks worker `index` until it is woken, unless `has_work` or `done` says there is no need.
    /// Returns early (spuriously) at times; callers loop. Returns whether it blocked (and was
    /// woken).
    pub fn sleep(
        &self,
        index: usize,
        has_work: impl Fn() -> bool,
        done: impl Fn() -> bool,
    ) -> bool {
        // SeqCst: the sleeper's half of the handshake with `new_work`.
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let seen = self.announcements.load(Ordering::SeqCst);
        if !has_work() && !done() {
            // The window between the first checks and the flag, where only the checks under the
            // flag catch what is published (chaos builds widen it).
            crate::base::chaos::point();
            let me = &self.workers[index];
            let mut blocked = lock(&me.blocked);
            // SeqCst store and fence: the sleeper's half of the flag handshakes (module doc).
            me.asleep.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.announcements.load(Ordering::SeqCst) == seen && !done() {
                *blocked = true;
                while *blocked {
                    blocked = wait(&me.wake, blocked);
                }
                // The waker lowered the flag and took this worker out of `sleepers`.
                return true;
            }
            // Relaxed: written under the mutex, which a waker takes before it trusts the flag.
            me.asleep.store(false, Ordering::Relaxed);
        }
        self.leave();
        false
    }

    /// Blocks worker `index` until it is woken by index ([`Sleep::wake_worker`]), unless
    /// `has_work` or `done` says there is no need: a sleep for a condition of the worker's own
    /// (see `WorkerThread::wait_for_own`), not for work. The worker does not count as a sleeper,
    /// and announcements of new work pass it by ([`Sleep::new_work`] wakes a worker that sleeps
    /// for work, or none): it would not take the work. The handshake with its waker is the
    /// latch's (module doc). Returns early (spuriously) at times; callers loop. Named policy
    /// **SleepAside** (with `Policy::OwnItems`): a worker that would not take new work must not
    /// absorb the one wake-up meant for a worker that would (the lost wake-up of loom model (e)).
    pub fn sleep_aside(&self, index: usize, has_work: impl Fn() -> bool, done: impl Fn() -> bool) {
        if has_work() || done() {
            return;
        }
        crate::base::chaos::point();
        let me = &self.workers[index];
        let mut blocked = lock(&me.blocked);
        // Relaxed: written and read under the mutex.
        me.aside.store(true, Ordering::Relaxed);
        // SeqCst store and fence: the sleeper's half of the latch handshake (module doc).
        me.asleep.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !has_work() && !done() {
            *blocked = true;
            while *blocked {
                blocked = wait(&me.wake, blocked);
            }
        } else {
            // Relaxed: as in `sleep`.
            me.asleep.store(false, Ordering::Relaxed);
        }
        // Relaxed: under the mutex.
        me.aside.store(false, Ordering::Relaxed);
    }

    /// Takes one worker out of `sleepers`.
    fn leave(&self) {
        // SeqCst: part of the handshake with `new_work` (a later `sleep` counts itself in again).
        let was = self.sleepers.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(was > 0, "a worker left sleep twice");
    }

    /// Work was published to the injector, where no worker may look unless woken: wakes a
    /// sleeper if there is one, never missing one.
    pub fn new_work(&self) {
        // SeqCst fence: orders the caller's push before the `sleepers` load (the announcer's half
        // of the handshake).
        fence(Ordering::SeqCst);
        self.announce();
    }

    /// The calling thread, a worker woken by this pool's sleep at some point, stops running pool
    /// work (see the module doc): if `has_work` says work is left in the pool's queues, announces
    /// it as [`Sleep::new_work`] does, for the wake-up this worker may have spent. The work the
    /// spent wake-up announced was published before it, so `has_work` sees it (or its taker).
    pub fn pass_on(&self, has_work: impl Fn() -> bool) {
        if has_work() {
            self.new_work();
        }
    }

    /// Work was published by a SeqCst read-modify-write (a promoted half: `HalfOwner::promote`'s
    /// `fetch_add` on its split stack's ends): wakes a sleeper if there is one, never missing
    /// one, as [`Sleep::new_work`] does, without its fence.
    ///
    /// No fence is needed: the caller's SeqCst write W and this SeqCst load L of `sleepers`
    /// are in the single total order S, W before L. A sleeper counts itself in (T, SeqCst),
    /// fences (X, SeqCst) and loads the word (R). If R missed W, R is coherence-ordered before
    /// W, so X precedes W in S (C++20 [atomics.order]/4.3); if L missed T, L precedes T in S
    /// (4.1); with T before X (sequenced) that is W < L < T < X < W, a cycle. Loom models SeqCst
    /// accesses as acquire/release, not as members of S, so under loom the fence stays, and the
    /// models check the rest of the protocol.
    #[inline]
    pub fn new_work_after_seqcst_rmw(&self) {
        #[cfg(loom)]
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
        // SeqCst increment and fence: the announcer's half of the flag handshake, before the
        // flags are read (store, fence, load on both sides).
        self.announcements.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        for index in 0..self.workers.len() {
            if self.wake_if_asleep(index, true) {
                return;
            }
        }
    }

    /// Wakes worker `index` if it is blocked (its latch was set, before this call). Returns
    /// whether it was.
    pub fn wake_worker(&self, index: usize) -> bool {
        // SeqCst fence: orders the caller's latch store before the flag load (the setter's half
        // of the flag handshake).
        fence(Ordering::SeqCst);
        self.wake_if_asleep(index, false)
    }

    /// Wakes worker `index` if its flag is up and it is blocked, unless it sleeps aside and
    /// `for_work` (work announced: it would not take it). The caller has fenced (SeqCst) after
    /// the write the worker must see.
    fn wake_if_asleep(&self, index: usize, for_work: bool) -> bool {
        let w = &self.workers[index];
        // SeqCst: the load of the handshakes; down means the worker will see the caller's write
        // (it raises the flag, fences, then checks).
        if !w.asleep.load(Ordering::SeqCst) {
            return false;
        }
        let mut blocked = lock(&w.blocked);
        // Relaxed: written under the mutex, which this thread holds.
        let aside = w.aside.load(Ordering::Relaxed);
        if !*blocked || (for_work && aside) {
            return false;
        }
        *blocked = false;
        // Relaxed: another waker that still reads it up takes this mutex, and then finds the
        // worker not blocked.
        w.asleep.store(false, Ordering::Relaxed);
        if !aside {
            // An aside sleeper never counted itself in.
            self.leave();
        }
        w.wake.notify_one();
        true
    }

    /// Counts the calling worker in as one that looks for work and found none (see
    /// [`Sleep::idle_count`]); it takes itself out with [`Sleep::not_idle`].
    pub fn idle(&self) {
        // Relaxed: a count read as a hint (`idle_count`); nothing is published through it.
        self.idle.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the calling worker, counted in by [`Sleep::idle`], out again.
    pub fn not_idle(&self) {
        // Relaxed: as in `idle`.
        self.idle.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many workers are counted idle ([`Sleep::idle`]): the join halves' promotion rule
    /// (`WorkerThread::push_half`, `WorkerThread::serve_idle`), read on every `join`.
    #[inline]
    pub fn idle_count(&self) -> usize {
        // Relaxed: a hint; an idle worker seen late costs parallelism, never progress (a busy
        // worker runs its own halves, and a promotion it sees wakes a sleeper).
        self.idle.load(Ordering::Relaxed)
    }

    /// Workers counted as sleepers now (for the loom models).
    #[cfg(loom)]
    pub fn sleepers(&self) -> usize {
        // SeqCst: as every access to the count.
        self.sleepers.load(Ordering::SeqCst)
    }

    /// Wakes every blocked worker (the pool is shutting down).
    pub fn wake_all(&self) {
        for index in 0..self.workers.len() {
            self.wake_worker(index);
        }
    }
}

impl WakeWorker for Sleep {
    #[inline]
    fn wake_worker(&self, index: usize) {
        Sleep::wake_worker(self, index);
    }
}
