//! The workloads that `benches/callgrind.sh` counts instructions of, on a one-thread treepool
//! pool with the builder's default `max_inflight`.
//!
//! `callgrind_shapes <shape> <runs>` builds the pool, runs the shape once (warm-up: lazy
//! initialisation, the allocator's first pages, stack segments), then `runs` more times, and
//! checks every result. Under callgrind, (instructions at `runs` = R − instructions at
//! `runs` = 0) / R is the cost of one run: process start, pool start, warm-up and shutdown cancel
//! out. `callgrind_shapes list` prints `<shape> <operations> <unit>` per line, the divisor that
//! turns a run's instructions into instructions per join or per spawn.
//!
//! Shapes (every run goes through one `pool.install`, whose round-trip is included):
//! * `fib25`: fib(25) by `treepool::join`, no cutoff: fib(26) − 1 = 121,392 joins.
//! * `flat100k`: one `scope` whose body spawns 100,000 tiny jobs.
//! * `nested1000x100`: one `scope` spawns 1,000 jobs, each spawning 100 tiny jobs
//!   (101,000 spawns).
//! * `chain100k`: a spawn-first chain: each of 100,000 links spawns the next link, then a leaf
//!   (200,000 spawns).
//! * `tree2p17`: a binary spawn tree: each inner node spawns its two children, 2^17 leaves
//!   (2^18 − 2 = 262,142 spawns).
//!
//! `cargo build --profile bench --example callgrind_shapes` (release with debug symbols).
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const FLAT: u64 = 100_000;
const OUTER: u64 = 1_000;
const INNER: u64 = 100;
const CHAIN: usize = 100_000;
const TREE_LEVELS: u32 = 17;

/// A workload: its name, how many joins or spawns one run makes, and the run itself, which
/// returns whether its result was right.
struct Shape {
    name: &'static str,
    ops: u64,
    unit: &'static str,
    run: fn() -> bool,
}

const SHAPES: [Shape; 5] = [
    Shape {
        name: "fib25",
        ops: 121_392,
        unit: "join",
        run: || fib(black_box(25)) == 75_025,
    },
    Shape {
        name: "flat100k",
        ops: FLAT,
        unit: "spawn",
        run: || flat(black_box(FLAT)) == FLAT * (FLAT - 1) / 2,
    },
    Shape {
        name: "nested1000x100",
        ops: OUTER + OUTER * INNER,
        unit: "spawn",
        run: || {
            let n = OUTER * INNER;
            nested(black_box(OUTER), black_box(INNER)) == n * (n - 1) / 2
        },
    },
    Shape {
        name: "chain100k",
        ops: 2 * CHAIN as u64,
        unit: "spawn",
        run: || chain(black_box(CHAIN)) == CHAIN,
    },
    Shape {
        name: "tree2p17",
        ops: (1 << (TREE_LEVELS + 1)) - 2,
        unit: "spawn",
        run: || tree(black_box(TREE_LEVELS)) == 1 << TREE_LEVELS,
    },
];

fn fib(n: u32) -> u64 {
    if n < 2 {
        return u64::from(n);
    }
    let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn flat(n: u64) -> u64 {
    let total = AtomicU64::new(0);
    treepool::scope(|s| {
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

fn nested(outer: u64, inner: u64) -> u64 {
    let total = AtomicU64::new(0);
    treepool::scope(|s| {
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

fn link<'s>(s: &treepool::Scope<'s>, d: usize, leaves: &'s AtomicUsize) {
    if d == 0 {
        return;
    }
    s.spawn(move |s| link(s, d - 1, leaves));
    s.spawn(move |_| {
        // Relaxed: a count read after the scope, which waits for every job.
        leaves.fetch_add(1, Ordering::Relaxed);
    });
}

/// The spawn-first chain of `n` links; returns the leaves that ran.
fn chain(n: usize) -> usize {
    let leaves = AtomicUsize::new(0);
    treepool::scope(|s| link(s, n, &leaves));
    leaves.into_inner()
}

fn node<'s>(s: &treepool::Scope<'s>, levels: u32, leaves: &'s AtomicUsize) {
    if levels == 0 {
        // Relaxed: a count read after the scope, which waits for every job.
        leaves.fetch_add(1, Ordering::Relaxed);
        return;
    }
    s.spawn(move |s| node(s, levels - 1, leaves));
    s.spawn(move |s| node(s, levels - 1, leaves));
}

/// The binary spawn tree with 2^`levels` leaves; returns the leaves that ran.
fn tree(levels: u32) -> usize {
    let leaves = AtomicUsize::new(0);
    treepool::scope(|s| node(s, levels, &leaves));
    leaves.into_inner()
}

fn usage() -> ExitCode {
    let names: Vec<_> = SHAPES.iter().map(|s| s.name).collect();
    eprintln!(
        "usage: callgrind_shapes <shape> <runs> | callgrind_shapes list\nshapes: {}",
        names.join(", ")
    );
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd] = &args[..] {
        if cmd != "list" {
            return usage();
        }
        for s in &SHAPES {
            println!("{} {} {}", s.name, s.ops, s.unit);
        }
        return ExitCode::SUCCESS;
    }
    let [name, runs] = &args[..] else {
        return usage();
    };
    let (Some(shape), Ok(runs)) = (SHAPES.iter().find(|s| s.name == name), runs.parse::<u32>())
    else {
        return usage();
    };
    let pool = treepool::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool");
    for i in 0..=runs {
        if !pool.install(shape.run) {
            eprintln!("{}: wrong result in run {i}", shape.name);
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
