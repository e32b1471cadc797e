//! Workload 1: join overhead.
//!
//! Sums a complete binary tree of boxed nodes with one `join` per node and no sequential cutoff
//! (leaves join two empty halves), at 1,023 nodes and 2^20 − 1 nodes. The tree is built once per
//! size, outside the timing loop; the work per node is one add, so the time is almost all join.
//!
//! Each group (`join_tree_<nodes>_t<threads>`) has:
//! * `treepool`, `rayon`, `chili`: pools of `TREEPOOL_BENCH_THREADS` threads (default 2);
//! * `chili_every_join`: the same chili pool, every join through chili's own frame
//!   (`join_with_heartbeat_every::<1>`). chili's `join` is that path only once in 64 joins
//!   while its thread's queue holds 3 frames or more; the others are plain calls, `b` then
//!   `a`, whose `b` no thread can ever take. treepool and rayon offer every join's `b`, so this
//!   is the comparison of the same mechanism (see `docs/benchmarks-notes.md`);
//! * `treepool_1t`, `rayon_1t`, `chili_1t`: one-thread pools, for the per-join overhead
//!   `(1-thread pool time − sequential time) / joins`, computed by `benches/report.sh`
//!   (joins = nodes);
//! * `sequential`: the same recursion with plain calls; `sequential_right_first` visits the
//!   right child first, as chili runs `b` before `a`.
//!
//! `build` allocates each node after its children, so a right-first walk reads the big tree in
//! falling address order and runs much faster than a left-first one. The group
//! `join_tree_levelorder_1048575_t<threads>` repeats the 2^20 − 1 sum on a tree allocated level
//! by level, where neither order reads memory in address order.
//!
//! Group `join_tree_1023x200_t<threads>` (`treepool`, `rayon`, `chili`, multi-thread pools): one
//! measured iteration sums the 1,023-node tree 200 times in a row, many short fork-join bursts.
//!
//! treepool and rayon run the work through `pool.install(..)`; the tree sums are timed inside one
//! `install` per criterion sample (`iter_custom`), so the per-join figure is not charged with the
//! install round-trip (cross-thread injection and waking a sleeping worker, tens of µs for
//! rayon). That round-trip has its own group, `install_roundtrip_t<threads>`
//! (`pool.install(|| 1)`).
//!
//! chili has no `install`: `pool.scope()` returns a `Scope` on the calling thread, which runs
//! the work itself, and `s.join(|s| .., |s| ..)` shares the older half of a join with the pool's
//! workers when the scope's heartbeat fires (every 100 µs, chili's default). Its tree sums are
//! timed with one scope per criterion sample, the scope made before the clock starts, as the
//! others are timed inside one `install`; `chili` in `install_roundtrip` is making and dropping
//! a scope. The thread counts match: chili's `Config::thread_count` counts the calling thread
//! (`thread_count − 1` workers are spawned), so a chili pool of `TREEPOOL_BENCH_THREADS` has
//! that many threads running joins, like the treepool and rayon pools of that many workers
//! (whose caller only waits). chili adds one heartbeat thread that runs no jobs.

#[macro_use]
mod common;

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};

use common::timed;

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

/// The same tree with its nodes allocated level by level (breadth first, values 1..=n in that
/// order), so that neither a left-first nor a right-first walk reads memory in address order:
/// the tree `build` makes is allocated children before parent, which a right-first walk (chili
/// runs `b` before `a`) reads in falling address order.
fn build_level_order(levels: u32) -> Box<Node> {
    let mut next = 0;
    let mut rows: Vec<Vec<Box<Node>>> = (0..levels)
        .map(|level| {
            (0..1u64 << level)
                .map(|_| {
                    next += 1;
                    Box::new(Node {
                        val: next,
                        left: None,
                        right: None,
                    })
                })
                .collect()
        })
        .collect();
    // Link bottom up; moving a `Box` keeps its allocation where it is.
    while rows.len() > 1 {
        let children = rows.pop().expect("a row of children");
        let parents = rows.last_mut().expect("a row of parents");
        let mut children = children.into_iter();
        for parent in parents.iter_mut() {
            parent.left = children.next();
            parent.right = children.next();
        }
    }
    rows.pop().and_then(|mut row| row.pop()).expect("a root")
}

/// `reps` runs of `f` in a row, their results added (one measured iteration).
fn repeat(reps: u32, mut f: impl FnMut() -> u64) -> u64 {
    (0..reps).fold(0, |acc, _| acc + f())
}

fn sum_seq(node: &Node) -> u64 {
    let l = node.left.as_deref().map_or(0, sum_seq);
    let r = node.right.as_deref().map_or(0, sum_seq);
    node.val + l + r
}

/// `sum_seq` visiting the right child first, in the order chili's `join` runs its halves (`b`
/// before `a`). The tree is allocated children before parent, so this order reads memory in
/// falling address order, which the big tree rewards (see `docs/benchmarks-notes.md`).
fn sum_seq_right_first(node: &Node) -> u64 {
    let r = node.right.as_deref().map_or(0, sum_seq_right_first);
    let l = node.left.as_deref().map_or(0, sum_seq_right_first);
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

mod ch {
    use super::Node;
    use chili::Scope;

    /// `sum` for chili: one join per node, leaves included.
    pub fn sum(s: &mut Scope<'_>, node: &Node) -> u64 {
        let (l, r) = s.join(
            |s| node.left.as_deref().map_or(0, |n| sum(s, n)),
            |s| node.right.as_deref().map_or(0, |n| sum(s, n)),
        );
        node.val + l + r
    }

    /// `sum` with every join through chili's frame (see the module doc, `chili_every_join`).
    pub fn sum_every_join(s: &mut Scope<'_>, node: &Node) -> u64 {
        let (l, r) = s.join_with_heartbeat_every::<1, _, _, _, _>(
            |s| node.left.as_deref().map_or(0, |n| sum_every_join(s, n)),
            |s| node.right.as_deref().map_or(0, |n| sum_every_join(s, n)),
        );
        node.val + l + r
    }
}

/// A treepool, a rayon and a chili pool of the same thread count.
struct Pools {
    tp: treepool::ThreadPool,
    ry: rayon::ThreadPool,
    ch: chili::ThreadPool,
}

impl Pools {
    fn new(threads: usize) -> Self {
        Self {
            tp: common::treepool_pool(threads, common::bench_cap()),
            ry: common::rayon_pool(threads),
            ch: common::chili_pool(threads),
        }
    }

    /// Checks each pool's sum of `t` against `expect`, once, outside the timing.
    fn check(&self, t: &Node, expect: u64) {
        assert_eq!(self.tp.install(|| tp::sum(t)), expect, "treepool");
        assert_eq!(self.ry.install(|| ry::sum(t)), expect, "rayon");
        assert_eq!(ch::sum(&mut self.ch.scope(), t), expect, "chili");
        assert_eq!(
            ch::sum_every_join(&mut self.ch.scope(), t),
            expect,
            "chili, every join"
        );
    }

    /// Adds `treepool<suffix>`, `rayon<suffix>` and `chili<suffix>` to `g`, and
    /// `chili_every_join` where `suffix` is empty: each measured iteration sums `t` `reps`
    /// times, timed inside one `install` (one chili scope) per sample, so the install
    /// round-trip (waking a sleeping worker) is not charged to the joins; `install_roundtrip`
    /// measures it on its own.
    fn bench(&self, g: &mut BenchmarkGroup<'_, WallTime>, suffix: &str, t: &Node, reps: u32) {
        g.bench_function(format!("treepool{suffix}"), |b| {
            b.iter_custom(|iters| {
                self.tp
                    .install(|| timed(iters, || repeat(reps, || tp::sum(black_box(t)))))
            })
        });
        g.bench_function(format!("rayon{suffix}"), |b| {
            b.iter_custom(|iters| {
                self.ry
                    .install(|| timed(iters, || repeat(reps, || ry::sum(black_box(t)))))
            })
        });
        g.bench_function(format!("chili{suffix}"), |b| {
            b.iter_custom(|iters| {
                let mut s = self.ch.scope();
                timed(iters, || repeat(reps, || ch::sum(&mut s, black_box(t))))
            })
        });
        if suffix.is_empty() {
            g.bench_function("chili_every_join", |b| {
                b.iter_custom(|iters| {
                    let mut s = self.ch.scope();
                    timed(iters, || {
                        repeat(reps, || ch::sum_every_join(&mut s, black_box(t)))
                    })
                })
            });
        }
    }
}

/// Checks every sum of the complete tree `tree` of `levels` levels, then benches it in the group
/// `<name>_<nodes>_t<threads>`: the pools (`pools[0]` multi-thread, `pools[1]` one thread) and
/// both sequential walks.
fn tree_group(c: &mut Criterion, name: &str, levels: u32, tree: &Node, pools: [&Pools; 2]) {
    let nodes = (1u64 << levels) - 1;
    let expect = nodes * (nodes + 1) / 2;
    assert_eq!(sum_seq(tree), expect, "sequential");
    assert_eq!(sum_seq_right_first(tree), expect, "sequential, right first");
    let [multi, one] = pools;
    multi.check(tree, expect);
    one.check(tree, expect);

    let threads = common::bench_threads();
    let mut g = c.benchmark_group(common::group_name(&format!("{name}_{nodes}"), threads));
    if levels >= 16 {
        g.sampling_mode(SamplingMode::Flat);
    }
    multi.bench(&mut g, "", tree, 1);
    one.bench(&mut g, "_1t", tree, 1);
    g.bench_function("sequential", |b| b.iter(|| sum_seq(black_box(tree))));
    g.bench_function("sequential_right_first", |b| {
        b.iter(|| sum_seq_right_first(black_box(tree)))
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let multi = Pools::new(threads);
    let one = Pools::new(1);

    for levels in [10u32, 20] {
        let mut next = 0;
        let tree = build(levels, &mut next).expect("non-empty tree");
        tree_group(c, "join_tree", levels, &tree, [&multi, &one]);
        if levels == 10 {
            let mut g = c.benchmark_group(common::group_name("join_tree_1023x200", threads));
            multi.bench(&mut g, "", &tree, 200);
            g.finish();
        }
    }
    let tree = build_level_order(20);
    tree_group(c, "join_tree_levelorder", 20, &tree, [&multi, &one]);

    let mut g = c.benchmark_group(common::group_name("install_roundtrip", threads));
    g.bench_function("treepool", |b| {
        b.iter(|| multi.tp.install(|| black_box(1u64)))
    });
    g.bench_function("rayon", |b| b.iter(|| multi.ry.install(|| black_box(1u64))));
    // chili has no install: a scope is made on the calling thread (it registers a heartbeat).
    g.bench_function("chili", |b| b.iter(|| drop(black_box(multi.ch.scope()))));
    g.finish();
}

fn main() {
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
