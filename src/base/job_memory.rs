//! Recycled memory for spawned jobs: each thread keeps the allocations of the jobs it freed, by
//! size, and hands them to the next jobs it allocates.
//!
//! This module owns where a spawned job's memory comes from and where it goes back to. A spawn
//! allocates once and its job is freed once, on whichever thread dropped its last reference; with
//! the global allocator that pair costs about as much as all of the scheduler's own bookkeeping
//! for the spawn (glibc's hardened fast paths: some 150 instructions). Here it is a pop and a push
//! on a list of the calling thread.
//!
//! The rule: **every block is allocated by the global allocator with exactly the layout of the
//! jobs of its list, and goes back to it with that layout.** A list holds blocks of one size, all
//! aligned to [`ALIGN`]; a block is reused only for a layout equal to the one it was allocated
//! with. So a job allocated here may also be freed as a plain `Box` and a plain `Box` freed here,
//! and blocks may move between threads with the jobs that free them. A thread keeps at most
//! [`MAX_KEPT_BYTES`] in its lists (a thread that only frees, a consumer of another thread's
//! spawns, hands the rest to the global allocator), and gives them all back when it exits.
//!
//! It never looks inside a block it keeps, but for the link to the next one in its list, and it
//! knows nothing of jobs: the caller passes a layout and owns what it writes into the block.
//! Under `--cfg treepool_asan` (set by `.ci/run` with AddressSanitizer) a kept block is poisoned,
//! so that a use of a freed job is reported as it would be with the global allocator.

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::ptr;

/// The only alignment the lists take: a spawned job's (its lender is 8-aligned). A layout with
/// another alignment goes straight to the global allocator.
const ALIGN: usize = 8;

/// The largest block kept: one list per multiple of [`ALIGN`] up to it.
const MAX_SIZE: usize = 512;

/// The number of lists.
const LISTS: usize = MAX_SIZE / ALIGN;

/// The most bytes a thread keeps in its lists, all sizes together.
pub const MAX_KEPT_BYTES: usize = 64 * 1024;

/// A kept block: the first word is the link to the next block of its list.
struct Block {
    next: *mut Block,
}

/// The calling thread's lists.
struct Kept {
    /// `lists[i]`: the blocks of `(i + 1) * ALIGN` bytes, newest first.
    lists: [Cell<*mut Block>; LISTS],
    /// The bytes in all lists.
    bytes: Cell<usize>,
}

std::thread_local! {
    static KEPT: Kept = const {
        Kept {
            lists: [const { Cell::new(ptr::null_mut()) }; LISTS],
            bytes: Cell::new(0),
        }
    };
}

/// The list of `layout`, if it has one.
#[inline]
fn list_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    (layout.align() == ALIGN && size > 0 && size <= MAX_SIZE).then(|| size / ALIGN - 1)
}

/// A block for a value of `layout` (not zero-sized): a kept one, else a new one from the global
/// allocator. Aborts, as `Box::new` does, if the global allocator fails.
#[inline]
pub fn alloc(layout: Layout) -> *mut u8 {
    if let Some(list) = list_of(layout) {
        // `try_with`: during the thread's exit the lists are gone; the global allocator serves.
        if let Ok(Some(block)) = KEPT.try_with(|kept| kept.take(list, layout.size())) {
            return block;
        }
    }
    debug_assert!(layout.size() > 0, "no block for a zero-sized value");
    // SAFETY: `layout` has a non-zero size (the caller's contract, checked in debug builds).
    let block = unsafe { alloc::alloc(layout) };
    if block.is_null() {
        alloc::handle_alloc_error(layout);
    }
    block
}

/// Takes back the block at `block`, of `layout`, whose value was dropped.
///
/// # Safety
/// `block` was allocated by the global allocator (directly, as by `Box`, or through [`alloc`])
/// with `layout`, nothing uses it any more, and it is freed once.
#[inline]
pub unsafe fn free(block: *mut u8, layout: Layout) {
    if let Some(list) = list_of(layout) {
        let kept = KEPT.try_with(|kept| {
            // SAFETY: the caller's contract.
            unsafe { kept.keep(list, block, layout.size()) }
        });
        if kept == Ok(true) {
            return;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { alloc::dealloc(block, layout) }
}

impl Kept {
    /// The newest block of list `list`, of `size` bytes, if it has one.
    #[inline]
    fn take(&self, list: usize, size: usize) -> Option<*mut u8> {
        let block = self.lists[list].get();
        if block.is_null() {
            return None;
        }
        // SAFETY: a block in a list is a live allocation of `size` bytes that only this list
        // refers to (`keep`); poisoned under ASan while kept.
        unsafe {
            asan::unpoison(block as *const u8, size);
            self.lists[list].set((*block).next);
        }
        self.bytes.set(self.bytes.get() - size);
        Some(block as *mut u8)
    }

    /// Keeps `block`, of `size` bytes, in list `list` unless the thread keeps enough already.
    /// Returns whether it kept it.
    ///
    /// # Safety
    /// As for [`free`], with `size` the size of its layout and `list` that layout's list.
    #[inline]
    unsafe fn keep(&self, list: usize, block: *mut u8, size: usize) -> bool {
        let bytes = self.bytes.get() + size;
        if bytes > MAX_KEPT_BYTES {
            return false;
        }
        self.bytes.set(bytes);
        let block = block as *mut Block;
        // SAFETY: the block is ours (the caller's contract), at least a word long and
        // 8-aligned (its layout has a list).
        unsafe {
            block.write(Block {
                next: self.lists[list].get(),
            })
        };
        self.lists[list].set(block);
        asan::poison(block as *const u8, size);
        true
    }
}

impl Drop for Kept {
    /// The thread exits: every kept block goes back to the global allocator.
    fn drop(&mut self) {
        for (list, head) in self.lists.iter().enumerate() {
            let size = (list + 1) * ALIGN;
            let mut block = head.replace(ptr::null_mut());
            while !block.is_null() {
                // SAFETY: kept blocks were allocated with this size and `ALIGN` (the module's
                // rule), and only this list refers to them.
                unsafe {
                    asan::unpoison(block as *const u8, size);
                    let next = (*block).next;
                    alloc::dealloc(
                        block as *mut u8,
                        Layout::from_size_align_unchecked(size, ALIGN),
                    );
                    block = next;
                }
            }
        }
        self.bytes.set(0);
    }
}

/// How a kept block is hidden from the program under AddressSanitizer.
#[cfg(treepool_asan)]
mod asan {
    extern "C" {
        fn __asan_poison_memory_region(addr: *const u8, size: usize);
        fn __asan_unpoison_memory_region(addr: *const u8, size: usize);
    }

    /// A kept block: any access is reported as a use after free would be.
    pub fn poison(addr: *const u8, size: usize) {
        // SAFETY: ASan's interface; the region is a block this module owns.
        unsafe { __asan_poison_memory_region(addr, size) }
    }

    /// A block leaving its list, to be written by its new owner (or read for its link).
    pub fn unpoison(addr: *const u8, size: usize) {
        // SAFETY: as above.
        unsafe { __asan_unpoison_memory_region(addr, size) }
    }
}

/// Without AddressSanitizer: nothing to hide.
#[cfg(not(treepool_asan))]
mod asan {
    #[inline(always)]
    pub fn poison(_addr: *const u8, _size: usize) {}

    #[inline(always)]
    pub fn unpoison(_addr: *const u8, _size: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_bytes() -> usize {
        KEPT.with(|kept| kept.bytes.get())
    }

    #[test]
    fn a_freed_block_serves_the_next_allocation_of_its_layout_on_the_same_thread() {
        let layout = Layout::from_size_align(96, ALIGN).unwrap();
        let first = alloc(layout);
        let start = kept_bytes();
        // SAFETY: allocated above with `layout`, unused.
        unsafe { free(first, layout) };
        assert_eq!(kept_bytes(), start + 96);
        let other = Layout::from_size_align(104, ALIGN).unwrap();
        let second = alloc(other);
        assert_ne!(second, first, "a block of another size is never reused");
        let third = alloc(layout);
        assert_eq!(third, first, "the newest kept block of its size is reused");
        assert_eq!(kept_bytes(), start);
        // SAFETY: as above.
        unsafe {
            free(second, other);
            free(third, layout);
        }
    }

    #[test]
    fn a_thread_keeps_at_most_its_bound_and_no_other_alignment() {
        let layout = Layout::from_size_align(MAX_SIZE, ALIGN).unwrap();
        let blocks: Vec<_> = (0..2 * MAX_KEPT_BYTES / MAX_SIZE)
            .map(|_| alloc(layout))
            .collect();
        let before = kept_bytes();
        for block in blocks {
            // SAFETY: allocated above with `layout`, unused, freed once.
            unsafe { free(block, layout) };
        }
        assert!(kept_bytes() <= MAX_KEPT_BYTES);
        assert!(kept_bytes() > before, "some were kept");
        let wide = Layout::from_size_align(64, 16).unwrap();
        let large = Layout::from_size_align(MAX_SIZE + ALIGN, ALIGN).unwrap();
        let after = kept_bytes();
        for layout in [wide, large] {
            // SAFETY: as above.
            unsafe { free(alloc(layout), layout) };
        }
        assert_eq!(
            kept_bytes(),
            after,
            "other layouts go to the global allocator"
        );
    }

    #[test]
    fn blocks_move_between_threads_with_what_frees_them() {
        let layout = Layout::from_size_align(48, ALIGN).unwrap();
        let block = alloc(layout) as usize;
        let reused = std::thread::spawn(move || {
            // SAFETY: allocated above with `layout`, freed once, here.
            unsafe { free(block as *mut u8, layout) };
            alloc(layout) as usize
        })
        .join()
        .unwrap();
        assert_eq!(reused, block, "the freeing thread reuses the block");
        // SAFETY: the other thread's allocation, unused; it exited, and its lists with it.
        unsafe { free(reused as *mut u8, layout) };
    }
}
