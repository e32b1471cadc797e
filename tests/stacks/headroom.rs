//! The stack-headroom rule at its edges (issue 17; `src/base/stack.rs`, `docs/design.md` §3.6, §5.5):
//! every job starts with at least half of its worker's stack free, on a stack segment when
//! helping has nested deeper, whatever the builder's `stack_size`, and code in a job that
//! guards its own recursion with `stacker` (rustc, the `recursive` crate) stays safe on a
//! segment. Each case runs in a child process (an overflow aborts; the test must fail, not the
//! suite), under a watchdog there and a deadline here.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};

use treepool::{Scope, ThreadPool, ThreadPoolBuilder};

fn one_thread_one_token(stack_size: usize) -> ThreadPool {
    ThreadPoolBuilder::new()
        .num_threads(1)
        .max_inflight(1)
        .stack_size(stack_size)
        .build()
        .expect("build a pool")
}

/// A spawn-first chain: on one thread and one token every link stays in flight, waiting in its
/// second spawn, so the helping nests one level per link. The deepest link runs `deepest`.
fn link<'s>(s: &Scope<'s>, d: usize, ran: &'s AtomicUsize, deepest: &'s (dyn Fn() + Sync)) {
    ran.fetch_add(1, Ordering::Relaxed);
    if d == 0 {
        deepest();
        return;
    }
    s.spawn(move |s| link(s, d - 1, ran, deepest));
    s.spawn(move |_| {
        ran.fetch_add(1, Ordering::Relaxed);
    });
}

/// Runs the chain of `links` on `pool`; checks that every job ran and that the helping reached
/// stack segments.
fn run_chain(pool: &ThreadPool, links: usize, deepest: &(dyn Fn() + Sync)) {
    let ran = AtomicUsize::new(0);
    pool.scope(|s| link(s, links, &ran, deepest));
    assert_eq!(
        ran.into_inner(),
        2 * links + 1,
        "every link and leaf ran once"
    );
    let stats = pool.stats();
    assert!(
        stats.stack_segments > 0,
        "the chain reached segments: {stats:?}"
    );
    assert_eq!(
        (stats.inflight, stats.tokens_in_use),
        (0, 0),
        "idle: {stats:?}"
    );
}

/// A `stack_size` under std's minimum (std quietly raises the thread's own stack) used to size
/// the segments too: 4 KiB segments, smaller than one level of the pool's frames in a debug
/// build, and a chain of two links died of `SIGSEGV` (adversarial review of issue 17). Sizes
/// under 64 KiB are now raised for the rule and the segments alike.
#[test]
fn tiny_stack_sizes_run_deep_chains() {
    common::isolated!(150, || {
        for size in [1, 4 << 10, 16 << 10, 64 << 10] {
            run_chain(&one_thread_one_token(size), 300, &|| {});
        }
    });
}

/// A recursion of `n` levels of about 1 KiB each, guarded by `stacker` as rustc and the
/// `recursive` crate guard theirs: it moves onto stacker's own stacks when stacker sees less
/// than 64 KiB left.
#[inline(never)]
fn guarded_recursion(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut frame = [n as u8; 1024];
    std::hint::black_box(&mut frame);
    stacker::maybe_grow(64 << 10, 1 << 20, || guarded_recursion(n - 1)) + usize::from(frame[7] & 1)
}

/// stacker measures the room left against the thread's own stack bounds, which it reads once
/// per thread. On a segment mapped *above* the thread's stack it saw room it did not have, and
/// the recursion overflowed the segment (adversarial review of issue 17: a hole above the
/// worker's stack, left by an unmapping, is where the kernel put the next segment). Segments
/// are now mapped below the thread's stack, where stacker sees no room and moves the recursion
/// onto a stack of its own.
#[test]
fn stacker_guarded_recursion_is_safe_on_a_segment() {
    common::isolated!(150, || {
        // A hole just above where the worker's stack goes: mappings are made top-down, so the
        // next one fits there once it is unmapped.
        let hole = memmap2::MmapMut::map_anon(1 << 20).expect("map the hole");
        let pool = one_thread_one_token(256 << 10);
        pool.install(|| ()); // the worker and its stack exist
        drop(hole);
        assert!(pool.install(|| guarded_recursion(20_000)) <= 20_000);
        let deepest = || {
            let on_segment = treepool::current_thread_index().is_some();
            assert!(on_segment && guarded_recursion(20_000) <= 20_000);
        };
        run_chain(&pool, 400, &deepest);
    });
}

/// The guarantee itself: with a 256 KiB stack, every link of a chain of 2,000 (far deeper than
/// the stack holds) uses 40% of the stack as soon as it starts, and none overflows.
#[test]
fn every_job_starts_with_half_the_stack_free() {
    common::isolated!(150, || {
        const STACK: usize = 256 << 10;
        let pool = one_thread_one_token(STACK);
        let ran = AtomicUsize::new(0);
        pool.scope(|s| heavy_link(s, 2_000, STACK * 2 / 5, &ran));
        assert_eq!(ran.into_inner(), 4_001);
        assert!(pool.stats().stack_segments > 0);
    });
}

/// A chain link that first uses `bytes` of stack.
fn heavy_link<'s>(s: &Scope<'s>, d: usize, bytes: usize, ran: &'s AtomicUsize) {
    use_stack(bytes);
    ran.fetch_add(1, Ordering::Relaxed);
    if d == 0 {
        return;
    }
    s.spawn(move |s| heavy_link(s, d - 1, bytes, ran));
    s.spawn(move |_| {
        ran.fetch_add(1, Ordering::Relaxed);
    });
}

/// Touches about `bytes` of stack below the caller's frame, 4 KiB a frame.
#[inline(never)]
fn use_stack(bytes: usize) {
    let mut page = [0u8; 4096];
    std::hint::black_box(&mut page);
    if bytes > page.len() {
        use_stack(bytes - page.len());
    }
}
