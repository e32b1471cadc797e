//! The type-erased head of a `join` half (`Half`), what its split stack holds, and how it is run
//! (`HalfRun`).
//!
//! This module owns a half's state bits and the hand-shake between a taker and the half's
//! owner: a taker settles the half last (`Half::settle`: a Release store, then a wake of the
//! owner by index), after which it touches the half no more. It never admits or runs a half's
//! closure itself: that is the half's own `run`, written by `job::JoinJob`.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

use crate::admission::token::Lender;
use crate::base::job_ref::JobRef;
use crate::base::sync::{AtomicU8, Ordering};
use crate::worker::sleep::Sleep;

/// How a join half is run through its [`Half`] head ([`Half::run`]).
#[derive(Clone, Copy, Debug)]
pub enum HalfRun {
    /// By a taker that claimed it from its owner's split stack (a thief, or the owner's own
    /// wait): as part of its job if that is the taker's current job (named policy
    /// **HalfRunsAsPart**), else admitted as a child of its job (loan, else pool token), else
    /// on credit if `credit` (named policy **CalledOutHalfOnCredit**), else declined: left
    /// where it is, for its job.
    Taken {
        /// Whether the half may run on credit (it lies below a call into another pool).
        credit: bool,
    },
    /// By a wait of its own job on its owner's thread, in place, as part of the job: a private
    /// half, a public one taken back, or one a taker declined.
    Here,
    /// By a wait on its owner's thread above its job: a declined half below a call into
    /// another pool, admitted, else on credit (named policy **CalledOutHalfOnCredit**).
    OnCredit,
}

/// The state bits of a half (`Half::state`). None set: not run, and no taker is done with it.
/// `RAN`: its closure ran (or runs now) on its owner's thread or its taker's.
pub const RAN: u8 = 1;
/// A taker that claimed it is done with it: ran it, found it run already, or declined it.
pub const SETTLED: u8 = 2;
/// With `SETTLED` and without `RAN`: the taker found no token and left it, unrun, for its job.
pub const DECLINED: u8 = 4;

/// The type-erased head of a join half: the first field of its `JoinJob`, whose address is
/// what the owner's split stack (`base::half_stack`) holds.
#[repr(C)]
pub struct Half {
    run: unsafe fn(*const Half, HalfRun),
    /// `RAN`, `SETTLED` and `DECLINED` bits. The owner's thread sets `RAN` on a half no taker
    /// can claim (private, taken back, or declined); a taker sets `SETTLED` last, with Release.
    pub(super) state: AtomicU8,
    /// The joiner's job: the lender of a taker's loan, and the job the half is part of.
    pub(super) parent: *const Lender,
    /// The joiner's thread (its index in the pool), woken when a taker is done with the half:
    /// written by the taker once it claimed the half (it knows whose split stack it claimed it
    /// from), so that a join pays nothing for it.
    owner: UnsafeCell<MaybeUninit<usize>>,
}

impl Half {
    /// A half's head: not run, `run` its run, `parent` its joiner's job.
    #[inline]
    pub fn new(run: unsafe fn(*const Half, HalfRun), parent: *const Lender) -> Self {
        Half {
            run,
            state: AtomicU8::new(0),
            parent,
            owner: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Runs the half at `this` as `how` says.
    ///
    /// # Safety
    /// `this` is a half in its owner's split stack, alive until its joiner has its result, and
    /// claimed by the caller as `how` says: `Taken` after a claim (by a worker of the half's
    /// pool), `Here` and `OnCredit` on the owner's thread, for a half that [`Half::runs_here`]
    /// allows.
    pub unsafe fn run(this: *const Half, how: HalfRun) {
        // SAFETY: the caller's contract; `run` is the half's own.
        unsafe { ((*this).run)(this, how) }
    }

    /// The half at `half`, which the caller claimed from worker `owner`'s split stack: notes its
    /// owner, for the wake-up when the taker is done with it.
    ///
    /// # Safety
    /// `half` is alive and claimed by the caller, which has not run it yet.
    pub unsafe fn claimed_from(half: *const (), owner: usize) -> *const Half {
        let half = half as *const Half;
        // SAFETY: the caller's contract: the claim makes this taker the field's only user.
        unsafe { (*(*half).owner.get()).write(owner) };
        half
    }

    /// The half at `half` as a job a thief runs through a [`JobRef`] (`HalfRun::Taken`, no
    /// credit).
    ///
    /// # Safety
    /// As [`Half::run`] with `Taken`, after [`Half::claimed_from`].
    pub unsafe fn as_taken_job(half: *const Half) -> JobRef {
        unsafe fn run_taken(data: *const ()) {
            // SAFETY: the contract of `as_taken_job`.
            unsafe { Half::run(data as *const Half, HalfRun::Taken { credit: false }) }
        }
        // SAFETY: forwarded from the caller.
        unsafe { JobRef::new(half as *const (), run_taken) }
    }

    /// Whether the owner's thread may run the half now (`Here`, `OnCredit`): not run yet, and
    /// no taker is running it (`private`: it is not public, so no taker can claim it).
    ///
    /// # Safety
    /// `this` is alive; called on its owner's thread.
    pub unsafe fn runs_here(this: *const Half, private: bool) -> bool {
        // SAFETY: the caller's contract. Acquire: a taker's `SETTLED` orders its reads of the
        // half before the owner's run.
        match unsafe { &(*this).state }.load(Ordering::Acquire) {
            0 => private,
            state => state == SETTLED | DECLINED,
        }
    }

    /// Whether the half never ran and no taker is done with it (public: may be claimed now).
    ///
    /// # Safety
    /// `this` is alive; called on its owner's thread.
    pub unsafe fn never_ran(this: *const Half) -> bool {
        // SAFETY: the caller's contract. Relaxed: the owner's own `RAN` (a half it ran while
        // private, then promoted); a taker's claim is re-checked by the retraction's CAS.
        unsafe { &(*this).state }.load(Ordering::Relaxed) == 0
    }

    /// Whether a taker declined the half.
    ///
    /// # Safety
    /// `this` is alive.
    pub unsafe fn declined(this: *const Half) -> bool {
        // SAFETY: the caller's contract. Relaxed: a hint for a sleeping owner; the run
        // re-reads with `runs_here`.
        unsafe { &(*this).state }.load(Ordering::Relaxed) == SETTLED | DECLINED
    }

    /// A taker is done with the half at `this`: publishes `state` (with `SETTLED`) and wakes
    /// the owner, which may free the half at once.
    ///
    /// # Safety
    /// `this` is valid until the store; not touched after.
    pub(super) unsafe fn settle(this: *const Half, state: u8, sleep: &Sleep) {
        let state = state | SETTLED;
        // SAFETY: the caller's contract; the taker wrote it (`claimed_from`).
        let owner = unsafe { (*(*this).owner.get()).assume_init() };
        // A plain store: no other thread writes the state of a claimed half meanwhile.
        // SAFETY: as above. Release: publishes the result (`RAN`), and orders the taker's
        // reads of the half before its owner's reuse of the frame.
        unsafe { (*this).state.store(state, Ordering::Release) };
        crate::base::chaos::point();
        sleep.wake_worker(owner);
    }
}
