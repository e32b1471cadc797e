//! The lending token table: admission of every job, lock-free.
//!
//! This module owns the `max_inflight` tokens and the rules that move them (the design brief's
//! lending rules 1–6). It decides *who may start*; it never runs, pushes or wakes anything: an
//! operation that grants a token to a waiting job returns that job's [`Lender`], and the caller
//! (the registry) makes it runnable. That keeps this module free of the scheduler, so the loom
//! models in `tests/loom_tokens.rs` drive it directly.
//!
//! # State
//!
//! * [`TokenTable::free`]: the count of pool tokens nobody holds.
//! * [`TokenTable::waiters`]: a lock-free FIFO of jobs waiting for a pool token.
//! * Per job, a [`Lender`] with one atomic *lending word*: the `LENT` bit (its token is out on
//!   loan to a child), the `FINISHED` bit (its body has returned), the `OVERFLOW` bit (a child
//!   has waited in its overflow queue: only calls crossing pools do that), and the address of the one
//!   child waiting to borrow it (a job spawns from its own thread and each spawn waits for its
//!   admission, so a job has at most one child waiting at a time; when calls from other pools
//!   make a second one, it waits in the job's overflow queue and the pool queue). A second atomic,
//!   `admission`, is the job's own state as a waiter: `PENDING`, then `LOAN` or `POOL`, set by a
//!   single compare-and-swap, so exactly one granter wins and a stale queue entry is skipped.
//!
//! # Transitions, and the invariant each keeps
//!
//! Every token in use is held by a *chain*: the job that took it from the pool, the child it lent
//! it to, that child's child, and so on. Exactly one job on a chain holds it unlent (B1), and a
//! chain has at most one job per level (B2).
//!
//! | transition | code | keeps |
//! |---|---|---|
//! | child borrows its parent's unlent token | [`Lender::try_lend`] | the chain grows by one level, one job per level (B2); the parent stops executing as the child starts (B1) |
//! | child takes a free pool token | [`TokenTable::try_pool`] | a new chain; `free` never goes below zero (B1) |
//! | child registers with its parent and the pool queue, then re-checks | [`TokenTable::register`] | no lost wake-up: either the re-check sees the freed token or the releaser's re-check sees the registration (the waiter fences; the releaser's SeqCst increment and SeqCst queue load pair with it) |
//! | a loan returns to a running parent with a waiting child | `return_loan`, from [`TokenTable::finish`] | the loan passes straight on, the chain keeps its length (B1, B2; rule 3) |
//! | a job finishes while lending | [`TokenTable::finish`] | the token stays *parked* on the chain until the loan returns (rule 4); it is released exactly once, by whichever of `finish` and the loan's return comes second |
//! | a pool token is released | [`TokenTable::release_pool`] | handed straight to the first live waiter, or counted free and the queue re-checked (no lost wake-up) |
//!
//! # Lifetimes
//!
//! Every `Lender` lives in an `Arc`: the job's runner holds one reference, and so do the queues
//! and slots a waiting job is registered in. A child refers to its parent by address only, so a
//! spawn costs no reference-count traffic on the parent. The parent is alive whenever a child
//! uses that address:
//! * while the child is being admitted or settled, the parent is running: the spawning thread
//!   runs in it (or, across pools, is blocked in a call made from it, and the `outer` chain,
//!   which is counted, holds it);
//! * while the child holds the parent's loan, the parent cannot be freed: if it finishes while
//!   lending, [`TokenTable::finish`] leaves its reference with the loan (parked), and whoever
//!   sees the loan come back to a finished parent takes that reference over and drops it once
//!   the token has moved on (`give_back`, `pump_loan`);
//! * once the loan is back the child does not touch the parent again, except to look at its
//!   overflow queue, for which it took a counted reference while the loan was still out.
//!
//! Deadlock freedom (B3) follows: a job waits only for its descendants or for a child's
//! admission, and it waits for admission only while its token is lent to a descendant, which
//! can proceed. `docs/design.md` writes the proof out.

use std::cell::UnsafeCell;
use std::mem::ManuallyDrop;
use std::ptr;

use crossbeam_utils::CachePadded;

use crate::job::Ticket;
use crate::sync::{fence, Arc, AtomicPtr, AtomicU8, AtomicUsize, Ordering, WaiterQueue};

/// The lending word's bit: the token is out on loan to a child.
const LENT: usize = 0b01;
/// The lending word's bit: the job's body has returned.
const FINISHED: usize = 0b10;
/// The lending word's bit: a child has waited in the overflow queue (set once, never cleared).
/// Setting it is how such a child tells `finish` and the loan's returner to look there, so the
/// common paths never touch the queue or fence for it.
const OVERFLOW: usize = 0b100;
/// The lending word's flag bits; the rest is the address of the waiting borrower.
const FLAGS: usize = LENT | FINISHED | OVERFLOW;

/// `Lender::admission`: waiting for a token.
const PENDING: u8 = 0;
/// `Lender::admission`: admitted on the parent's token.
const LOAN: u8 = 1;
/// `Lender::admission`: admitted on a pool token.
const POOL: u8 = 2;

/// How a job was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// On a loan of its parent's token.
    Loan,
    /// On a token from the pool.
    Pool,
}

/// The admission state of one job, and its token's lending state once admitted.
///
/// Shared (in an `Arc`) by the job, by its children that borrow its token, and by the queues
/// while it waits. Aligned so that the low bits of its address are free for the lending word.
#[repr(align(8))]
pub struct Lender {
    /// The lending word: borrower address | `LENT` | `FINISHED` | `OVERFLOW`.
    lending: AtomicUsize,
    /// `PENDING`, `LOAN` or `POOL`; leaves `PENDING` by one compare-and-swap.
    admission: AtomicU8,
    /// Further children waiting to borrow while the slot in `lending` is taken; allocated on
    /// first use. Only calls that cross pools make more than one child wait on a job at once.
    overflow: AtomicPtr<WaiterQueue<Arc<Lender>>>,
    /// The job that spawned this one (across pools: its nearest ancestor in this pool), the
    /// lender of its loan; null for a root. Not counted: see "Lifetimes" in the module doc for
    /// why it is alive whenever it is used, which keeps reference counting off the spawn path.
    parent: *const Lender,
    /// The nearest job of another pool above this one (the job whose call into this pool
    /// started this job's tree), counted, so that calls crossing pools find their ancestors.
    outer: Option<Arc<Lender>>,
    /// Root = 1, child = parent + 1.
    level: usize,
    /// The id of the pool whose table admits this job.
    pool: usize,
    /// What the granter makes runnable: written before the job is registered as a waiter, taken
    /// by the one thread whose compare-and-swap admitted it.
    ticket: UnsafeCell<Option<Ticket>>,
}

// SAFETY: every field but `ticket` and `parent` is Sync. `ticket` is written only by the
// spawning thread before the lender is shared as a waiter, and read only by the single thread
// that wins the `admission` compare-and-swap; the queue push / CAS that publish the lender
// order the two. `parent` is immutable and points to a `Lender`, which is Sync.
unsafe impl Sync for Lender {}
// SAFETY: as above; the ticket's contents are Send.
unsafe impl Send for Lender {}

impl Lender {
    /// The state of a job that is not yet admitted: a child of `parent` in `pool`, or a root when
    /// `parent` is `None`. `outer`: the nearest job of another pool above it, if any.
    ///
    /// `parent` must stay alive as described in the module doc ("Lifetimes").
    pub fn new(pool: usize, parent: Option<&Lender>, outer: Option<Arc<Lender>>) -> Self {
        Lender {
            lending: AtomicUsize::new(0),
            admission: AtomicU8::new(PENDING),
            overflow: AtomicPtr::new(ptr::null_mut()),
            level: parent.map_or(1, |p| p.level + 1),
            parent: parent.map_or(ptr::null(), |p| p as *const Lender),
            outer,
            pool,
            ticket: UnsafeCell::new(None),
        }
    }

    /// The job's level: root = 1.
    #[inline]
    pub fn level(&self) -> usize {
        self.level
    }

    /// The pool this job belongs to.
    #[inline]
    pub fn pool(&self) -> usize {
        self.pool
    }

    /// How the job was admitted, or `None` while it waits.
    #[inline]
    pub fn admission(&self) -> Option<Admission> {
        // Acquire: pairs with the granter's AcqRel CAS, so the caller sees what the grant published.
        match self.admission.load(Ordering::Acquire) {
            LOAN => Some(Admission::Loan),
            POOL => Some(Admission::Pool),
            _ => None,
        }
    }

    /// The job's parent, if it has one.
    #[inline]
    fn parent(&self) -> Option<&Lender> {
        // SAFETY: the parent is alive whenever a child uses it (module doc, "Lifetimes").
        unsafe { self.parent.as_ref() }
    }

    /// The nearest job of another pool above this one.
    #[inline]
    pub fn outer(&self) -> Option<&Arc<Lender>> {
        self.outer.as_ref()
    }

    /// The nearest ancestor, across pools, that belongs to `pool` (another pool than this
    /// job's): the first job of `pool` on the chain of `outer` links, each of which is counted,
    /// so the result lives as long as this job.
    pub fn ancestor_in(&self, pool: usize) -> Option<&Lender> {
        let mut cur = self.outer.as_deref()?;
        while cur.pool != pool {
            cur = cur.outer.as_deref()?;
        }
        Some(cur)
    }

    /// Stores what a granter must make runnable.
    ///
    /// # Safety
    /// Only before the lender is passed to [`TokenTable::register`], by the thread that created it.
    pub unsafe fn set_ticket(&self, ticket: Ticket) {
        // SAFETY: the caller is the only thread that can reach the lender's ticket yet.
        unsafe { *self.ticket.get() = Some(ticket) }
    }

    /// Takes the ticket stored by [`Lender::set_ticket`].
    ///
    /// # Safety
    /// Only by the thread that admitted this lender (the winner of its admission).
    pub unsafe fn take_ticket(&self) -> Option<Ticket> {
        // SAFETY: the caller won the admission CAS, so no other thread touches the ticket.
        unsafe { (*self.ticket.get()).take() }
    }

    /// Marks the job admitted as `how` if it is still pending. Exactly one caller wins.
    #[inline]
    fn grant(&self, how: u8) -> bool {
        // AcqRel: release publishes the grant to the waiting spawner; acquire sees its ticket.
        self.admission
            .compare_exchange(PENDING, how, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
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
        // A finished job lends no more: its token was released or is parked with a loan. (Only
        // a call crossing pools from a detached descendant can reach a finished job here.)
        while s & (LENT | FINISHED) == 0 {
            // AcqRel: pairs with the loan's return (release), which ends the previous loan.
            match self.lending.compare_exchange_weak(
                s,
                s | LENT,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    /// Registers `child` as this job's waiting borrower, unless the token came back meanwhile
    /// (then the child takes it) or another child waits for it already.
    fn register_borrower(&self, child: &Arc<Lender>) -> Borrow {
        let me = Arc::as_ptr(child) as usize;
        // Relaxed first read: the CAS below decides.
        let mut s = self.lending.load(Ordering::Relaxed);
        loop {
            let next = if s & FINISHED != 0 {
                return Borrow::Finished;
            } else if s & LENT == 0 {
                s | LENT
            } else if s & !FLAGS == 0 {
                s | me
            } else {
                // Another child waits (calls from several jobs of other pools that descend from
                // this one): this one waits for a pool token only.
                return Borrow::Busy;
            };
            // AcqRel: release publishes the child (and its ticket) to the loan's returner.
            match self
                .lending
                .compare_exchange_weak(s, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if s & LENT == 0 => {
                    let won = child.grant(LOAN);
                    debug_assert!(won, "an unregistered child is granted by nobody else");
                    return Borrow::Lent;
                }
                Ok(_) => {
                    crate::chaos::point();
                    // The lending word now owns one reference to the child.
                    std::mem::forget(child.clone());
                    return Borrow::Registered;
                }
                Err(now) => s = now,
            }
        }
    }

    /// Removes `child` from this job's borrower slot if it is still there.
    fn withdraw_borrower(&self, child: &Arc<Lender>) {
        self.withdraw_borrower_at(Arc::as_ptr(child) as usize);
    }

    /// Removes the borrower at address `me` from this job's slot if it is still there.
    fn withdraw_borrower_at(&self, me: usize) {
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
                    // SAFETY: the slot held the reference forgotten in `register_borrower`, and
                    // clearing it made this thread its only owner.
                    drop(unsafe { Arc::from_raw(me as *const Lender) });
                    return;
                }
                Err(now) => s = now,
            }
        }
    }
}

impl Lender {
    /// The overflow queue, allocated on first use.
    fn overflow_queue(&self) -> &WaiterQueue<Arc<Lender>> {
        // Acquire: see the queue a racing installer published.
        let mut queue = self.overflow.load(Ordering::Acquire);
        if queue.is_null() {
            let fresh = Box::into_raw(Box::new(WaiterQueue::new()));
            // AcqRel: publish ours, or acquire the one that won.
            queue = match self.overflow.compare_exchange(
                ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => fresh,
                Err(installed) => {
                    // SAFETY: `fresh` was never published.
                    drop(unsafe { Box::from_raw(fresh) });
                    installed
                }
            };
        }
        // SAFETY: once installed, the queue lives as long as the lender.
        unsafe { &*queue }
    }

    /// Grants the loan (held by the caller) to the oldest live child in the overflow queue.
    fn grant_overflow(&self) -> Option<Arc<Lender>> {
        // Acquire: see a queue installed by a registering child.
        let queue = self.overflow.load(Ordering::Acquire);
        if queue.is_null() {
            return None;
        }
        // SAFETY: an installed queue lives as long as the lender.
        let queue = unsafe { &*queue };
        while let Some(child) = queue.pop() {
            if child.grant(LOAN) {
                return Some(child);
            }
        }
        None
    }

    /// Sets `OVERFLOW` after an entry was pushed to the overflow queue, unless the job has
    /// finished. The release publishes the entry to whoever reads the bit with acquire: `finish`
    /// (which then drains the queue) and the loan's returner (which then looks there).
    fn announce_overflow(&self) -> bool {
        // Relaxed first read: the CAS below decides.
        let mut s = self.lending.load(Ordering::Relaxed);
        loop {
            if s & FINISHED != 0 {
                return false;
            }
            // AcqRel: release the pushed entry (see above); acquire the current state.
            match self.lending.compare_exchange_weak(
                s,
                s | OVERFLOW,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Whether a child may wait in the overflow queue.
    fn overflow_waiting(&self) -> bool {
        // Acquire: as in `grant_overflow`.
        let queue = self.overflow.load(Ordering::Acquire);
        // SAFETY: as in `grant_overflow`.
        !queue.is_null() && !unsafe { &*queue }.is_empty()
    }

    /// Empties the overflow queue (its children fall back to the pool queue, rule 4), so that
    /// no child keeps its finished parent alive through it.
    fn drain_overflow(&self) {
        // Acquire: as in `grant_overflow`.
        let queue = self.overflow.load(Ordering::Acquire);
        if !queue.is_null() {
            // SAFETY: as in `grant_overflow`.
            while unsafe { &*queue }.pop().is_some() {}
        }
    }
}

impl Drop for Lender {
    fn drop(&mut self) {
        // Relaxed: `&mut self` means no other thread holds the lender.
        let borrower = self.lending.load(Ordering::Relaxed) & !FLAGS;
        debug_assert_eq!(borrower, 0, "a lender dropped with a borrower registered");
        // Relaxed: as above.
        let overflow = self.overflow.load(Ordering::Relaxed);
        if !overflow.is_null() {
            // SAFETY: installed by `overflow_queue` from `Box::into_raw`, freed only here.
            drop(unsafe { Box::from_raw(overflow) });
        }
    }
}

/// The outcome of [`Lender::register_borrower`].
#[derive(PartialEq, Eq)]
enum Borrow {
    /// The token was free after all: the child is admitted on loan.
    Lent,
    /// The child waits in the lender's borrower slot.
    Registered,
    /// Another child holds the slot.
    Busy,
    /// The job has finished: the child waits for a pool token only (rule 4).
    Finished,
}

/// The outcome of [`TokenTable::register`].
pub enum Registration {
    /// The job is admitted; the caller makes it runnable.
    Admitted,
    /// The job waits; whoever grants it a token makes it runnable. The registration's re-check
    /// may have granted a token to some waiter (this job or another): the caller makes that one
    /// runnable.
    Waiting(Option<Arc<Lender>>),
}

/// The pool's `max_inflight` tokens, and the jobs waiting for one.
pub struct TokenTable {
    cap: usize,
    /// Pool tokens nobody holds. On its own cache line: pool admissions and releases touch it.
    free: CachePadded<AtomicUsize>,
    /// Highest `cap - free` seen at an admission.
    peak_in_use: AtomicUsize,
    /// Jobs waiting for a pool token, oldest first; entries already admitted by a loan are stale
    /// and skipped.
    waiters: WaiterQueue<Arc<Lender>>,
    /// Entries of `waiters` admitted by a loan since the last purge (see `settle`).
    stale: AtomicUsize,
}

/// How many stale pool-queue entries trigger a purge: bounds the memory they hold.
const STALE_PURGE: usize = 32;

impl TokenTable {
    /// A table of `cap` tokens, all free.
    pub fn new(cap: usize) -> Self {
        assert!(cap > 0, "a token table needs at least one token");
        TokenTable {
            cap,
            free: CachePadded::new(AtomicUsize::new(cap)),
            peak_in_use: AtomicUsize::new(0),
            waiters: WaiterQueue::new(),
            stale: AtomicUsize::new(0),
        }
    }

    /// The number of tokens.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Tokens taken from the pool and not yet returned.
    #[inline]
    pub fn in_use(&self) -> usize {
        // Relaxed: a statistic; the count itself is exact.
        self.cap - self.free.load(Ordering::Relaxed)
    }

    /// The highest [`TokenTable::in_use`] seen at an admission.
    pub fn peak_in_use(&self) -> usize {
        // Relaxed: a statistic.
        self.peak_in_use.load(Ordering::Relaxed)
    }

    /// Takes a free pool token, if any.
    #[inline]
    pub fn try_pool(&self) -> bool {
        // SeqCst: part of the register/re-check handshake with `release_pool` (see `register`).
        let mut free = self.free.load(Ordering::SeqCst);
        while free > 0 {
            match self.free.compare_exchange_weak(
                free,
                free - 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => free = now,
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
            self.note_pool_admission();
            return Some(Admission::Pool);
        }
        None
    }

    /// Registers `child`, which [`TokenTable::try_admit`] could not admit, to wait for whichever
    /// token frees first: its parent's (rule 2) or the pool's. Its ticket must be set.
    pub fn register(&self, child: &Arc<Lender>) -> Registration {
        let mut busy_parent = None;
        if let Some(parent) = child.parent() {
            match parent.register_borrower(child) {
                Borrow::Lent => return Registration::Admitted,
                Borrow::Registered | Borrow::Finished => {}
                Borrow::Busy => {
                    parent.overflow_queue().push(child.clone());
                    if !parent.announce_overflow() {
                        // The parent finished first, so its `finish` did not drain this entry:
                        // drain it here, or it keeps the parent alive through a cycle.
                        parent.drain_overflow();
                    }
                    busy_parent = Some(parent);
                }
            }
        }
        self.waiters.push(child.clone());
        // SeqCst fence: either the re-checks below see a token that a releaser freed, or that
        // releaser's re-check sees this registration (see `count_free_and_recheck`).
        fence(Ordering::SeqCst);
        let granted = busy_parent.and_then(|parent| self.pump_loan(parent));
        Registration::Waiting(granted.or_else(|| self.pump()))
    }

    /// Clears what `register` left behind once `child` is admitted: its entry in the parent's
    /// borrower slot if a pool token won, and, when a loan won, counts its entry in the pool
    /// queue as stale. Called by the spawner before it spawns again.
    ///
    /// Stale entries leave the queue only when popped, which needs a pool token to be released;
    /// a job that holds the only token and spawns in a loop would pile them up without bound.
    /// So every `STALE_PURGE` of them the queue is purged, which may admit a waiter: returned.
    pub fn settle(&self, child: &Arc<Lender>) -> Option<Arc<Lender>> {
        if let Some(parent) = child.parent() {
            parent.withdraw_borrower(child);
        }
        if child.admission() != Some(Admission::Loan) {
            return None;
        }
        // Relaxed: a trigger for housekeeping; the purge itself is exact.
        if self.stale.fetch_add(1, Ordering::Relaxed) + 1 < STALE_PURGE {
            return None;
        }
        self.stale.store(0, Ordering::Relaxed);
        self.purge_stale()
    }

    /// Pops every entry of the pool queue, drops the stale ones and puts the live ones back,
    /// then re-checks for a free token as `register` does (a releaser may have found the queue
    /// empty meanwhile). Returns the waiter that re-check admitted, if any.
    fn purge_stale(&self) -> Option<Arc<Lender>> {
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
    pub fn finish(&self, job: Arc<Lender>) -> Option<Arc<Lender>> {
        // AcqRel: pairs with the loan's return (exactly one of the two releases the token), and
        // acquires the entries announced by `OVERFLOW`.
        let was = job.lending.fetch_or(FINISHED, Ordering::AcqRel);
        crate::chaos::point();
        // Children still waiting for this job's loan fall back to the pool queue, where they
        // are registered too (rule 4); only calls from other pools can leave one here.
        if was & !FLAGS != 0 {
            job.withdraw_borrower_at(was & !FLAGS);
        }
        if was & OVERFLOW != 0 {
            job.drain_overflow();
        }
        if was & LENT != 0 {
            // Parked: the loan keeps the lender alive; whoever sees it come back to a finished
            // lender takes this reference over (`give_back`, `pump_loan`).
            let _ = Arc::into_raw(job);
            return None;
        }
        self.give_back(job)
    }

    /// Passes the token of `job`, which holds it unlent and has finished, to where it came from.
    fn give_back(&self, job: Arc<Lender>) -> Option<Arc<Lender>> {
        let mut job = job;
        loop {
            // Relaxed: the job's own admission, read by a thread that saw it run or finish.
            if job.admission.load(Ordering::Relaxed) != LOAN {
                return self.release_pool();
            }
            let parent = job.parent;
            // SAFETY: the parent is alive: it lent this job its token and the loan is still out.
            match return_loan(unsafe { &*parent }) {
                LoanReturn::Passed(child) => return Some(child),
                // A child that announced itself in the overflow queue before the loan came back
                // is seen here (the CAS acquired its `OVERFLOW`); one that announces later
                // finds the token free and takes it in `pump_loan`.
                LoanReturn::Kept { overflow } => {
                    return overflow.and_then(|parent| match parent.overflow_waiting() {
                        true => self.pump_loan(&parent),
                        false => None,
                    });
                }
                // SAFETY: the parent finished while lending and left its reference with the
                // loan (see `finish`); the loan came back to this thread, so the reference is ours.
                LoanReturn::ParentFinished => job = unsafe { Arc::from_raw(parent) },
            }
        }
    }

    /// After a child registered in `parent`'s overflow queue, or a loan came back with one
    /// there: while the token is free and a child waits, hands the loan over. Returns the child
    /// admitted.
    fn pump_loan(&self, parent: &Lender) -> Option<Arc<Lender>> {
        loop {
            if !parent.try_lend() {
                return None; // lent (its return passes it on) or finished (rule 4)
            }
            match return_loan(parent) {
                LoanReturn::Passed(child) => return Some(child),
                // `return_loan` cleared the loan; look once more, as in `give_back`. (The
                // caller keeps `parent` alive; the reference `Kept` carries is not needed.)
                LoanReturn::Kept { overflow: Some(_) } if parent.overflow_waiting() => {}
                LoanReturn::Kept { .. } => return None,
                // The parent finished while this thread held its token: the token was parked
                // with this loan, so it moves on from here, with the reference `finish` left.
                // SAFETY: as in `give_back`.
                LoanReturn::ParentFinished => {
                    return self.give_back(unsafe { Arc::from_raw(parent as *const Lender) })
                }
            }
        }
    }

    /// A pool token comes back: straight to the first live waiter, else counted free.
    pub fn release_pool(&self) -> Option<Arc<Lender>> {
        if let Some(child) = self.grant_first_waiter() {
            return Some(child);
        }
        self.count_free_and_recheck()
    }

    /// Counts a held pool token free, then looks at the queue again: a waiter that registered
    /// after this thread found the queue empty is either seen now, or sees the free token in
    /// its own re-check. No fence is needed on this side: the increment is a SeqCst RMW and
    /// crossbeam's `Injector::is_empty` loads with SeqCst, which pairs with the waiter's SeqCst
    /// fence between its push and its load of `free` (C++ [atomics.order]: an SC load ordered
    /// after the fence in the single total order sees the push; one ordered before it puts this
    /// increment before the fence too, and the waiter's load then sees it).
    /// If a waiter turns up, takes a free token back for it (as `pump` does).
    fn count_free_and_recheck(&self) -> Option<Arc<Lender>> {
        loop {
            // SeqCst: the releaser's half of the handshake described above.
            self.free.fetch_add(1, Ordering::SeqCst);
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
    fn pump(&self) -> Option<Arc<Lender>> {
        if !self.try_pool() {
            return None; // no free token: its holder will pump when it releases it
        }
        self.grant_first_waiter()
            .or_else(|| self.count_free_and_recheck())
    }

    /// Grants the held pool token to the oldest waiter still pending, skipping stale entries.
    #[inline]
    fn grant_first_waiter(&self) -> Option<Arc<Lender>> {
        // `is_empty` first: a pop of an empty queue costs a fence.
        if self.waiters.is_empty() {
            return None;
        }
        while let Some(child) = self.waiters.pop() {
            if child.grant(POOL) {
                self.note_pool_admission();
                return Some(child);
            }
        }
        None
    }

    #[inline]
    fn note_pool_admission(&self) {
        let in_use = self.in_use();
        // Relaxed: a statistic; read first so the common case writes nothing.
        if in_use > self.peak_in_use.load(Ordering::Relaxed) {
            self.peak_in_use.fetch_max(in_use, Ordering::Relaxed);
        }
    }
}

/// What became of a loan that came back to its lender.
enum LoanReturn {
    /// Passed straight to the lender's waiting child (rule 3).
    Passed(Arc<Lender>),
    /// Back with the lender, which is still running.
    Kept {
        /// When a child ever waited in the lender's overflow queue: a reference to the lender,
        /// taken while the loan still kept it alive, to look there after the loan is back.
        overflow: Option<Arc<Lender>>,
    },
    /// The lender had finished: its parked token moves on (rule 4).
    ParentFinished,
}

/// The child on `parent`'s loan gave it back.
fn return_loan(parent: &Lender) -> LoanReturn {
    // Acquire: see a borrower registered with release.
    let mut s = parent.lending.load(Ordering::Acquire);
    loop {
        let borrower = (s & !FLAGS) as *const Lender;
        // A finished lender passes nothing on: its waiting child falls back to the pool, and
        // its `finish` removes it from the slot (rule 4).
        if !borrower.is_null() && s & FINISHED == 0 {
            // Take the borrower out of the slot; the loan stays `LENT`, now to it.
            // AcqRel: acquire the borrower's ticket; release nothing new.
            match parent.lending.compare_exchange_weak(
                s,
                s & FLAGS,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    crate::chaos::point();
                    // SAFETY: the slot owned one reference (see `register_borrower`), and the
                    // CAS above moved it to this thread.
                    let child = unsafe { Arc::from_raw(borrower) };
                    if child.grant(LOAN) {
                        return LoanReturn::Passed(child);
                    }
                    // Stale: a pool token admitted it first. Look again.
                    s = parent.lending.load(Ordering::Acquire);
                }
                Err(now) => s = now,
            }
        } else if let Some(child) = (s & (FINISHED | OVERFLOW) == OVERFLOW)
            .then(|| parent.grant_overflow())
            .flatten()
        {
            return LoanReturn::Passed(child);
        } else {
            // While the loan is out the lender is alive; once it is back it may finish and be
            // freed. So take a reference now if its overflow queue is to be looked at after.
            // SAFETY: every lender lives in an `Arc`, kept alive here by the loan.
            let keep = (s & (FINISHED | OVERFLOW) == OVERFLOW).then(|| unsafe { counted(parent) });
            // AcqRel: release ends the loan for the next `try_lend`; acquire sees `FINISHED` and
            // the entries announced by `OVERFLOW`.
            match parent.lending.compare_exchange_weak(
                s,
                s & !LENT,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) if s & FINISHED != 0 => return LoanReturn::ParentFinished,
                Ok(_) => return LoanReturn::Kept { overflow: keep },
                Err(now) => s = now,
            }
        }
    }
}

/// A new counted reference to `lender`.
///
/// # Safety
/// `lender` must live in an `Arc` (every `Lender` is made with `Arc::new`) that is kept alive
/// during the call.
pub unsafe fn counted(lender: &Lender) -> Arc<Lender> {
    // SAFETY: the pointer came from an `Arc` that is alive (caller's contract); `ManuallyDrop`
    // leaves that `Arc`'s count alone and the clone takes a count of its own.
    let borrowed = ManuallyDrop::new(unsafe { Arc::from_raw(lender as *const Lender) });
    Arc::clone(&borrowed)
}
