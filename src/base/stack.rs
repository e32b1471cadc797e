//! Stack headroom: no job starts where its thread's stack cannot hold it.
//!
//! This module owns the one rule that keeps treepool's helping from overflowing a stack (B5):
//! **every job starts with at least half of its worker's stack size free.** A thread that waits
//! (for a `join` half, a scope's end, or a spawn's admission) runs other jobs above its waiting
//! frame, and those can wait and help in turn, so the nesting follows the tree: a spawn tree
//! whose levels must all stay in flight (a chain of spawns on one token) keeps a waiting frame
//! per level on some thread, however deep. Every job a worker runs starts in
//! [`Headroom::start`], which compares the stack pointer with the thread's *low-water mark*;
//! below it, the job runs on a *segment*: a stack of the worker's size mapped from the heap,
//! with a guard page (corosensei's `DefaultStack`, and its `on_stack` to switch), where the same
//! rule then applies with the segment's own mark. So the frames of deep helping live on
//! segments, bounded by memory rather than by the thread's stack; what a level of such a tree
//! costs is measured in `docs/benchmarks.md`.
//!
//! A segment that a job returns from is kept for the next job that needs one (one per thread;
//! a second is unmapped): a loop that starts many jobs just past the mark would otherwise map
//! and unmap one per job, about a hundred times the cost of the jobs.
//!
//! Segments exist where corosensei supports the target (the list in `Cargo.toml`); elsewhere
//! a job starts where it is, as before this rule.
//!
//! The thread's own mark comes from its real stack bounds where they can be read (Linux), so the
//! rule holds on threads the builder did not start or size: a `spawn_handler`'s, and the
//! builder's own with `use_current_thread` (see [`Headroom::new`]).
//!
//! It never runs, admits or schedules anything: it only decides on which stack a job starts.

use std::cell::Cell;

/// A stack segment: where the target has them (corosensei supports it; this list is the one in
/// `Cargo.toml`), a mapped stack with a guard page.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    all(target_arch = "aarch64", not(windows)),
    all(target_arch = "riscv64", not(windows))
))]
type Segment = corosensei::stack::DefaultStack;

/// On other targets there are no segments: jobs start where they are, as before B5 had them.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    all(target_arch = "aarch64", not(windows)),
    all(target_arch = "riscv64", not(windows))
)))]
enum Segment {}

/// The smallest worker stack: the builder raises smaller sizes to this, so that a job's half
/// holds a few levels of the pool's own frames (about 5 KiB a level in a debug build).
pub const MIN_STACK_SIZE: usize = 64 << 10;

/// How many mappings `Headroom::map_segment` tries for one below the thread's own stack.
const PLACEMENT_TRIES: usize = 8;

/// One worker's rule: where its next job may start, and the segment it keeps.
pub struct Headroom {
    /// The lowest stack address at which a job may start on the stack the thread runs on now.
    low_water: Cell<usize>,
    /// The size of a segment: the worker's own stack size.
    segment_size: usize,
    /// The low end of the thread's stack (read, or its top minus its size): a mapping whose
    /// top is at or below this cannot overlap the thread's stack, so it lies below the stack
    /// (see `map_segment`).
    thread_floor: usize,
    /// A segment no job runs on, kept for the next one that needs it.
    spare: Cell<Option<Segment>>,
}

impl Headroom {
    /// The rule for the calling thread, whose segments are `size` bytes (`MIN_STACK_SIZE` or
    /// more): a job may start where at least `size / 2` bytes of the thread's stack are left.
    ///
    /// Where the thread's stack bounds can be read (`pthread_getattr_np` on Linux), they are
    /// the truth, wherever the thread is on its stack and whatever its size: a user's thread
    /// (`spawn_handler`, or the builder's own thread with `use_current_thread`) may have another
    /// size than the one the builder was told, and may be anywhere on it. Where they cannot,
    /// `near_base` says the thread is a worker the builder started with a stack of `size` bytes
    /// and calls this near its base; for any other thread the rule assumes no room at all, so
    /// every job it runs starts on a segment (where the target has them).
    pub fn new(size: usize, near_base: bool) -> Self {
        let sp = stack_pointer();
        let (low_water, thread_floor) = match stack_low_end() {
            Some(low) => (low.saturating_add(size / 2), low),
            None if near_base => (sp.saturating_sub(size / 2), sp.saturating_sub(size)),
            None => (usize::MAX, sp.saturating_sub(size)),
        };
        Headroom {
            low_water: Cell::new(low_water),
            segment_size: size,
            thread_floor,
            spare: Cell::new(None),
        }
    }

    /// Runs `job` on the current stack if at least half a worker's stack is left, else on a
    /// segment, calling `on_segment` first. The check is a load and a compare.
    #[inline]
    pub fn start(&self, job: impl FnOnce(), on_segment: impl FnOnce()) {
        if stack_pointer() >= self.low_water.get() {
            job();
        } else {
            on_segment();
            self.on_segment(job);
        }
    }

    /// Runs `job` on a segment with the rule moved onto it; restores the rule of the stack
    /// below once the job has returned, and keeps the segment for the next job that needs one.
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        all(target_arch = "aarch64", not(windows)),
        all(target_arch = "riscv64", not(windows))
    ))]
    #[cold]
    #[inline(never)]
    fn on_segment(&self, job: impl FnOnce()) {
        use corosensei::stack::Stack;
        let size = self.segment_size;
        let mut segment = self.spare.take().unwrap_or_else(|| self.map_segment());
        let below = self.low_water.replace(segment.base().get() - size / 2);
        corosensei::on_stack(&mut segment, job);
        self.low_water.set(below);
        // A segment kept already (one a deeper job returned from) is unmapped here.
        drop(self.spare.replace(Some(segment)));
    }

    /// Maps a new segment, below the thread's own stack if it can. Code that guards its own
    /// recursion with `stacker` (rustc, the `recursive` crate) measures the room it has against
    /// the thread's stack bounds, which it reads once per thread: on a segment mapped *above*
    /// the thread's stack it would see room it does not have and overflow; below it, it sees
    /// none and moves onto a stack of its own, which is safe. The kernel maps top-down, into the
    /// highest gap that fits, so a segment lands above only in a hole left by an earlier
    /// unmapping; such a mapping is held while the next one is made (it fills the hole) and
    /// dropped after. Out of tries, the last mapping serves.
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        all(target_arch = "aarch64", not(windows)),
        all(target_arch = "riscv64", not(windows))
    ))]
    fn map_segment(&self) -> Segment {
        use corosensei::stack::Stack;
        let size = self.segment_size;
        let mut above = Vec::new();
        loop {
            let segment = Segment::new(size).unwrap_or_else(|err| no_segment(size, err));
            if segment.base().get() <= self.thread_floor || above.len() + 1 == PLACEMENT_TRIES {
                return segment;
            }
            above.push(segment);
        }
    }

    /// Without segments the job starts where it is.
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "x86",
        all(target_arch = "aarch64", not(windows)),
        all(target_arch = "riscv64", not(windows))
    )))]
    fn on_segment(&self, job: impl FnOnce()) {
        job();
    }
}

/// Out of address space or memory for a segment: as on a failed allocation, there is no way
/// on (the job cannot start where it would overflow), so say why and abort.
#[cold]
#[allow(dead_code)] // on targets without segments
fn no_segment(size: usize, err: std::io::Error) -> ! {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "treepool: cannot map a stack segment of {size} bytes for a deeply nested job: {err}; \
         aborting"
    );
    std::process::abort()
}

/// The lowest usable address of the calling thread's stack (above its guard area), if the OS
/// tells.
#[cfg(target_os = "linux")]
fn stack_low_end() -> Option<usize> {
    // SAFETY: `attr` is initialized by `pthread_getattr_np` before it is read, and destroyed
    // once, only if that succeeded; the out-pointers point to locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let mut guard: libc::size_t = 0;
        let read = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0
            && libc::pthread_attr_getguardsize(&attr, &mut guard) == 0;
        libc::pthread_attr_destroy(&mut attr);
        // Whether the reported stack includes the guard area differs between libcs and
        // versions: skipping it errs on the safe side either way.
        (read && size > 0).then(|| (addr as usize).saturating_add(guard))
    }
}

/// Elsewhere the bounds are not read (see [`Headroom::new`] for what is assumed instead).
#[cfg(not(target_os = "linux"))]
fn stack_low_end() -> Option<usize> {
    None
}

/// The stack pointer.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: copies a register; touches no memory, the stack or the flags.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// An address in the caller's frame: the stack pointer, give or take that frame.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn stack_pointer() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}
