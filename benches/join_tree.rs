//! Workload 1: join overhead.
//!
//! Sums a complete binary tree of boxed nodes with one `join` per node and no sequential cutoff
//! (leaves join two empty halves), at 1,023 nodes and 2^20 − 1 nodes. The tree is built once per
//! size, outside the timing loop; the work per node is one add, so the time is almost all join.
//!
//! Each group (`join_tree_<nodes>_t<threads>`) has:
//! * `treepool`, `rayon`: pools of `TREEPOOL_BENCH_THREADS` workers (default 2);
//! * `treepool_1t`, `rayon_1t`: one-worker pools, for the per-join overhead
//!   `(1-thread pool time − sequential time) / joins`, computed by `benches/report.sh`
//!   (joins = nodes);
//! * `sequential`: the same recursion with plain calls.
//!
//! All pool work runs through `pool.install(..)`; the tree sums are timed inside one `install`
//! per criterion sample (`iter_custom`), so the per-join figure is not charged with the install
//! round-trip (cross-thread injection and waking a sleeping worker, tens of µs for rayon). That
//! round-trip has its own group, `install_roundtrip_t<threads>` (`pool.install(|| 1)`).

#[macro_use]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};

pub struct Node {
    val: u64,
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

/// A complete binary tree of `levels` levels (2^levels − 1 nodes), values 1..=n in pre-order.
fn build(levels: u32, next: &mut u64) -> Option<Box<Node>> {
    if levels == 0 {
        return None;
    }
    *next += 1;
    let val = *next;
    let left = build(levels - 1, next);
    let right = build(levels - 1, next);
    Some(Box::new(Node { val, left, right }))
}

/// Runs `f` `iters` times and returns the elapsed time (called inside `install`).
fn timed(iters: u64, f: impl Fn() -> u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    start.elapsed()
}

fn sum_seq(node: &Node) -> u64 {
    let l = node.left.as_deref().map_or(0, sum_seq);
    let r = node.right.as_deref().map_or(0, sum_seq);
    node.val + l + r
}

for_both_pools! {
    /// One join per node, leaves included.
    pub fn sum(node: &Node) -> u64 {
        let (l, r) = pl::join(
            || node.left.as_deref().map_or(0, sum),
            || node.right.as_deref().map_or(0, sum),
        );
        node.val + l + r
    }
}

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);
    let tp1 = common::treepool_pool(1, common::bench_cap());
    let ry1 = common::rayon_pool(1);

    for levels in [10u32, 20] {
        let nodes = (1u64 << levels) - 1;
        let mut next = 0;
        let tree = build(levels, &mut next).expect("non-empty tree");
        let expect = nodes * (nodes + 1) / 2;
        assert_eq!(tp.install(|| tp::sum(&tree)), expect);
        assert_eq!(ry.install(|| ry::sum(&tree)), expect);

        let mut g = c.benchmark_group(common::group_name(&format!("join_tree_{nodes}"), threads));
        if levels >= 16 {
            g.sampling_mode(SamplingMode::Flat);
        }
        let t = &*tree;
        // Timed inside one `install` per sample, so the install round-trip (waking a sleeping
        // worker) is not charged to the joins; `install_roundtrip` measures it on its own.
        g.bench_function("treepool", |b| {
            b.iter_custom(|iters| tp.install(|| timed(iters, || tp::sum(black_box(t)))))
        });
        g.bench_function("rayon", |b| {
            b.iter_custom(|iters| ry.install(|| timed(iters, || ry::sum(black_box(t)))))
        });
        g.bench_function("treepool_1t", |b| {
            b.iter_custom(|iters| tp1.install(|| timed(iters, || tp::sum(black_box(t)))))
        });
        g.bench_function("rayon_1t", |b| {
            b.iter_custom(|iters| ry1.install(|| timed(iters, || ry::sum(black_box(t)))))
        });
        g.bench_function("sequential", |b| b.iter(|| sum_seq(black_box(t))));
        g.finish();
    }

    let mut g = c.benchmark_group(common::group_name("install_roundtrip", threads));
    g.bench_function("treepool", |b| b.iter(|| tp.install(|| black_box(1u64))));
    g.bench_function("rayon", |b| b.iter(|| ry.install(|| black_box(1u64))));
    g.finish();
}

fn main() {
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
