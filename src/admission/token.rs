//! The lending token table: admission of every job, lock-free.
//!
//! This module owns the `max_inflight` tokens, the credit tokens of calls that come in from
//! other pools, and the rules that move them (the design brief's lending rules 1–6). It decides
//! *who may start*; it never runs, pushes or wakes anything: an operation that grants a token to
//! a waiting job returns that job's [`Lender`], and the caller (the registry) makes it runnable.
//! That keeps this module free of the scheduler, so the loom models in `tests/loom/tokens.rs`
//! drive it directly.
//!
//! # State
//!
//! * [`TokenTable::tokens`]: one atomic word holding the count of pool tokens nobody holds (low
//!   32 bits) and the count of credit tokens in use (high 32 bits), so that one load reads both
//!   and the peak of their sum is exact.
//! * [`TokenTable::waiters`]: a FIFO of jobs waiting for a pool token (crossbeam's `Injector`:
//!   no mutex, though a push or pop may spin while a concurrent push completes).
//! * Per job, a [`Lender`] with one atomic *lending word*: the `LENT` bit (its token is out on
//!   loan to a child), the `FINISHED` bit (its body has returned), and the address of the one
//!   child waiting to borrow it. A job's children are spawned by the thread running the job, and
//!   each spawn returns only once its child is admitted and settled, so a job never has two
//!   children waiting at once. A second atomic, `admission`, is the job's own state as a waiter:
//!   `PENDING`, then `LOAN`, `POOL` or `CREDIT`, set by a single compare-and-swap, so exactly
//!   one granter wins and a stale queue entry is skipped.
//!
//! # Transitions, and the invariant each keeps
//!
//! Every token in use is held by a *chain*: the job that took it (from the pool, or on its
//! caller's credit), the child it lent it to, that child's child, and so on. Exactly one job on a
//! chain holds it unlent (B1), and a chain has at most one job per level (B2).
//!
//! | transition | code | keeps |
//! |---|---|---|
//! | child borrows its parent's unlent token | [`Lender::try_lend`] | the chain grows by one level, one job per level (B2); the parent stops executing as the child starts (B1) |
//! | child takes a free pool token | [`TokenTable::try_pool`] | a new chain; the free count never goes below zero (B1) |
//! | a call from a job of another pool starts a root on credit | [`TokenTable::admit_credit`] | a new chain that takes no pool token: executing ≤ cap + calls in progress from other pools |
//! | child registers with its parent and the pool queue, then re-checks | [`TokenTable::register`] | no lost wake-up: either the re-check sees the freed token or the releaser's re-check sees the registration (both sides fence) |
//! | a loan returns to a running parent with a waiting child | `return_loan`, from [`TokenTable::finish`] | the loan passes straight on, the chain keeps its length (B1, B2; rule 3) |
//! | a job finishes while lending | [`TokenTable::finish`] | the token stays *parked* on the chain until the loan returns (rule 4); it is released exactly once, by whichever of `finish` and the loan's return comes second |
//! | a job finishes while lending, its own lender finished before it | `Lender::take_over_parked`, from [`TokenTable::finish`] | before parking, the job takes over the token its lender parked with the loan it holds, on what the lender held it on (rule 4 done early: the token goes back where it would have); the chain loses a finished link, never a token |
//! | a pool token is released | [`TokenTable::release_pool`] | handed straight to the first live waiter, or counted free and the queue re-checked (no lost wake-up) |
//! | a credit token is released | `give_back` | the credit ends with the chain; no waiter is granted (it was never the pool's) |
//!
//! # Lifetimes
//!
//! Every `Lender` lives in an `Arc`: the job's runner holds one reference, and so do the queue
//! and the borrower slot a waiting job is registered in; each reference is counted *before* the
//! compare-and-swap or push that publishes it, so whoever takes it out may drop it at once. A
//! child refers to its parent by address only, so a spawn costs no reference-count traffic on
//! the parent. The parent is alive whenever a child uses that address:
//! * while the child is being admitted or settled, the parent is running: the spawning thread
//!   runs in it;
//! * while the child holds the parent's loan, the parent cannot be freed: if it finishes while
//!   lending, [`TokenTable::finish`] leaves its reference with the loan (parked) and touches the
//!   lender no more, and the loan's holder takes that reference over and drops it: when it
//!   finishes while lending in turn (`Lender::take_over_parked`), or when it sees the loan come
//!   back to a finished parent, once the token has moved on (`give_back`);
//! * once the loan is back the child does not touch the parent again.
//!
//! Jobs of different pools are never linked: a call from a job of another pool starts a root
//! here. Deadlock freedom (B3), within a pool and across pools, is proved in `docs/design.md`.

use std::cell::{Cell, UnsafeCell};
use std::ptr;

use crossbeam_utils::CachePadded;

use crate::base::chaos;
use crate::base::job_ref::JobRef;
use crate::base::sync::{
    fence, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering, WaiterQueue,
};
use crate::base::wake::WakeTarget;
use std::ptr::NonNull;

/// What a granter needs to start a job that waited for admission. The token table only keeps
/// it: the worker layer sets it before the job waits and takes it back when its grant wins.
pub struct Ticket {
    /// The job to make runnable.
    pub job: JobRef,
    /// The thread waiting in the spawn call, to wake once the job is admitted; `None` when the
    /// spawner did not wait (a spawn from a worker of another pool).
    pub waker: Option<WakeTarget>,
}

/// The lending word's bit: the token is out on loan to a child.
const LENT: usize = 0b01;
/// The lending word's bit: the job's body has returned.
const FINISHED: usize = 0b10;
/// The lending word's flag bits; the rest is the address of the waiting borrower.
const FLAGS: usize = LENT | FINISHED;

/// `Lender::admission`: waiting for a token.
const PENDING: u8 = 0;
/// `Lender::admission`: admitted on the parent's token.
const LOAN: u8 = 1;
/// `Lender::admission`: admitted on a pool token.
const POOL: u8 = 2;
/// `Lender::admission`: admitted on the credit of a caller in another pool.
const CREDIT: u8 = 3;

/// `TokenTable::tokens`: one credit token in use (the high half of the word).
const ONE_CREDIT: u64 = 1 << 32;
/// `TokenTable::tokens`: the free pool tokens (the low half of the word).
const FREE_MASK: u64 = ONE_CREDIT - 1;

/// The most tokens a table can have: the free count shares a word with the credit count.
pub const MAX_TOKENS: usize = FREE_MASK as usize;

/// How a job was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// On a loan of its parent's token.
    Loan,
    /// On a token from the pool.
    Pool,
    /// On the credit of a caller, a job of another pool blocked in the call.
    Credit,
}

/// The admission state of one job, and its token's lending state once admitted.
///
/// Shared (in an `Arc`) by the job, by its children that borrow its token, and by the queue
/// while it waits. Aligned so that the low bits of its address are free for the lending word.
#[repr(align(8))]
pub struct Lender {
    /// The lending word: borrower address | `LENT` | `FINISHED`.
    lending: AtomicUsize,
    /// `PENDING`, `LOAN`, `POOL` or `CREDIT`; leaves `PENDING` by one compare-and-swap.
    admission: AtomicU8,
    /// The job that spawned this one, the lender of its loan; null for a root. Not counted: see
    /// "Lifetimes" in the module doc for why it is alive whenever it is used. When the job takes
    /// over a finished lender's parked token (`Lender::take_over_parked`), it becomes what that
    /// lender's parent was: the lender of the loan the job now holds, or, where the token is a
    /// pool token or a credit, the job that spawned the finished lender (or null), which lent
    /// the job nothing. Written before the lender is shared, and then only by the thread
    /// finishing the job, before the release that marks it finished; read by that thread, by its
    /// spawner before its parent finished, and, once it is finished, by whoever takes its token
    /// over or passes it on, after the acquire that sees `FINISHED`. So relaxed accesses suffice;
    /// atomic only so that the loom models check who writes it.
    parent: AtomicPtr<Lender>,
    /// Root = 1, child = parent + 1 (32 bits: no stack nests that deep, and it packs with
    /// `admission`).
    level: u32,
    /// Counted references ([`LenderRef`]): the job's runner, and the queue entry, borrower slot
    /// or parked loan that holds it.
    refs: AtomicUsize,
    /// Frees the allocation the lender lives in once the last reference is gone: a box of its
    /// own, or the spawned job it is embedded in ([`LenderRef::from_embedded`]).
    free: unsafe fn(*const Lender),
    /// What the granter makes runnable: written before the job is registered as a waiter, taken
    /// by the one thread whose compare-and-swap admitted it.
    ticket: UnsafeCell<Option<Box<Ticket>>>,
}

// SAFETY: every field but `ticket` and `free` is Sync (`free` is a plain function; `parent` is an
// atomic pointer to a `Lender`, which is Sync). `ticket` is written only by the spawning thread
// before the lender is shared as a waiter, and read only by the single thread that wins the
// `admission` compare-and-swap; the queue push / CAS that publish the lender order the two.
unsafe impl Sync for Lender {}
// SAFETY: as above; the ticket's contents are Send.
unsafe impl Send for Lender {}

impl Lender {
    /// The state of a job that is not yet admitted: a child of `parent` in the same pool, or a
    /// root when `parent` is `None`.
    ///
    /// `parent` must stay alive as described in the module doc ("Lifetimes").
    #[inline]
    pub fn new(parent: Option<&Lender>) -> Self {
        Lender {
            lending: AtomicUsize::new(0),
            admission: AtomicU8::new(PENDING),
            level: parent.map_or(1, |p| p.level + 1),
            parent: AtomicPtr::new(
                parent.map_or(ptr::null_mut(), |p| p as *const Lender as *mut Lender),
            ),
            refs: AtomicUsize::new(1),
            free: free_boxed,
            ticket: UnsafeCell::new(None),
        }
    }

    /// The same lender, to be embedded in a bigger allocation that `free` frees once the last
    /// reference is gone (the first reference is implicit: the count starts at one, taken over
    /// with [`LenderRef::from_raw`]).
    #[inline]
    pub fn embedded(mut self, free: unsafe fn(*const Lender)) -> Self {
        self.free = free;
        self
    }

    /// The job's level: root = 1.
    #[inline]
    pub fn level(&self) -> usize {
        self.level as usize
    }

    /// How the job was admitted, or `None` while it waits.
    #[inline]
    pub fn admission(&self) -> Option<Admission> {
        // Acquire: pairs with the granter's AcqRel CAS, so the caller sees what the grant published.
        decode(self.admission.load(Ordering::Acquire))
    }

    /// Whether this job is a child of `parent` that took a pool token (not its parent's loan),
    /// or took over the pool token of such a child that finished while lending to it.
    #[inline]
    pub fn is_pool_child_of(&self, parent: *const Lender) -> bool {
        // Relaxed: the calling thread runs this job (its admission happened before the run).
        self.parent_ptr() == parent && self.admission.load(Ordering::Relaxed) == POOL
    }

    /// The address of the job's parent (see [`Lender::parent`]'s field doc); null for a root.
    #[inline]
    fn parent_ptr(&self) -> *const Lender {
        // Relaxed: ordered by the job's publication or by the acquire of its `FINISHED` (see the
        // field's doc).
        self.parent.load(Ordering::Relaxed)
    }

    /// The job's parent, if it has one.
    #[inline]
    fn parent(&self) -> Option<&Lender> {
        // SAFETY: the parent is alive whenever a child uses it (module doc, "Lifetimes").
        unsafe { self.parent_ptr().as_ref() }
    }

    /// Rule 4, early: takes over the parked token of the lender of this job's loan if that
    /// lender has finished, and again up the chain, so that the job holds the token directly on
    /// what the lender held it on (a pool token, a credit, or the loan of the lender's own
    /// lender) and the finished lenders are released now instead of when the loan returns.
    /// Called by [`TokenTable::finish`] for a job that is about to park its own token (it
    /// finishes while lending), before the `fetch_or` that makes it visible as finished.
    ///
    /// Why this is the lender's own parked token and nobody else's: a finished lender with its
    /// loan out has parked its reference with the loan (see [`TokenTable::finish`]), and this job
    /// holds that loan: it has not returned it (it is still finishing). No other job can be
    /// waiting for the lender's token (a job's spawns are admitted and settled before its body
    /// returns), and a lender's loan reaches no one but its holder. So the holder is the only
    /// thread that will ever touch the finished lender again, exactly as when it returns the loan
    /// and finds the lender finished (`give_back`); taking over before parking is the same step
    /// done sooner, and moves nothing between threads. A spawn-first chain (each link spawns the
    /// next link, then returns) then keeps two finished links alive, not one per level.
    ///
    /// Done at the finish rather than at the job's start, though a start would free the lender
    /// sooner: code in a job's start is in the frame of every job a deep tree nests, where
    /// `finish` is a call of its own, made after the body returned.
    #[inline]
    fn take_over_parked(&self) {
        if self.lender_finished() {
            self.take_over_finished_lenders();
        }
    }

    /// Whether this job holds a loan whose lender has finished (its token is parked).
    #[inline]
    fn lender_finished(&self) -> bool {
        // Relaxed: this job's own admission, made before it was pushed for this thread to run,
        // or rewritten by this thread (`take_over_finished_lenders`). (Other threads may read it
        // through a stale pool-queue entry: a granter's CAS from `PENDING`, which fails, and
        // `purge_stale`; neither value they can see is `PENDING`.)
        if self.admission.load(Ordering::Relaxed) != LOAN {
            return false;
        }
        // SAFETY: the job holds its lender's loan, so the lender is alive ("Lifetimes").
        let lender = unsafe { &*self.parent_ptr() };
        // Acquire: pairs with the lender's `FINISHED` (AcqRel in `finish`): its admission and
        // parent, written before it finished, are seen by the take-over.
        lender.lending.load(Ordering::Acquire) & FINISHED != 0
    }

    /// The loop of [`Lender::take_over_parked`], out of line: it runs only where a lender
    /// finished before its loan's holder, which is rare outside chains.
    #[inline(never)]
    fn take_over_finished_lenders(&self) {
        while self.lender_finished() {
            // SAFETY: as in `lender_finished`.
            let lender = unsafe { &*self.parent_ptr() };
            chaos::point();
            // Relaxed: the lender's fields, ordered by the acquire in `lender_finished`; this
            // job's own, published by its own `FINISHED` (release) in `finish`.
            self.parent
                .store(lender.parent.load(Ordering::Relaxed), Ordering::Relaxed);
            self.admission
                .store(lender.admission.load(Ordering::Relaxed), Ordering::Relaxed);
            // SAFETY: the lender parked its runner's reference with the loan this job holds
            // (`finish`), and this job is the loan's only holder: the reference is ours.
            drop(unsafe { LenderRef::from_raw(lender) });
        }
    }

    /// Stores what a granter must make runnable. Boxed: only a spawn that registers as a waiter
    /// needs one, and keeping it out of line keeps every job's allocation small (a spawned job
    /// is freed on whichever thread ran it, and the allocator frees small blocks across threads
    /// without taking the allocating thread's lock).
    ///
    /// # Safety
    /// Only before the lender is passed to [`TokenTable::register`], by the thread that created it.
    pub unsafe fn set_ticket(&self, ticket: Ticket) {
        // SAFETY: the caller is the only thread that can reach the lender's ticket yet.
        unsafe { *self.ticket.get() = Some(Box::new(ticket)) }
    }

    /// Takes the ticket stored by [`Lender::set_ticket`].
    ///
    /// # Safety
    /// Only by the thread that admitted this lender (the winner of its admission).
    pub unsafe fn take_ticket(&self) -> Option<Ticket> {
        // SAFETY: the caller won the admission CAS, so no other thread touches the ticket.
        unsafe { (*self.ticket.get()).take() }.map(|ticket| *ticket)
    }

    /// Marks the job admitted as `how` if it is still pending. Exactly one caller wins.
    #[inline]
    fn grant(&self, how: u8) -> bool {
        // AcqRel: release publishes the grant to the waiting spawner; acquire sees its ticket.
        let won = self
            .admission
            .compare_exchange(PENDING, how, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        chaos::point();
        won
    }

    /// Marks a job that no other thread can see yet (not registered anywhere) admitted as `how`.
    #[inline]
    fn admit_unshared(&self, how: u8) {
        debug_assert_eq!(self.admission.load(Ordering::Relaxed), PENDING);
        // Release: the job's push to a deque publishes it anyway; no RMW needed, nobody races.
        self.admission.store(how, Ordering::Release);
    }

    /// Lends this job's token to a child if it is not lent already (rule 2).
    #[inline]
    pub fn try_lend(&self) -> bool {
        // Relaxed first read: the CAS below decides.
        let mut s = self.lending.load(Ordering::Relaxed);
        // A finished job lends no more: its token was released or is parked with a loan.
        while s & (LENT | FINISHED) == 0 {
            // AcqRel: pairs with the loan's return (release), which ends the previous loan.
            match self.lending.compare_exchange_weak(
                s,
                s | LENT,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    chaos::point();
                    return true;
                }
                Err(now) => s = now,
            }
        }
        false
    }

    /// Registers `child` as this job's waiting borrower, unless the token came back meanwhile
    /// (then the child takes it). Returns whether the child was admitted on loan.
    ///
    /// The job is running (its own thread is spawning `child`), so it has not finished, and no
    /// other child of it waits.
    fn register_borrower(&self, child: &LenderRef) -> bool {
        // The slot's reference is counted *before* the CAS publishes the child: from then on the
        // loan's returner may take the child out of the slot, admit it, and drop that reference.
        let counted = LenderRef::into_raw(child.clone()) as usize;
        // Relaxed first read: the CAS below decides.
        let mut s = self.lending.load(Ordering::Relaxed);
        loop {
            debug_assert_eq!(s & !LENT, 0, "a running job with one waiting child at most");
            let next = match s & LENT {
                0 => s | LENT,
                _ => s | counted,
            };
            // AcqRel: release publishes the child (and its ticket) to the loan's returner.
            match self
                .lending
                .compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        chaos::point();
        if s & LENT != 0 {
            return false; // registered: the slot owns `counted`
        }
        // SAFETY: `counted` came from `Arc::into_raw` above and was not published.
        drop(unsafe { LenderRef::from_raw(counted as *const Lender) });
        let won = child.grant(LOAN);
        debug_assert!(won, "an unregistered child is granted by nobody else");
        true
    }

    /// Removes `child` from this job's borrower slot if it is still there.
    fn withdraw_borrower(&self, child: &LenderRef) {
        let me = LenderRef::as_ptr(child) as usize;
        // Relaxed first read: the CAS below decides.
        let mut s = self.lending.load(Ordering::Relaxed);
        while s & !FLAGS == me {
            // Relaxed: nothing is published by withdrawing; the reference is ours to drop.
            match self.lending.compare_exchange_weak(
                s,
                s & FLAGS,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    chaos::point();
                    // SAFETY: the slot held the reference counted in `register_borrower`, and
                    // clearing it made this thread its only owner.
                    drop(unsafe { LenderRef::from_raw(me as *const Lender) });
                    return;
                }
                Err(now) => s = now,
            }
        }
    }
}

/// A counted reference to a [`Lender`], like `Arc<Lender>` but with the count in the lender
/// itself, so that a lender can live inside a spawned job's own allocation (one allocation per
/// spawn). The allocation is freed by the lender's `free` function when the last reference goes.
pub struct LenderRef {
    ptr: NonNull<Lender>,
}

// SAFETY: a `LenderRef` is a counted shared reference to a `Lender`, which is Send and Sync; the
// count is atomic and the last owner frees, as with `Arc`.
unsafe impl Send for LenderRef {}
// SAFETY: as above.
unsafe impl Sync for LenderRef {}

#[cfg(loom)]
std::thread_local! {
    /// Lenders alive in an allocation of their own, counted in loom builds only (per OS thread:
    /// loom runs a model's threads on the test's own thread, and tests run in parallel).
    static LIVE_LENDERS: Cell<isize> = const { Cell::new(0) };
}

/// The number of lenders alive in an allocation of their own made on this OS thread, in loom
/// builds: the models check at the end of every execution that it is back where it started (a
/// leaked reference: a parked token never released, a slot's reference never dropped).
#[cfg(loom)]
pub fn live_lenders() -> isize {
    LIVE_LENDERS.with(Cell::get)
}

/// Frees a lender made by [`LenderRef::new`].
///
/// # Safety
/// `lender` came from `Box::into_raw` in `LenderRef::new`, and no reference to it is left.
unsafe fn free_boxed(lender: *const Lender) {
    #[cfg(loom)]
    LIVE_LENDERS.with(|n| n.set(n.get() - 1));
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(lender as *mut Lender) });
}

impl LenderRef {
    /// The first reference to `lender`, in an allocation of its own.
    pub fn new(lender: Lender) -> Self {
        #[cfg(loom)]
        LIVE_LENDERS.with(|n| n.set(n.get() + 1));
        let ptr = Box::into_raw(Box::new(lender));
        // SAFETY: `Box::into_raw` never returns null.
        LenderRef {
            ptr: unsafe { NonNull::new_unchecked(ptr) },
        }
    }

    /// The address of the lender.
    #[inline]
    pub fn as_ptr(this: &Self) -> *const Lender {
        this.ptr.as_ptr()
    }

    /// Gives up the reference without dropping it; [`LenderRef::from_raw`] takes it back.
    #[inline]
    pub fn into_raw(this: Self) -> *const Lender {
        let ptr = this.ptr.as_ptr();
        std::mem::forget(this);
        ptr
    }

    /// Takes back a reference given up by [`LenderRef::into_raw`] (or the implicit first one of
    /// an embedded lender, [`Lender::embedded`]).
    ///
    /// # Safety
    /// `ptr` came from `into_raw` (or is such an embedded lender), and that reference is taken
    /// back once.
    #[inline]
    pub unsafe fn from_raw(ptr: *const Lender) -> Self {
        LenderRef {
            // SAFETY: `into_raw` returned a non-null pointer.
            ptr: unsafe { NonNull::new_unchecked(ptr as *mut Lender) },
        }
    }

    /// A new counted reference to the lender at `ptr`.
    ///
    /// # Safety
    /// `ptr` points to a lender that a counted reference keeps alive during the call.
    #[inline]
    pub unsafe fn clone_raw(ptr: *const Lender) -> Self {
        // SAFETY: the caller's contract.
        let borrowed = std::mem::ManuallyDrop::new(unsafe { LenderRef::from_raw(ptr) });
        LenderRef::clone(&borrowed)
    }

    /// The number of counted references now (for the loom models' checks).
    #[cfg(loom)]
    pub fn ref_count(this: &Self) -> usize {
        // Relaxed: a diagnostic.
        this.refs.load(Ordering::Relaxed)
    }
}

impl std::ops::Deref for LenderRef {
    type Target = Lender;

    #[inline]
    fn deref(&self) -> &Lender {
        // SAFETY: a counted reference keeps the lender alive.
        unsafe { self.ptr.as_ref() }
    }
}

impl Clone for LenderRef {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed: a new reference is made from an existing one, which keeps the lender alive;
        // as in `Arc::clone`, no ordering is needed to count it.
        self.refs.fetch_add(1, Ordering::Relaxed);
        LenderRef { ptr: self.ptr }
    }
}

impl Drop for LenderRef {
    #[inline]
    fn drop(&mut self) {
        // The only reference (nobody can make another without one): free without an RMW.
        // Acquire: the other references' drops (release) happen before the free.
        if self.refs.load(Ordering::Acquire) != 1 {
            // Release: this reference's uses happen before whoever frees.
            if self.refs.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            // Acquire: pairs with the other drops' release, as in `Arc::drop`.
            fence(Ordering::Acquire);
        }
        let free = self.free;
        // SAFETY: this was the last reference; `free` frees the lender's allocation once.
        unsafe { free(self.ptr.as_ptr()) }
    }
}

/// Checks, in debug builds, that no borrower is left registered (a release build would still
/// load the lending word for nothing at every job's free).
#[cfg(debug_assertions)]
impl Drop for Lender {
    fn drop(&mut self) {
        // Relaxed: `&mut self` means no other thread holds the lender.
        let borrower = self.lending.load(Ordering::Relaxed) & !FLAGS;
        debug_assert_eq!(borrower, 0, "a lender dropped with a borrower registered");
    }
}

/// The admission byte as an [`Admission`].
#[inline]
fn decode(admission: u8) -> Option<Admission> {
    match admission {
        LOAN => Some(Admission::Loan),
        POOL => Some(Admission::Pool),
        CREDIT => Some(Admission::Credit),
        _ => None,
    }
}

/// A place on one worker thread for one token, kept for a spawner of that thread that waits
/// for admission (in `Registry::admit`'s help-first loop). A job that the loop runs and that
/// finishes hands its token straight to the spawn: a pool token, when no other job waits in the
/// pool queue, instead of releasing it to the pool (where the spawner would take it back: a
/// shared RMW and a fence each way), and a loan
/// of the spawning job's own token instead of returning it (rule 3 passes it on anyway: a CAS
/// on the lending word each way). The token stays in use, and the loan stays `LENT`, the whole
/// time, so no other thread can miss or take it. The finished job's place in the in-flight count
/// usually goes with the token (`counted`): the spawned job takes it over, and neither touches the
/// shared counter. Plain cells: only the owning thread touches it.
pub struct Spare {
    /// The job whose spawn waits for a token; null when none does.
    for_job: Cell<*const Lender>,
    /// What is kept for it: `PENDING` (nothing), `LOAN` (its own token) or `POOL`.
    held: Cell<u8>,
    /// Whether the kept token came with its finished job's place in the in-flight count.
    counted: Cell<bool>,
}

impl Default for Spare {
    fn default() -> Self {
        Spare {
            for_job: Cell::new(ptr::null()),
            held: Cell::new(PENDING),
            counted: Cell::new(false),
        }
    }
}

impl Spare {
    /// From now on, keeps a token for a spawn of `job`. Returns the job it was kept for before
    /// (loops nest: the caller restores it with [`Spare::restore`]).
    #[inline]
    pub fn want(&self, job: *const Lender) -> *const Lender {
        debug_assert_eq!(self.held.get(), PENDING);
        self.for_job.replace(job)
    }

    /// Keeps tokens for `job` again (the value [`Spare::want`] returned), or for no job (null).
    #[inline]
    pub fn restore(&self, job: *const Lender) {
        debug_assert_eq!(self.held.get(), PENDING, "a kept token is used at once");
        self.for_job.set(job);
    }

    /// The job a token is kept for, if any.
    #[inline]
    pub fn for_job(&self) -> *const Lender {
        self.for_job.get()
    }

    /// Whether a token is kept now (the waiting spawn takes it as soon as the job that left it
    /// returns).
    #[inline]
    pub fn holds(&self) -> bool {
        self.held.get() != PENDING
    }

    /// Keeps the token of a finished job, admitted as `how` with parent `parent`, if it can go
    /// to the waiting spawn: any pool token, or a loan of the spawning job's own token; with the
    /// job's place in the in-flight count if `counted`.
    #[inline]
    fn keep(&self, how: u8, parent: *const Lender, counted: bool) -> bool {
        let fits = how == POOL || (how == LOAN && parent == self.for_job.get());
        if !fits || self.held.get() != PENDING {
            return false;
        }
        self.held.set(how);
        self.counted.set(counted);
        true
    }
}

/// The outcome of [`TokenTable::register`].
pub enum Registration {
    /// The job is admitted; the caller makes it runnable.
    Admitted,
    /// The job waits; whoever grants it a token makes it runnable. The registration's re-check
    /// may have granted a token to some waiter (this job or another): the caller makes that one
    /// runnable.
    Waiting(Option<LenderRef>),
}

/// A snapshot of a table's tokens, read in one load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenCount {
    /// Pool tokens taken and not yet returned (lent and parked ones count).
    pub pool: usize,
    /// Credit tokens in use: calls from jobs of other pools in progress.
    pub credit: usize,
}

/// The pool's `max_inflight` tokens, the credit tokens of calls from other pools, and the jobs
/// waiting for a pool token.
pub struct TokenTable {
    cap: usize,
    /// Free pool tokens (low half) and credit tokens in use (high half). On its own cache line:
    /// pool admissions and releases touch it.
    tokens: CachePadded<AtomicU64>,
    /// Highest number of tokens in use, pool and credit together, seen at an admission.
    peak_executing: AtomicUsize,
    /// Highest number of credit tokens in use seen at an admission.
    peak_credit: AtomicUsize,
    /// Jobs waiting for a pool token, oldest first; entries already admitted by a loan are stale
    /// and skipped.
    waiters: WaiterQueue<LenderRef>,
    /// Entries of `waiters` admitted by a loan since the last purge (see `settle`).
    stale: AtomicUsize,
}

/// The fewest stale pool-queue entries that trigger a purge (see `TokenTable::settle`). Tuned
/// on: a 100,000-level chain on one token (`benches/deep.rs`; a purge every 32 entries, without
/// the "as many stale as live" condition, made it quadratic).
const STALE_PURGE: usize = 32;

impl TokenTable {
    /// A table of `cap` tokens, all free. `cap` is in `1..=MAX_TOKENS`.
    pub fn new(cap: usize) -> Self {
        assert!(
            (1..=MAX_TOKENS).contains(&cap),
            "a token table has 1 to {MAX_TOKENS} tokens, not {cap}"
        );
        TokenTable {
            cap,
            tokens: CachePadded::new(AtomicU64::new(cap as u64)),
            peak_executing: AtomicUsize::new(0),
            peak_credit: AtomicUsize::new(0),
            waiters: WaiterQueue::new(),
            stale: AtomicUsize::new(0),
        }
    }

    /// The number of pool tokens.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The tokens in use now, pool and credit, read together.
    #[inline]
    pub fn count(&self) -> TokenCount {
        // Acquire: pairs with `admit_credit`'s release (a snapshot's counters, read after this,
        // count every half on credit it shows); both halves come from one load, so they belong
        // to one instant.
        self.decode(self.tokens.load(Ordering::Acquire))
    }

    /// The highest number of tokens in use at once, pool and credit together.
    pub fn peak_executing(&self) -> usize {
        // Acquire: pairs with `note_admission`'s release; read it before `peak_credit`.
        self.peak_executing.load(Ordering::Acquire)
    }

    /// The highest number of credit tokens in use at once.
    pub fn peak_credit(&self) -> usize {
        // Relaxed: a statistic.
        self.peak_credit.load(Ordering::Relaxed)
    }

    #[inline]
    fn decode(&self, word: u64) -> TokenCount {
        TokenCount {
            pool: self.cap - (word & FREE_MASK) as usize,
            credit: (word >> 32) as usize,
        }
    }

    /// Takes a free pool token, if any.
    #[inline]
    pub fn try_pool(&self) -> bool {
        // SeqCst: part of the register/re-check handshake with `release_pool` (see `register`).
        let mut word = self.tokens.load(Ordering::SeqCst);
        while word & FREE_MASK > 0 {
            match self.tokens.compare_exchange_weak(
                word,
                word - 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    chaos::point();
                    self.note_admission(word - 1);
                    return true;
                }
                Err(now) => word = now,
            }
        }
        false
    }

    /// Admits `child` now if a token is free without waiting: its parent's, else the pool's.
    /// `child` must not be registered as a waiter (no other thread may see it yet).
    #[inline]
    pub fn try_admit(&self, child: &Lender) -> Option<Admission> {
        if child.parent().is_some_and(Lender::try_lend) {
            child.admit_unshared(LOAN);
            return Some(Admission::Loan);
        }
        if self.try_pool() {
            child.admit_unshared(POOL);
            return Some(Admission::Pool);
        }
        None
    }

    /// Admits `job` on credit: a token that exists for as long as the job's chain and is none
    /// of the pool's. `job` is a root started by a call from a job of another pool (the
    /// caller's credit), or a join half below such a call (its parent's token is not touched:
    /// the credit goes back to no one). Never waits. `job` must not be registered as a waiter.
    pub fn admit_credit(&self, job: &Lender) {
        job.admit_unshared(CREDIT);
        // Release: what the admitter counted before (a half on credit's count in `Stats`) is
        // seen by a snapshot that sees this credit (`count`'s acquire); credits take part in no
        // handshake.
        let word = self.tokens.fetch_add(ONE_CREDIT, Ordering::Release) + ONE_CREDIT;
        self.note_admission(word);
    }

    /// Registers `child`, which [`TokenTable::try_admit`] could not admit, to wait for whichever
    /// token frees first: its parent's (rule 2) or the pool's. Its ticket must be set.
    pub fn register(&self, child: &LenderRef) -> Registration {
        if child.parent().is_some_and(|p| p.register_borrower(child)) {
            return Registration::Admitted;
        }
        self.waiters.push(child.clone());
        chaos::point();
        // SeqCst fence: either the re-check below sees a token that a releaser freed, or that
        // releaser's re-check sees this registration (see `count_free_and_recheck`).
        fence(Ordering::SeqCst);
        Registration::Waiting(self.pump())
    }

    /// Clears what `register` left behind once `child` is admitted: its entry in the parent's
    /// borrower slot if a pool token won, and, when a loan won, counts its entry in the pool
    /// queue as stale. Called by the spawner before it spawns again.
    ///
    /// Stale entries leave the queue only when popped, which needs a pool token to be released;
    /// a job that holds the only token and spawns in a loop would pile them up without bound.
    /// So once they are `STALE_PURGE` or more, and at least as many as the live entries, the
    /// queue is purged, which may admit a waiter: returned. A purge pops and pushes back every
    /// entry, so each stale entry pays for a constant share of it however many jobs wait (a
    /// deep tree at one token keeps a waiting spawn per level), and at most `max(STALE_PURGE,
    /// live waiters)` stale entries are kept.
    pub fn settle(&self, child: &LenderRef) -> Option<LenderRef> {
        if let Some(parent) = child.parent() {
            parent.withdraw_borrower(child);
        }
        if child.admission() != Some(Admission::Loan) {
            return None;
        }
        // Relaxed: a trigger for housekeeping; the purge itself is exact.
        let stale = self.stale.fetch_add(1, Ordering::Relaxed) + 1;
        if stale < STALE_PURGE || stale * 2 < self.waiters.len() {
            return None;
        }
        self.stale.store(0, Ordering::Relaxed);
        self.purge_stale()
    }

    /// Pops every entry of the pool queue, drops the stale ones and puts the live ones back,
    /// then re-checks for a free token as `register` does (a releaser may have found the queue
    /// empty meanwhile). Returns the waiter that re-check admitted, if any.
    fn purge_stale(&self) -> Option<LenderRef> {
        let mut live = Vec::new();
        while let Some(child) = self.waiters.pop() {
            if child.admission().is_none() {
                live.push(child);
            }
        }
        for child in live {
            self.waiters.push(child);
        }
        // SeqCst fence: as in `register`.
        fence(Ordering::SeqCst);
        self.pump()
    }

    /// The job's body returned: releases its token, unless it is lent out (then it stays parked
    /// until the loan returns, rule 4, and `job`'s reference goes with the loan). Returns the
    /// waiting job that received the token, if any.
    ///
    /// `spare`: where the calling thread may keep the token instead of releasing it, for a
    /// spawner of its own that waits for one (see [`Spare`]); `None` if none waits.
    ///
    /// `count_out`: takes the job out of the in-flight count. Called once, before the token can
    /// reach anyone else, unless the token is kept in `spare`: then the job's place in the count
    /// goes with its token to the spawn waiting there (see [`Spare`]).
    // Always inlined (its one caller, `Registry::finish_job`, is inlined into every job's run):
    // a call of its own cost every spawn of a chain or a spawn tree 8–10 instructions of
    // prologue (callgrind), and the finish runs after the job's body has returned, so the
    // frames that deep trees nest do not grow.
    #[inline(always)]
    pub fn finish(
        &self,
        job: LenderRef,
        spare: Option<&Spare>,
        count_out: impl FnOnce(),
    ) -> Option<LenderRef> {
        // Acquire: see the last loan's return (its release CAS) before the token moves on.
        if job.lending.load(Ordering::Acquire) & LENT == 0 {
            // Not lent, and never lent again: only the job's own spawns and its stolen join
            // halves borrow its token, and all of them are done once its body has returned.
            // So no other thread reads or writes its lending word any more, and `FINISHED`,
            // which only a loan's returner reads, need not be set: a leaf costs no RMW here.
            chaos::point();
            return self.give_back(job, spare, Some(count_out));
        }
        // Out of the count before the loan's returner can release the token.
        count_out();
        // About to park its token with the loan: first take over the tokens its own finished
        // lenders parked with the loan it holds, so that a chain keeps no more than this job.
        job.take_over_parked();
        // AcqRel: pairs with the loan's return (exactly one of the two releases the token), and
        // publishes the take-over to whoever takes this job's token over in turn.
        let was = job.lending.fetch_or(FINISHED, Ordering::AcqRel);
        debug_assert_eq!(
            was & !FLAGS,
            0,
            "a job finished with a child waiting for its loan"
        );
        if was & LENT != 0 {
            // Parked: from here on the loan's holder may free the lender at any moment, so it
            // is not touched again; the holder takes this reference over when it finishes
            // lending in turn (`take_over_parked`), or whoever sees the loan come back to a
            // finished lender does (`give_back`).
            let _ = LenderRef::into_raw(job);
            return None;
        }
        chaos::point();
        self.give_back(job, spare, None::<fn()>)
    }

    /// Passes the token of `job`, which holds it unlent and has finished, to where it came from,
    /// or into `spare` if it can go to the spawn waiting there. `count_out` is the job's place in
    /// the in-flight count if it still has one (see [`TokenTable::finish`]): called before the
    /// token can reach another job, or kept in `spare` with the token.
    fn give_back(
        &self,
        job: LenderRef,
        spare: Option<&Spare>,
        mut count_out: Option<impl FnOnce()>,
    ) -> Option<LenderRef> {
        let mut job = job;
        loop {
            if spare.is_some_and(|s| self.keep_in(s, &job, count_out.is_some())) {
                return None;
            }
            if let Some(count_out) = count_out.take() {
                count_out();
            }
            // Relaxed: the job's own admission, read by a thread that saw it run or finish.
            match job.admission.load(Ordering::Relaxed) {
                POOL => return self.release_pool(),
                CREDIT => {
                    self.release_credit();
                    return None;
                }
                _ => {}
            }
            let parent = job.parent_ptr();
            // SAFETY: the parent is alive: it lent this job its token and the loan is still out.
            match return_loan(unsafe { &*parent }) {
                LoanReturn::Passed(child) => return Some(child),
                LoanReturn::Kept => return None,
                // SAFETY: the parent finished while lending and left its reference with the
                // loan (see `finish`); the loan came back to this thread, so the reference is ours.
                LoanReturn::ParentFinished => job = unsafe { LenderRef::from_raw(parent) },
            }
        }
    }

    /// Keeps the token of `job` (finished, holding it unlent) in `spare` if it can go to the
    /// spawn waiting there, with a place in the in-flight count if `counted`. A pool token goes
    /// there only while no job waits in the queue, which is first in line for it (else a
    /// spawning loop could starve a waiting root or a queued spawn from another pool for as long
    /// as it runs). A loan of the spawner's own token is its children's anyway (rule 3).
    #[inline]
    fn keep_in(&self, spare: &Spare, job: &Lender, counted: bool) -> bool {
        // Relaxed: the job's own admission, read by a thread that saw it run or finish.
        let how = job.admission.load(Ordering::Relaxed);
        match how {
            POOL if !self.waiters.is_empty() => false,
            POOL | LOAN => spare.keep(how, job.parent_ptr(), counted),
            _ => false,
        }
    }

    /// Admits `child`, a child of [`Spare::for_job`] that no other thread can see yet, on the
    /// token kept in `spare`, if any. Returns how, and whether the token came with a place in
    /// the in-flight count (then `child` takes it over and is not counted in again).
    pub fn admit_spare(&self, child: &Lender, spare: &Spare) -> Option<(Admission, bool)> {
        let how = spare.held.replace(PENDING);
        let admission = decode(how)?;
        debug_assert_eq!(child.parent_ptr(), spare.for_job.get());
        child.admit_unshared(how);
        Some((admission, spare.counted.get()))
    }

    /// A credit token's chain has ended.
    fn release_credit(&self) {
        // Relaxed: counting only (a snapshot that misses it over-counts a credit).
        self.tokens.fetch_sub(ONE_CREDIT, Ordering::Relaxed);
    }

    /// A pool token comes back: straight to the first live waiter, else counted free.
    pub fn release_pool(&self) -> Option<LenderRef> {
        if let Some(child) = self.grant_first_waiter() {
            return Some(child);
        }
        self.count_free_and_recheck()
    }

    /// Counts a held pool token free, then looks at the queue again: a waiter that registered
    /// after this thread found the queue empty is either seen now, or sees the free token in
    /// its own re-check. The two sides are the classic store-fence-load handshake: the waiter
    /// pushes, fences (SeqCst) and loads the count; this side increments the count and fences
    /// (SeqCst) before it loads the queue. Whichever fence comes first in the single total order,
    /// the other side's load sees the first side's write. The queue's own loads need no
    /// particular ordering for this. If a waiter turns up, takes a free token back for it (as
    /// `pump` does).
    fn count_free_and_recheck(&self) -> Option<LenderRef> {
        loop {
            // SeqCst: part of the handshake described above (the fence does the ordering; the
            // increment is SeqCst like every other access to the free count in the handshake).
            self.tokens.fetch_add(1, Ordering::SeqCst);
            chaos::point();
            fence(Ordering::SeqCst);
            if self.waiters.is_empty() || !self.try_pool() {
                // Nobody waits, or another thread took the token: its holder passes it on.
                return None;
            }
            if let Some(child) = self.grant_first_waiter() {
                return Some(child);
            }
        }
    }

    /// While a token is free and someone waits, hands one over. Returns the job admitted.
    fn pump(&self) -> Option<LenderRef> {
        if !self.try_pool() {
            return None; // no free token: its holder will pump when it releases it
        }
        self.grant_first_waiter()
            .or_else(|| self.count_free_and_recheck())
    }

    /// Grants the held pool token to the oldest waiter still pending, skipping stale entries.
    #[inline]
    fn grant_first_waiter(&self) -> Option<LenderRef> {
        // `is_empty` first: a pop of an empty queue costs a fence.
        if self.waiters.is_empty() {
            return None;
        }
        while let Some(child) = self.waiters.pop() {
            if child.grant(POOL) {
                return Some(child);
            }
        }
        None
    }

    /// Raises the peaks to the token counts of `word`, the value an admission just wrote.
    #[inline]
    fn note_admission(&self, word: u64) {
        let now = self.decode(word);
        // The credit peak first, and the executing peak with release: a snapshot that reads the
        // executing peak (acquire) then sees a credit peak at least as high as the credits
        // counted in it, so `peak_executing <= cap + peak_calls_in` holds in every snapshot.
        if now.credit > 0 {
            raise(&self.peak_credit, now.credit, Ordering::Relaxed);
        }
        raise(
            &self.peak_executing,
            now.pool + now.credit,
            Ordering::Release,
        );
    }
}

/// Raises `peak` to `value` with ordering `order`; reads first so the common case writes
/// nothing (a peak already at `value` was raised by a write that published as much).
#[inline]
fn raise(peak: &AtomicUsize, value: usize, order: Ordering) {
    // Relaxed read: fetch_max below keeps the peak exact.
    if value > peak.load(Ordering::Relaxed) {
        peak.fetch_max(value, order);
    }
}

/// What became of a loan that came back to its lender.
enum LoanReturn {
    /// Passed straight to the lender's waiting child (rule 3).
    Passed(LenderRef),
    /// Back with the lender, which is still running.
    Kept,
    /// The lender had finished: its parked token moves on (rule 4).
    ParentFinished,
}

/// The child on `parent`'s loan gave it back.
fn return_loan(parent: &Lender) -> LoanReturn {
    // Acquire: see a borrower registered with release.
    let mut s = parent.lending.load(Ordering::Acquire);
    loop {
        let borrower = (s & !FLAGS) as *const Lender;
        if !borrower.is_null() {
            // A job with a waiting child is running (it spawns it), so it has not finished.
            debug_assert_eq!(s & FINISHED, 0);
            // Take the borrower out of the slot; the loan stays `LENT`, now to it.
            // AcqRel: acquire the borrower's ticket; release nothing new.
            match parent.lending.compare_exchange_weak(
                s,
                s & FLAGS,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    chaos::point();
                    // SAFETY: the slot owned one reference (see `register_borrower`), and the
                    // CAS above moved it to this thread.
                    let child = unsafe { LenderRef::from_raw(borrower) };
                    if child.grant(LOAN) {
                        return LoanReturn::Passed(child);
                    }
                    // Stale: a pool token admitted it first. Look again (the loan is still out,
                    // so the parent is still alive).
                    s = parent.lending.load(Ordering::Acquire);
                }
                Err(now) => s = now,
            }
        } else {
            // AcqRel: release ends the loan for the next `try_lend`; acquire sees `FINISHED`.
            match parent.lending.compare_exchange_weak(
                s,
                s & !LENT,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // Once the loan is back a running parent may finish and be freed at once: it
                // is not touched after this CAS.
                Ok(_) if s & FINISHED != 0 => return LoanReturn::ParentFinished,
                Ok(_) => return LoanReturn::Kept,
                Err(now) => s = now,
            }
        }
    }
}
