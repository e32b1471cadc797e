//! The one home of a worker's unrun `join` halves: a split stack (Lace's split deque, van Dijk
//! and van de Pol, Euro-Par 2014, with the owner's end and the thieves' end on one array).
//!
//! Every `join` on a worker puts the address of its `b` in the next slot of its thread's stack,
//! and takes the slot back when `a` returns. The slots are split in three, bottom to top:
//!
//! * `[0, head)`: *taken*: a taker (a thief, or the owner's own wait) claimed the half; its
//!   joiner, below on the owner's stack, waits for it or has not reached it yet;
//! * `[head, split)`: *public*: any thread may claim the oldest one, by one CAS on `ends`;
//! * `[split, top)`: *private*: only the owner sees them. A join's fast path (push, take back)
//!   touches nothing else, with no atomic read-modify-write and no fence.
//!
//! A half becomes public without moving: the owner moves `split` up over its oldest private
//! half ([`HalfOwner::promote`]). A taker claims the oldest public half by moving `head` up
//! ([`HalfStack::steal`]), and only then reads its slot, which its owner leaves alone until the
//! half's joiner is done with it. The owner takes a public half back by moving `split` down
//! over it ([`HalfOwner::take_back`], [`HalfOwner::retract_to`]): `head` and `split` share one
//! word, so a taker and the owner that race for one half are ordered by that word, and exactly
//! one of them gets it.
//!
//! This module owns the indices and their protocol, nothing else: it never runs, admits or
//! frees a half, and knows nothing of what a half is (an address). Loom models:
//! `tests/loom/join.rs`.

use std::cell::Cell;

use crossbeam_utils::CachePadded;

use crate::base::sync::{fence, Arc, AtomicPtr, AtomicU64, Ordering};

/// How many halves a worker keeps at most: the join nesting depth on one thread past which a
/// `join` keeps its `b` nowhere (see `join_in_worker`). The slots are allocated and never
/// written but by `push` ([`Slots`]), so a page of them is committed only once a thread nests
/// that deep.
#[cfg(not(loom))]
pub const HALF_SLOTS: usize = 1 << 18;
/// Under loom: enough for the models.
#[cfg(loom)]
pub const HALF_SLOTS: usize = 8;

/// `ends` packs `head` in its high 32 bits and `split` in its low 32 bits.
const HEAD_ONE: u64 = 1 << 32;

#[inline]
fn pack(head: usize, split: usize) -> u64 {
    ((head as u64) << 32) | split as u64
}

#[inline]
fn head_of(ends: u64) -> usize {
    (ends >> 32) as usize
}

#[inline]
fn split_of(ends: u64) -> usize {
    (ends & 0xffff_ffff) as usize
}

/// The part of a worker's split stack that other threads see: the slots and the two shared
/// ends.
pub struct HalfStack {
    slots: Slots,
    /// `head` (high half) and `split` (low half), see the module doc.
    ends: CachePadded<AtomicU64>,
}

/// What [`HalfStack::steal`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Steal {
    /// No public half.
    Empty,
    /// Another taker or the owner moved an end meanwhile; try again.
    Retry,
    /// Claimed the half in slot `.0`, at address `.1`: the caller runs it, or declines it
    /// (leaves it for its joiner), exactly once.
    Taken(usize, *const ()),
}

impl HalfStack {
    /// An empty stack of [`HALF_SLOTS`] slots.
    pub fn new() -> Self {
        HalfStack {
            slots: Slots::new(),
            ends: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Claims the oldest public half, if there is one.
    pub fn steal(&self) -> Steal {
        // Acquire: pairs with the owner's release in `promote`, so the slot below is the one
        // the owner published (read after the claim, below).
        let ends = self.ends.load(Ordering::Acquire);
        let head = head_of(ends);
        if head >= split_of(ends) {
            return Steal::Empty;
        }
        // The CAS succeeds only if neither end moved since the load: the half in `head` was
        // public at the CAS, and is ours. Acquire: as above; the value read is the latest in
        // `ends`' modification order, written by the owner's last release or a taker's RMW
        // after it (which continues its release sequence).
        match self.ends.compare_exchange_weak(
            ends,
            ends + HEAD_ONE,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            // SAFETY: the claimed slot is below `split`, so the owner's `push` wrote it before
            // the release that made it public, which the claim's acquire read; the owner
            // rewrites it only after the half's joiner is done with it.
            Ok(_) => Steal::Taken(head, unsafe { self.slots.get(head) }),
            Err(_) => Steal::Retry,
        }
    }

    /// Whether a half is public now (racy: for a thief deciding whether to look again, or
    /// about to sleep).
    pub fn has_public(&self) -> bool {
        // SeqCst fence, then the load: a sleeping thief's look (after its SeqCst count in
        // `Sleep::sleepers`) pairs with the owner's SeqCst promotion and its SeqCst look at the
        // sleepers (`Sleep::new_work_after_seqcst_rmw`), so one of the two sees the other; the
        // fence makes that hold in loom's model too, which orders SeqCst fences, not SeqCst
        // loads. Relaxed load: ordered by the fence.
        fence(Ordering::SeqCst);
        let ends = self.ends.load(Ordering::Relaxed);
        head_of(ends) < split_of(ends)
    }
}

/// The slots of one split stack, [`HALF_SLOTS`] addresses. The memory is allocated and left as
/// the allocator gives it: only [`HalfOwner::push`] writes a slot, so the pages a thread never
/// nests into are never committed. (Zeroed memory would be written by the allocator whenever it
/// recycles memory a freed pool used: 2 MiB a worker, tests/threads/memory.rs.) Every read is
/// of a slot a push wrote before it: the owner reads its own, a taker the one it claimed.
struct Slots {
    first: *mut AtomicPtr<()>,
}

// SAFETY: `Slots` owns its allocation, whose slots are atomics (written before any other thread
// reads them, and read only through `Slots::get`), so sharing or sending it is sharing atomics.
unsafe impl Send for Slots {}
// SAFETY: as above.
unsafe impl Sync for Slots {}

impl Slots {
    fn layout() -> std::alloc::Layout {
        std::alloc::Layout::array::<AtomicPtr<()>>(HALF_SLOTS).expect("a small array")
    }

    #[cfg(not(loom))]
    fn new() -> Self {
        let layout = Self::layout();
        // SAFETY: the layout has a non-zero size.
        let first = unsafe { std::alloc::alloc(layout) } as *mut AtomicPtr<()>;
        if first.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Slots { first }
    }

    /// Under loom: loom's atomics are not plain memory, so each one is made (and dropped) as
    /// a value.
    #[cfg(loom)]
    fn new() -> Self {
        let slots: Box<[AtomicPtr<()>]> = (0..HALF_SLOTS)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect();
        Slots {
            first: Box::into_raw(slots) as *mut AtomicPtr<()>,
        }
    }

    /// The first slot's address, for the owner's writes ([`write_slot`]).
    fn as_ptr(&self) -> *mut AtomicPtr<()> {
        self.first
    }

    /// The half in `slot`.
    ///
    /// # Safety
    /// `slot < HALF_SLOTS`, and a push wrote it, which happens before this read.
    #[inline]
    unsafe fn get(&self, slot: usize) -> *const () {
        // SAFETY: in the allocation, and written (the caller's contract).
        let cell = unsafe { &*self.first.add(slot) };
        // Relaxed: the caller's contract orders the write before this read.
        cell.load(Ordering::Relaxed)
    }
}

impl Drop for Slots {
    #[cfg(not(loom))]
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the slots need no drop.
        unsafe { std::alloc::dealloc(self.first as *mut u8, Self::layout()) }
    }

    #[cfg(loom)]
    fn drop(&mut self) {
        // SAFETY: made in `new` by `Box::into_raw` of a boxed slice of `HALF_SLOTS`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.first, HALF_SLOTS)) });
    }
}

/// Writes `half` into the slot at `cell`, which may never have been written.
///
/// # Safety
/// `cell` is a slot of the owner's stack that no other thread reads until a release of the
/// owner's that follows this write (a promotion), as every taker's read is (module doc).
#[inline(always)]
unsafe fn write_slot(cell: *mut AtomicPtr<()>, half: *const ()) {
    // A plain write, as the memory may hold no value yet: the caller's contract orders it
    // before every read of another thread.
    #[cfg(not(loom))]
    // SAFETY: in the allocation (the caller's contract); the write makes the slot a value.
    unsafe {
        cell.write(AtomicPtr::new(half as *mut ()))
    };
    // Under loom the slots are loom's atomics, made in `Slots::new`, and a store lets the model
    // check that order. Relaxed: the caller's contract, as above.
    #[cfg(loom)]
    // SAFETY: in the allocation (the caller's contract), made in `Slots::new`.
    unsafe {
        (*cell).store(half as *mut (), Ordering::Relaxed)
    };
}

impl Default for HalfStack {
    fn default() -> Self {
        Self::new()
    }
}

/// What happened to a half its joiner takes back ([`HalfOwner::take_back`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Back {
    /// Private all along, with more private halves below: its joiner runs it, unless a wait of
    /// its job ran it already.
    Private,
    /// Private all along, and the last private one: whatever else the stack holds is public or
    /// claimed. As `Private`.
    Last,
    /// It was public and nobody claimed it: private again, as above.
    Retracted,
    /// A taker claimed it. Its slot stays occupied until the joiner, done with the half, calls
    /// [`HalfOwner::release_taken`].
    Taken,
}

/// Where a slot's half is now, as its owner sees it ([`HalfOwner::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Only the owner sees it.
    Private,
    /// Any thread may claim it.
    Public,
    /// A taker claimed it.
    Taken,
}

/// The owner's end of a split stack. Not `Sync`: the owning thread's alone.
pub struct HalfOwner {
    stack: Arc<HalfStack>,
    /// `stack.slots`, its address and length copied here: a `push` reads them without going
    /// through the `Arc` (the length is 0 after [`HalfOwner::push_out_of_line`]).
    slots: *mut AtomicPtr<()>,
    capacity: usize,
    /// The first free slot.
    top: Cell<usize>,
    /// `split` as in `ends`: only the owner moves it, so this copy is exact.
    split: Cell<usize>,
}

impl HalfOwner {
    /// The owner's end of `stack`, which must be empty and have no other owner.
    pub fn new(stack: Arc<HalfStack>) -> Self {
        HalfOwner {
            slots: stack.slots.as_ptr(),
            capacity: HALF_SLOTS,
            stack,
            top: Cell::new(0),
            split: Cell::new(0),
        }
    }

    /// Keeps `half` private; returns its slot, for [`HalfOwner::take_back`], or `None` if every
    /// slot is in use (or [`HalfOwner::push_out_of_line`] was called: then none is).
    #[inline]
    pub fn push(&self, half: *const ()) -> Option<usize> {
        self.push_below(half, self.capacity)
    }

    /// Makes every [`HalfOwner::push`] fail, so that its caller takes its out-of-line path,
    /// which pushes with [`HalfOwner::push_any`]: a switch for a mode (tracing) that costs
    /// the fast path no instruction of its own, as it reuses `push`'s bound check.
    pub fn push_out_of_line(&mut self) {
        self.capacity = 0;
    }

    /// [`HalfOwner::push`], whatever [`HalfOwner::push_out_of_line`] said.
    #[inline]
    pub fn push_any(&self, half: *const ()) -> Option<usize> {
        self.push_below(half, HALF_SLOTS)
    }

    #[inline(always)]
    fn push_below(&self, half: *const (), capacity: usize) -> Option<usize> {
        let slot = self.top.get();
        // `>=`, not `==`: after `push_out_of_line` the bound is 0 below a kept half.
        if slot >= capacity {
            return None;
        }
        // SAFETY: `slot < capacity <= HALF_SLOTS`, in the slots that `stack`, held here, keeps
        // alive; no taker reads the slot before `promote`'s release makes it public, and no
        // taker of an earlier half in it reads it any more (the slot was freed).
        unsafe { write_slot(self.slots.add(slot), half) };
        self.top.set(slot + 1);
        Some(slot)
    }

    /// The joiner of `slot` is done with `a` (every slot above it was taken back): says where
    /// its half is. `Private` and `Retracted` free the slot; `Taken` keeps it until
    /// [`HalfOwner::release_taken`].
    #[inline]
    pub fn take_back(&self, slot: usize) -> Back {
        if self.take_back_private(slot) {
            return Back::Private;
        }
        self.take_back_last(slot)
    }

    /// [`HalfOwner::take_back`]'s fast path: if the half in `slot` is private with another
    /// private half below, frees the slot and returns true; else changes nothing.
    #[inline]
    pub fn take_back_private(&self, slot: usize) -> bool {
        debug_assert_eq!(self.top.get(), slot + 1);
        if slot > self.split.get() {
            self.top.set(slot);
            return true;
        }
        false
    }

    #[cold]
    #[inline(never)]
    fn take_back_last(&self, slot: usize) -> Back {
        if slot == self.split.get() {
            self.top.set(slot);
            return Back::Last;
        }
        // Every slot above was taken back, so the public part ends here.
        debug_assert_eq!(self.split.get(), slot + 1);
        if self.take_back_newest_public(slot) {
            Back::Retracted
        } else {
            Back::Taken
        }
    }

    /// The half in `slot`, taken by a taker, is done with (its joiner has its result): frees
    /// the slot. The taker touches the slot no more once the half is done.
    pub fn release_taken(&self, slot: usize) {
        debug_assert_eq!(self.top.get(), slot + 1);
        debug_assert_eq!(self.split.get(), slot + 1);
        debug_assert_eq!(head_of(self.stack.ends.load(Ordering::Relaxed)), slot + 1);
        self.top.set(slot);
        self.split.set(slot);
        // Release: a plain store is safe, as no taker can change `ends` while `head == split`
        // (a claim needs `head < split`); release orders the owner's later slot writes for
        // the next `promote` as that one's release does.
        self.stack.ends.store(pack(slot, slot), Ordering::Release);
    }

    /// Makes the oldest private half public; returns whether there was one.
    #[inline]
    pub fn promote(&self) -> bool {
        let split = self.split.get();
        if split >= self.top.get() {
            return false;
        }
        // SeqCst, as it pairs with a sleeping thief: the caller then announces new work
        // (`Sleep::new_work_after_seqcst_rmw`), whose SeqCst look at the sleepers follows this
        // write in the single total order.
        // The release part publishes the slot (pairs with `steal`'s acquire).
        self.stack.ends.fetch_add(1, Ordering::SeqCst);
        self.split.set(split + 1);
        true
    }

    /// [`HalfOwner::take_back`]'s path for a half made public at its push (`join_context`'s):
    /// if the half in `slot` is the newest public one and no taker claimed it, frees the slot
    /// and returns true (as `Back::Retracted`); else changes nothing.
    #[inline]
    pub fn take_back_newest_public(&self, slot: usize) -> bool {
        debug_assert_eq!(self.top.get(), slot + 1);
        if self.split.get() == slot + 1 && self.retract_to(slot) {
            self.top.set(slot);
            return true;
        }
        false
    }

    /// Makes every public half in `[slot, split)` private again, if no taker claimed any of
    /// them (that is, `slot` itself); returns whether it did.
    #[inline]
    pub fn retract_to(&self, slot: usize) -> bool {
        let split = self.split.get();
        debug_assert!(slot < split);
        // Acquire: the CAS below orders the owner against takers on this one word; no data
        // flows from a taker here.
        let mut ends = self.stack.ends.load(Ordering::Acquire);
        loop {
            debug_assert_eq!(split_of(ends), split);
            if head_of(ends) > slot {
                return false;
            }
            match self.stack.ends.compare_exchange_weak(
                ends,
                pack(head_of(ends), slot),
                // AcqRel: as above, and the owner's slot writes stay ordered before the next
                // promotion's release either way.
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.split.set(slot);
                    return true;
                }
                Err(now) => ends = now,
            }
        }
    }

    /// Where the half in `slot` (below `top`) is now. `Taken` stays so; `Public` may become
    /// `Taken` at any moment.
    pub fn place(&self, slot: usize) -> Place {
        if slot >= self.split.get() {
            Place::Private
        } else if slot >= head_of(self.stack.ends.load(Ordering::Acquire)) {
            // Acquire: a `Taken` answer lets the owner read what the taker wrote before it.
            Place::Public
        } else {
            Place::Taken
        }
    }

    /// The oldest half no taker claimed (`top` if none): the next one a claim gets.
    pub fn first_unclaimed(&self) -> usize {
        // Relaxed: a hint; a claim re-reads with its CAS.
        head_of(self.stack.ends.load(Ordering::Relaxed)).min(self.top.get())
    }

    /// The half in `slot` (below `top`).
    #[inline]
    pub fn get(&self, slot: usize) -> *const () {
        debug_assert!(slot < self.top.get());
        // SAFETY: below `top`, so this thread's `push` wrote it.
        unsafe { self.stack.slots.get(slot) }
    }

    /// Claims the oldest public half as any taker would ([`HalfStack::steal`]).
    pub fn steal(&self) -> Steal {
        self.stack.steal()
    }

    /// The first free slot: the halves in use are `[0, top)`.
    #[inline]
    pub fn top(&self) -> usize {
        self.top.get()
    }

    /// Whether any half is private.
    #[inline]
    pub fn has_private(&self) -> bool {
        self.split.get() < self.top.get()
    }

    /// Whether any half no taker has claimed is left: a private one, or a public one (the owner
    /// takes each back when its joiner is done with `a`, unless a taker claims it first).
    #[inline]
    pub fn has_unclaimed(&self) -> bool {
        self.first_unclaimed() < self.top.get()
    }
}
