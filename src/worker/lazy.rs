//! Lazy join: the `b` halves of a worker's joins, kept private until a thief asks for work.
//!
//! This module owns two things:
//! * [`PrivateHalves`], one per worker: the `b` of every `join` the worker is inside, oldest
//!   first. Only the owning thread touches it, so it has no atomics and no fences. A joiner takes
//!   its half back from the top and runs it inline; a *promotion* hands the oldest private half to
//!   the caller, which pushes it to the worker's deque, where thieves see it.
//! * [`WorkRequests`], one flag per worker: an idle worker raises a busy one's flag; the busy
//!   worker sees it at its next join (or wait loop round) and promotes its oldest half. This is
//!   the work-request scheme of Acar, Charguéraud and Rainey ("Scheduling parallel programs by
//!   work stealing with private deques", PPoPP 2013): no timer thread, and a thief gets work as
//!   soon as its victim reaches a join. A request is one of the two signals a join promotes on;
//!   the other is the pool's idle count (`Sleep::idle_count`), which makes *every* join promote
//!   while any worker is idle (`WorkerThread::work_wanted`).
//!
//! It never runs, admits or pushes a job itself: a promoted half is admitted by whoever takes it
//! from the deque, exactly as every pushed half was before (see `JoinJob`), and an un-promoted
//! half is part of its joiner's job.
//!
//! Why oldest first: the oldest half is the shallowest in the joiner's stack, so in a balanced
//! tree it is the largest piece of work, and a thief that takes it will not ask again soon. For
//! the same reason a job keeps at most [`KEPT_HALVES`] private halves: a deeper join, made
//! while no one asks, runs both halves as plain calls (see `WorkerThread::join_plainly`).

use std::cell::{Cell, UnsafeCell};

use crossbeam_utils::CachePadded;

use crate::admission::token::Lender;
use crate::base::job_ref::JobRef;
use crate::base::sync::{AtomicBool, Ordering};

/// The private join halves of one worker, oldest first. Not `Sync`: the owner's alone.
///
/// Generic over the half's handle only so that the loom model (`tests/loom/join.rs`) can run
/// this very code with plain numbers; the pool uses [`JobRef`]s.
pub struct PrivateHalves<H = JobRef> {
    /// `halves[i]` is the `b` of the join at nesting depth `i` on this thread's stack.
    halves: UnsafeCell<Vec<H>>,
    /// `halves[..promoted]` were promoted (pushed to the deque) and are no longer private.
    promoted: Cell<usize>,
    /// `halves[..base]` belong to the jobs below the one the thread runs now (it took that job
    /// while they waited); only the halves above count towards [`KEPT_HALVES`].
    base: Cell<usize>,
}

impl<H> Default for PrivateHalves<H> {
    fn default() -> Self {
        PrivateHalves {
            halves: UnsafeCell::new(Vec::with_capacity(64)),
            promoted: Cell::new(0),
            base: Cell::new(0),
        }
    }
}

impl<H: Copy> PrivateHalves<H> {
    /// Keeps `half` private; returns its slot, for [`PrivateHalves::take_back`].
    #[inline]
    pub fn push(&self, half: H) -> usize {
        // SAFETY: only the owning thread reaches this (the type is not `Sync`), and no reference
        // into the vector outlives a call.
        let halves = unsafe { &mut *self.halves.get() };
        halves.push(half);
        halves.len() - 1
    }

    /// The joiner of slot `slot` is done with `a`: drops the slot (and any above it, whose
    /// joiners have all returned) and says whether the half is still private, so the joiner runs
    /// it inline. `false`: it was promoted and is in the deque, or already taken from there.
    #[inline]
    pub fn take_back(&self, slot: usize) -> bool {
        // SAFETY: as in `push`.
        let halves = unsafe { &mut *self.halves.get() };
        halves.truncate(slot);
        // Promotion goes oldest first, so a promoted slot has every slot below it promoted too;
        // the count drops back to this slot, the new top.
        let private = slot >= self.promoted.get();
        if !private {
            self.promoted.set(slot);
        }
        private
    }

    /// Makes the oldest private half public: the caller pushes it where thieves can take it.
    #[inline]
    pub fn promote_oldest(&self) -> Option<H> {
        // SAFETY: as in `push`.
        let halves = unsafe { &*self.halves.get() };
        let oldest = *halves.get(self.promoted.get())?;
        self.promoted.set(self.promoted.get() + 1);
        Some(oldest)
    }

    /// Whether any half is private.
    #[inline]
    pub fn any(&self) -> bool {
        self.private() > 0
    }

    /// How many halves are private.
    #[inline]
    pub fn private(&self) -> usize {
        self.len() - self.promoted.get()
    }

    /// How many halves the current job keeps private (its own joins' halves, not those of the
    /// jobs it runs above): the halves a wait may take for itself (named policy
    /// **KeepOwnHalves**: a half of a job buried below the current one, taken by a wait of the
    /// current one, could only go back to that job unrun; shape 2 above kept joins of another
    /// job).
    #[inline]
    pub fn kept_by_current_job(&self) -> usize {
        self.len() - self.promoted.get().max(self.base.get())
    }

    /// A job starts on this thread, above every half kept now; returns the outer job's mark, for
    /// [`PrivateHalves::leave_job`].
    #[inline]
    pub fn enter_job(&self) -> usize {
        self.base.replace(self.len())
    }

    /// The job started by the matching [`PrivateHalves::enter_job`] returned (its joins have all
    /// taken their slots back).
    #[inline]
    pub fn leave_job(&self, outer: usize) {
        self.base.set(outer);
    }

    #[inline]
    fn len(&self) -> usize {
        // SAFETY: as in `push`.
        unsafe { &*self.halves.get() }.len()
    }
}

/// The promoted join halves that came back unrun to their joiner's thread (no token was free to
/// admit them where they were taken), oldest first, each with its joiner's job. Not `Sync`: the
/// owner's alone.
///
/// Named policy **HalfReturnsToItsJob**: such a half runs as part of its joiner's job, in a wait
/// of that job (`WorkerThread::take_returned_half`: the job current, not admitting), and never
/// anywhere else. Handed back to the joiner's frame alone, as it once was, it waited for the
/// job's `a` to return, and an `a` that waits (through another pool) for its own `b` hung:
/// shape 2, `shape_2_whose_x_first_waits_for_a_spawns_admission`.
#[derive(Default)]
pub struct ReturnedHalves {
    halves: UnsafeCell<Vec<(JobRef, *const Lender)>>,
}

impl ReturnedHalves {
    /// Keeps `half`, a promoted half of `job`'s, for a wait of `job`.
    pub fn keep(&self, half: JobRef, job: *const Lender) {
        // SAFETY: only the owning thread reaches this (the type is not `Sync`), and no reference
        // into the vector outlives a call.
        unsafe { &mut *self.halves.get() }.push((half, job));
    }

    /// The newest half kept for `job`, taken out. A job's halves are above those of the jobs it
    /// runs above (those are done before it is current again), but a half that a thief sent
    /// back may land above halves of a job current now, hence the search.
    #[inline]
    pub fn take_for(&self, job: *const Lender) -> Option<JobRef> {
        // SAFETY: as in `keep`.
        let halves = unsafe { &mut *self.halves.get() };
        if halves.is_empty() {
            return None;
        }
        let at = halves.iter().rposition(|&(_, of)| of == job)?;
        Some(halves.remove(at).0)
    }

    /// Whether any half is kept.
    #[inline]
    pub fn any(&self) -> bool {
        // SAFETY: as in `keep`.
        !unsafe { &*self.halves.get() }.is_empty()
    }
}

/// A plain join's `b` (`PlainHalf`) with its type erased, as the joiner's thread keeps it (`PlainHalves`).
#[derive(Clone, Copy)]
pub struct PlainRef {
    data: *const (),
    run: unsafe fn(*const ()) -> bool,
}

impl PlainRef {
    /// A ref that runs `run(data)`.
    ///
    /// # Safety
    /// `run` may be called with `data` whenever [`PlainRef::run`]'s contract holds.
    pub unsafe fn new(data: *const (), run: unsafe fn(*const ()) -> bool) -> Self {
        PlainRef { data, run }
    }

    /// Runs the half as part of the current job, if it has not run yet; returns whether it ran.
    ///
    /// # Safety
    /// The half is alive (its joiner has not popped it), on this thread, whose current job is
    /// the joiner's and is not admitting.
    pub unsafe fn run(self) -> bool {
        // SAFETY: the caller's contract.
        unsafe { (self.run)(self.data) }
    }
}

/// The `b` of every plain join (`WorkerThread::join_plainly`) in progress on this thread, oldest
/// first. Not `Sync`: the owner's alone. Generic over the handle only as [`PrivateHalves`] is.
///
/// Named policy **PlainHalvesKept**: a plain join's `b` is never promoted (no thief takes it:
/// that is what makes the join plain), but it is kept where a wait of its own job finds it, and
/// that wait runs it as part of the job when it finds nothing else (newest first, as a rayon
/// wait pops its own deque). Kept nowhere, a plain join whose `a` waits (through another pool)
/// for its `b` hung on every run: `plain_join_whose_a_waits_through_another_pool_for_its_b`.
pub struct PlainHalves<H> {
    /// Each half with its job (the lender of the job current when it was kept).
    halves: UnsafeCell<Vec<(H, *const Lender)>>,
}

impl<H> Default for PlainHalves<H> {
    fn default() -> Self {
        PlainHalves {
            halves: UnsafeCell::new(Vec::with_capacity(64)),
        }
    }
}

impl<H: Copy> PlainHalves<H> {
    /// Keeps `half`, a half of `job`; returns its slot, for [`PlainHalves::pop`].
    #[inline]
    pub fn push(&self, half: H, job: *const Lender) -> usize {
        // SAFETY: only the owning thread reaches this (the type is not `Sync`), and no reference
        // into the vector outlives a call.
        let halves = unsafe { &mut *self.halves.get() };
        halves.push((half, job));
        halves.len() - 1
    }

    /// The plain join of slot `slot` is done with `a`: drops its half (and any above it, whose
    /// joins have all returned).
    #[inline]
    pub fn pop(&self, slot: usize) {
        // SAFETY: as in `push`.
        unsafe { &mut *self.halves.get() }.truncate(slot);
    }

    /// The halves of `job`, newest first: the top entries, for a job's halves lie above those
    /// of the jobs it runs above. Each is copied out when the caller asks for it (running one
    /// may push and pop halves above it).
    pub fn of_job(&self, job: *const Lender) -> impl Iterator<Item = H> + '_ {
        // SAFETY: as in `push`.
        let len = unsafe { &*self.halves.get() }.len();
        (0..len)
            .rev()
            // SAFETY: as in `push`; the copy is taken before the caller runs anything, and the
            // halves below `len` stay (a run pops only what it pushed above them).
            .map(move |i| unsafe { (&*self.halves.get())[i] })
            .take_while(move |&(_, of)| of == job)
            .map(|(half, _)| half)
    }

    /// Whether any half is kept.
    #[inline]
    pub fn any(&self) -> bool {
        // SAFETY: as in `push`.
        !unsafe { &*self.halves.get() }.is_empty()
    }
}

/// How many private halves a job keeps before its joins stop keeping their `b` (a throughput
/// policy: chili's plain joins). Tuned on: the 2²⁰-node tree sum (`benches/join_tree.rs`, about a
/// third off on one thread).
pub const KEPT_HALVES: usize = 3;

/// One worker's work request flag: raised by idle workers, lowered by the worker when it
/// promotes a half.
#[derive(Default)]
pub struct RequestFlag(AtomicBool);

impl RequestFlag {
    /// An idle worker asks for a promoted half. Writes the line only when the flag is down, so
    /// idle workers spinning on a busy one do not bounce it.
    #[inline]
    pub fn raise(&self) {
        // Relaxed: a request is a hint; the work it brings is published by the deque push, and a
        // late-seen request only delays parallelism, never progress.
        if !self.0.load(Ordering::Relaxed) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// Whether someone asked for work (the flag stays as it is).
    #[inline]
    pub fn is_raised(&self) -> bool {
        // Relaxed: as in `raise`.
        self.0.load(Ordering::Relaxed)
    }

    /// Whether someone asked for work; lowers the flag if so.
    #[inline]
    pub fn take(&self) -> bool {
        // Relaxed: as in `raise`. The plain load keeps the common case (no request) read-only.
        self.0.load(Ordering::Relaxed) && self.0.swap(false, Ordering::Relaxed)
    }
}

/// The request flags of a pool's workers, each on its own cache line.
pub struct WorkRequests {
    flags: Box<[CachePadded<RequestFlag>]>,
}

impl WorkRequests {
    /// No requests, for `n` workers.
    pub fn new(n: usize) -> Self {
        WorkRequests {
            flags: (0..n).map(|_| CachePadded::default()).collect(),
        }
    }

    /// Worker `index`'s flag.
    #[inline]
    pub fn flag(&self, index: usize) -> &RequestFlag {
        &self.flags[index]
    }
}
