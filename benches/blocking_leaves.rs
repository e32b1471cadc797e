//! How fast a tree spreads over many threads, on any machine: trees whose leaves *sleep*.
//!
//! A leaf that sleeps needs no CPU, so a pool of 16 threads on a 2-core machine can have 16
//! leaves asleep at once, and a tree's time shows how soon its work reached every thread: the
//! ideal is `ceil(leaves / threads)` leaf times. Each group
//! (`blocking_<shape>_<leaves>_t<threads>`) times `treepool` and `rayon` pools of the same size
//! in one process, through one `pool.install` per iteration; treepool at the builder's default
//! `max_inflight` (`DEFAULT_TOKENS_PER_THREAD` tokens a thread).
//!
//! Shapes, each leaf sleeping [`LEAF`]:
//! * `join`: a binary `join` tree with a leaf at every bottom node (2^5 and 2^7 leaves), the
//!   shape of divide and conquer with a sequential cutoff (a blocked matrix product, a sort);
//! * `scope_tree`: the same tree written with `Scope::spawn` (each inner node spawns its two
//!   children);
//! * `fanout`: one scope whose body spawns every leaf.
//!
//! Before the timed groups, an untimed pass runs each shape [`PEAK_RUNS`] times per pool and
//! records the most leaves asleep at once (the median over the runs, and the least), printed and
//! written as JSON lines to `target/treepool-bench/blocking_leaves_t<threads>.json`. The
//! threads: `TREEPOOL_BENCH_BLOCKING_THREADS` (comma-separated, default `8,16`).
//! `benches/blocking_leaves.sh` runs the bench and writes its table into docs/benchmarks.md.

#[macro_use]
mod common;

use std::time::Duration;

use common::{PeakCounter, J};
use criterion::{Criterion, SamplingMode};

/// How long each leaf sleeps.
const LEAF: Duration = Duration::from_millis(2);
/// Untimed runs per shape and pool for the most leaves asleep at once.
const PEAK_RUNS: usize = 9;

/// Leaves asleep now, and the most at once since the last reset.
static ASLEEP: PeakCounter = PeakCounter::new();

fn leaf() {
    ASLEEP.inc();
    std::thread::sleep(LEAF);
    ASLEEP.dec();
}

for_both_pools! {
    /// A binary join tree of 2^levels leaves.
    pub fn join(levels: u32) {
        if levels == 0 {
            return leaf();
        }
        pl::join(|| join(levels - 1), || join(levels - 1));
    }

    fn spawn_tree<'s>(s: &pl::Scope<'s>, levels: u32) {
        if levels == 0 {
            return leaf();
        }
        s.spawn(move |s| spawn_tree(s, levels - 1));
        s.spawn(move |s| spawn_tree(s, levels - 1));
    }

    /// The same tree, each inner node scope-spawning its two children.
    pub fn scope_tree(levels: u32) {
        pl::scope(|s| spawn_tree(s, levels));
    }

    /// One scope whose body spawns 2^levels leaves.
    pub fn fanout(levels: u32) {
        pl::scope(|s| {
            for _ in 0..1u32 << levels {
                s.spawn(|_| leaf());
            }
        });
    }
}

/// One shape: its name, its sizes (levels), and its run on either pool.
struct Shape {
    name: &'static str,
    levels: &'static [u32],
    treepool: fn(u32),
    rayon: fn(u32),
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "join",
        levels: &[5, 7],
        treepool: tp::join,
        rayon: ry::join,
    },
    Shape {
        name: "scope_tree",
        levels: &[5],
        treepool: tp::scope_tree,
        rayon: ry::scope_tree,
    },
    Shape {
        name: "fanout",
        levels: &[5],
        treepool: tp::fanout,
        rayon: ry::fanout,
    },
];

fn thread_counts() -> Vec<usize> {
    let list = std::env::var("TREEPOOL_BENCH_BLOCKING_THREADS").unwrap_or_else(|_| "8,16".into());
    list.split(',')
        .map(|s| {
            s.trim().parse().unwrap_or_else(|_| {
                panic!("TREEPOOL_BENCH_BLOCKING_THREADS: {s:?} is not a number")
            })
        })
        .collect()
}

/// The most leaves asleep at once in each of `PEAK_RUNS` runs of `run`: (median, least).
fn peaks(run: impl Fn()) -> (usize, usize) {
    let mut peaks: Vec<usize> = (0..PEAK_RUNS)
        .map(|_| {
            ASLEEP.reset();
            run();
            assert_eq!(
                ASLEEP.now(),
                0,
                "a leaf still asleep after its tree returned"
            );
            ASLEEP.peak()
        })
        .collect();
    peaks.sort_unstable();
    (peaks[PEAK_RUNS / 2], peaks[0])
}

fn main() {
    let mut c = common::criterion_from(
        Criterion::default()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(30),
    );
    for threads in thread_counts() {
        let tp_pool = common::treepool_pool(threads, None);
        let ry_pool = common::rayon_pool(threads);
        let mut figures = common::JsonLines::create("blocking_leaves", threads);
        for shape in SHAPES {
            for &levels in shape.levels {
                let group = format!("blocking_{}_{}_t{threads}", shape.name, 1u32 << levels);
                if common::mode() != common::Mode::List {
                    let (tp, tp_least) = peaks(|| tp_pool.install(|| (shape.treepool)(levels)));
                    let (ry, ry_least) = peaks(|| ry_pool.install(|| (shape.rayon)(levels)));
                    println!(
                        "{group}: most leaves asleep at once, median (least) of {PEAK_RUNS} \
                         runs: treepool {tp} ({tp_least}), rayon {ry} ({ry_least})"
                    );
                    figures.line(&[
                        ("group", J::S(group.clone())),
                        ("leaves", J::U(1u128 << levels)),
                        ("treepool_peak_asleep", J::U(tp as u128)),
                        ("treepool_least_peak", J::U(tp_least as u128)),
                        ("rayon_peak_asleep", J::U(ry as u128)),
                        ("rayon_least_peak", J::U(ry_least as u128)),
                    ]);
                }
                let mut g = c.benchmark_group(group);
                g.sampling_mode(SamplingMode::Flat);
                g.bench_function("treepool", |b| {
                    b.iter(|| tp_pool.install(|| (shape.treepool)(levels)))
                });
                g.bench_function("rayon", |b| {
                    b.iter(|| ry_pool.install(|| (shape.rayon)(levels)))
                });
                g.finish();
            }
        }
    }
    c.final_summary();
}
