//! Recycled memory for spawned jobs: each thread keeps the allocations of the jobs it freed, by
//! size, and hands them to the next jobs it allocates.
//!
//! This module owns where a spawned job's memory comes from and where it goes back to. A spawn
//! allocates once and its job is freed once, on whichever thread dropped its last reference; with
//! the global allocator that pair can cost as much as the scheduler's own work for the spawn
//! (docs/benchmarks-notes.md, "Recycled job memory"). Here it is a pop and a push on a list of
//! the calling thread.
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
//!
//! Under `--cfg treepool_asan` (set by `.ci/run` with AddressSanitizer) no layout has a list:
//! every job is allocated and freed by the global allocator, whose quarantine then sees each
//! job's lifetime (a block reused at once would turn a use after free into a write to a live
//! job), and LeakSanitizer never meets a kept block. The lists' own code is checked there by
//! its unit tests, which drive lists of their own.

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
    static KEPT: Kept = const { Kept::new() };
}

/// The list of `layout`, if it has one (none under `--cfg treepool_asan`: see the module doc).
#[inline]
fn list_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    let listed = layout.align() == ALIGN && size > 0 && size <= MAX_SIZE;
    (listed && !cfg!(treepool_asan)).then(|| size / ALIGN - 1)
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
    /// Empty lists.
    const fn new() -> Self {
        Kept {
            lists: [const { Cell::new(ptr::null_mut()) }; LISTS],
            bytes: Cell::new(0),
        }
    }

    /// The newest block of list `list`, of `size` bytes, if it has one.
    #[inline]
    fn take(&self, list: usize, size: usize) -> Option<*mut u8> {
        let block = self.lists[list].get();
        if block.is_null() {
            return None;
        }
        // SAFETY: a block in a list is a live allocation of `size` bytes that only this list
        // refers to (`keep`), its first word the link.
        self.lists[list].set(unsafe { (*block).next });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, ALIGN).unwrap()
    }

    /// A block from the global allocator, for lists of a test's own.
    fn block(size: usize) -> *mut u8 {
        // SAFETY: a non-zero size.
        unsafe { alloc::alloc(layout(size)) }
    }

    #[test]
    fn a_list_hands_back_its_newest_block_of_the_size_asked() {
        let kept = Kept::new();
        let (a, b, c) = (block(96), block(96), block(104));
        // SAFETY: blocks of those sizes from the global allocator, unused, kept once; the
        // list of a size `s` is `s / ALIGN - 1`.
        unsafe {
            assert!(kept.keep(11, a, 96));
            assert!(kept.keep(11, b, 96));
            assert!(kept.keep(12, c, 104));
        }
        assert_eq!(kept.bytes.get(), 296);
        assert_eq!(kept.take(11, 96), Some(b), "newest first");
        assert_eq!(kept.take(12, 104), Some(c));
        assert_eq!(kept.take(12, 104), None, "no block of another size");
        assert_eq!(kept.bytes.get(), 96);
        // SAFETY: taken above, unused.
        unsafe {
            alloc::dealloc(b, layout(96));
            alloc::dealloc(c, layout(104));
        }
        // `a` goes back to the global allocator with the lists (ASan would report a leak).
    }

    #[test]
    fn a_list_keeps_at_most_its_bound() {
        let kept = Kept::new();
        let count = 2 * MAX_KEPT_BYTES / MAX_SIZE;
        let not_kept: Vec<_> = (0..count)
            .map(|_| block(MAX_SIZE))
            // SAFETY: as above.
            .filter(|&b| !unsafe { kept.keep(LISTS - 1, b, MAX_SIZE) })
            .collect();
        assert_eq!(kept.bytes.get(), MAX_KEPT_BYTES);
        assert_eq!(not_kept.len(), count - MAX_KEPT_BYTES / MAX_SIZE);
        for b in not_kept {
            // SAFETY: refused by the list, so still ours.
            unsafe { alloc::dealloc(b, layout(MAX_SIZE)) };
        }
    }

    #[test]
    fn only_layouts_of_alignment_8_up_to_512_bytes_have_lists() {
        assert_eq!(list_of(layout(8)).is_some(), !cfg!(treepool_asan));
        assert_eq!(
            list_of(layout(MAX_SIZE)),
            list_of(layout(MAX_SIZE)).map(|_| LISTS - 1)
        );
        assert_eq!(list_of(layout(MAX_SIZE + ALIGN)), None);
        assert_eq!(list_of(Layout::from_size_align(64, 16).unwrap()), None);
    }

    #[cfg(not(treepool_asan))]
    #[test]
    fn a_freed_block_serves_the_next_allocation_of_its_layout_on_the_same_thread() {
        let first = alloc(layout(96));
        // SAFETY: allocated above with this layout, unused, freed once.
        unsafe { free(first, layout(96)) };
        let other = alloc(layout(104));
        assert_ne!(other, first, "a block of another size is never reused");
        let again = alloc(layout(96));
        assert_eq!(again, first, "the kept block is reused");
        // SAFETY: as above.
        unsafe {
            free(other, layout(104));
            free(again, layout(96));
        }
    }

    /// From the review of the lists: under ASan a block kept and reused at once would hide a
    /// use of a freed job from the quarantine (the module doc).
    #[cfg(treepool_asan)]
    #[test]
    fn under_asan_a_freed_block_is_not_handed_to_the_next_allocation() {
        let first = alloc(layout(96));
        // SAFETY: allocated above with this layout, unused, freed once.
        unsafe { free(first, layout(96)) };
        let second = alloc(layout(96));
        assert_ne!(
            second, first,
            "a stale pointer to the freed block reaches a live one"
        );
        // SAFETY: as above.
        unsafe { free(second, layout(96)) };
    }

    #[cfg(not(treepool_asan))]
    #[test]
    fn blocks_move_between_threads_with_what_frees_them() {
        let block = alloc(layout(48)) as usize;
        let reused = std::thread::spawn(move || {
            // SAFETY: allocated above with this layout, freed once, here.
            unsafe { free(block as *mut u8, layout(48)) };
            alloc(layout(48)) as usize
        })
        .join()
        .unwrap();
        assert_eq!(reused, block, "the freeing thread reuses the block");
        // SAFETY: the other thread's allocation, unused; it exited, and its lists with it.
        unsafe { free(reused as *mut u8, layout(48)) };
    }
}
