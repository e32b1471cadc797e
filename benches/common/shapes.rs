//! Spawn shapes written once for both pools (issue 27, "Spawn at rayon's cost in every
//! shape"), shared by `benches/spawn_shapes.rs`, `benches/deep.rs`, `benches/scope_fanout.rs`
//! and `examples/callgrind_shapes.rs`:
//!
//! * `chain`: the spawn-first chain: `link(s, d)` spawns `link(s, d - 1)`, then a leaf;
//! * `detached`: the detached chain, `spawn(next); spawn(side)`, with [`detached_on`] waiting
//!   for its end off the pool;
//! * `tree`: the binary spawn tree, each inner node scope-spawns its two children;
//! * `nested`: the nested fan-out, one scope spawns `outer` jobs that spawn `inner` each;
//! * `flat`: the wide fan-out, one scope whose body spawns `n` jobs;
//! * `fib`: fib(n) by `join`, no cutoff, the join path for comparison.
//!
//! [`SPAWN_SHAPES`] holds issue 27's four shapes at their sizes, each with a run on either
//! pool through `install`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Links of the spawn-first chain.
pub const CHAIN: usize = 100_000;
/// Levels of the detached chain.
pub const DETACHED: usize = 100_000;
/// Levels of the binary spawn tree: 2^17 leaves.
pub const TREE_LEVELS: u32 = 17;
/// The nested fan-out: `OUTER` jobs spawning `INNER` each.
pub const OUTER: u64 = 1_000;
pub const INNER: u64 = 100;

for_both_pools! {
    fn link<'s>(s: &pl::Scope<'s>, d: usize, leaves: &'s AtomicUsize) {
        if d == 0 {
            return;
        }
        s.spawn(move |s| link(s, d - 1, leaves));
        s.spawn(move |_| {
            // Relaxed: a count read after the scope, which waits for every job.
            leaves.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// The spawn-first chain of `n` links (2n spawns); returns the leaves that ran.
    pub fn chain(n: usize) -> usize {
        let leaves = AtomicUsize::new(0);
        pl::scope(|s| link(s, n, &leaves));
        leaves.into_inner()
    }

    fn next(d: usize, done: Arc<AtomicUsize>) {
        if d == 0 {
            // Release: pairs with `detached_on`'s acquire load.
            done.fetch_add(1, Ordering::Release);
            return;
        }
        let side = done.clone();
        pl::spawn(move || next(d - 1, done));
        pl::spawn(move || {
            // Release: pairs with `detached_on`'s acquire load.
            side.fetch_add(1, Ordering::Release);
        });
    }

    /// Starts the detached chain of `n` levels (2n + 1 spawns) on the calling worker's pool;
    /// `done` reaches `n + 1` once every job ran.
    pub fn detached(n: usize, done: &Arc<AtomicUsize>) {
        let done = done.clone();
        pl::spawn(move || next(n, done));
    }

    fn node<'s>(s: &pl::Scope<'s>, levels: u32, leaves: &'s AtomicUsize) {
        if levels == 0 {
            // Relaxed: a count read after the scope, which waits for every job.
            leaves.fetch_add(1, Ordering::Relaxed);
            return;
        }
        s.spawn(move |s| node(s, levels - 1, leaves));
        s.spawn(move |s| node(s, levels - 1, leaves));
    }

    /// The binary spawn tree with 2^`levels` leaves (2^(`levels` + 1) − 2 spawns); returns the
    /// leaves that ran.
    pub fn tree(levels: u32) -> usize {
        let leaves = AtomicUsize::new(0);
        pl::scope(|s| node(s, levels, &leaves));
        leaves.into_inner()
    }

    /// One scope spawns `outer` jobs, each spawning `inner` leaves on the same scope; returns
    /// the sum of the leaves' indices, 0 to `outer * inner` − 1.
    pub fn nested(outer: u64, inner: u64) -> u64 {
        let total = AtomicU64::new(0);
        pl::scope(|s| {
            for i in 0..outer {
                let total = &total;
                s.spawn(move |s| {
                    for j in 0..inner {
                        s.spawn(move |_| {
                            // Relaxed: a sum read after the scope, which waits for every job.
                            total.fetch_add(black_box(i * inner + j), Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        total.into_inner()
    }

    /// One scope whose body spawns `n` leaves; returns the sum of their indices.
    pub fn flat(n: u64) -> u64 {
        let total = AtomicU64::new(0);
        pl::scope(|s| {
            for i in 0..n {
                let total = &total;
                s.spawn(move |_| {
                    // Relaxed: a sum read after the scope, which waits for every job.
                    total.fetch_add(black_box(i), Ordering::Relaxed);
                });
            }
        });
        total.into_inner()
    }

    /// fib(`n`), one `join` per call with `n` ≥ 2.
    pub fn fib(n: u32) -> u64 {
        if n < 2 {
            return u64::from(n);
        }
        let (a, b) = pl::join(|| fib(n - 1), || fib(n - 2));
        a + b
    }
}

/// Runs a detached chain of `n` levels started by `install` and waits for its end off the
/// pool, yielding between looks; returns `n`.
pub fn detached_on(install: impl FnOnce(&Arc<AtomicUsize>), n: usize) -> usize {
    let done = Arc::new(AtomicUsize::new(0));
    install(&done);
    // Acquire: pairs with the jobs' release, so their effects are done.
    while done.load(Ordering::Acquire) < n + 1 {
        std::thread::yield_now();
    }
    n
}

/// A shape and how one run of it goes on either pool: through `install` on the pool given
/// (and, for the detached chain, a wait off the pool), returning its result.
pub struct Shape {
    /// Name, as in the bench groups `spawn_<name>_t<threads>`.
    pub name: &'static str,
    /// Joins or spawns of one run, as counted in `unit`.
    pub ops: u64,
    pub unit: &'static str,
    /// The result of a correct run.
    pub expected: u64,
    pub treepool: fn(&treepool::ThreadPool) -> u64,
    pub rayon: fn(&rayon::ThreadPool) -> u64,
}

/// The sum of 0 to `n` − 1.
pub const fn index_sum(n: u64) -> u64 {
    n * (n - 1) / 2
}

/// The shape of [`SPAWN_SHAPES`] called `name`.
pub fn spawn_shape(name: &str) -> &'static Shape {
    let shape = SPAWN_SHAPES.iter().find(|s| s.name == name);
    shape.unwrap_or_else(|| panic!("no spawn shape {name:?}"))
}

/// Issue 27's four shapes, at its sizes.
pub const SPAWN_SHAPES: [Shape; 4] = [
    Shape {
        name: "chain_100k",
        ops: 2 * CHAIN as u64,
        unit: "spawn",
        expected: CHAIN as u64,
        treepool: |p| p.install(|| tp::chain(black_box(CHAIN))) as u64,
        rayon: |p| p.install(|| ry::chain(black_box(CHAIN))) as u64,
    },
    Shape {
        name: "detached_100k",
        ops: 2 * DETACHED as u64 + 1,
        unit: "spawn",
        expected: DETACHED as u64,
        treepool: |p| detached_on(|d| p.install(|| tp::detached(DETACHED, d)), DETACHED) as u64,
        rayon: |p| detached_on(|d| p.install(|| ry::detached(DETACHED, d)), DETACHED) as u64,
    },
    Shape {
        name: "tree_2p17",
        ops: (1 << (TREE_LEVELS + 1)) - 2,
        unit: "spawn",
        expected: 1 << TREE_LEVELS,
        treepool: |p| p.install(|| tp::tree(black_box(TREE_LEVELS))) as u64,
        rayon: |p| p.install(|| ry::tree(black_box(TREE_LEVELS))) as u64,
    },
    Shape {
        name: "nested_1000x100",
        ops: OUTER + OUTER * INNER,
        unit: "spawn",
        expected: index_sum(OUTER * INNER),
        treepool: |p| p.install(|| tp::nested(black_box(OUTER), black_box(INNER))),
        rayon: |p| p.install(|| ry::nested(black_box(OUTER), black_box(INNER))),
    },
];
