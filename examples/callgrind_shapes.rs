//! The workloads that `benches/callgrind.sh` counts instructions of, on a one-thread pool:
//! treepool with the builder's default `max_inflight`, or rayon.
//!
//! `callgrind_shapes <shape> <runs> [treepool|rayon]` (default treepool) builds the pool, runs
//! the shape once (warm-up: lazy initialisation, the allocator's first pages, stack segments),
//! then `runs` more times, and checks every result. Under callgrind, (instructions at
//! `runs` = R − instructions at `runs` = 0) / R is the cost of one run: process start, pool
//! start, warm-up and shutdown cancel out. `callgrind_shapes list` prints `<shape> <operations> <unit>` per line, the divisor that
//! turns a run's instructions into instructions per join or per spawn.
//!
//! Shapes (`benches/common/shapes.rs`, included here; every run goes through one
//! `pool.install`, whose round-trip is included; the last four are issue 27's):
//! * `fib25`: fib(25) by `join`, no cutoff: fib(26) − 1 = 121,392 joins.
//! * `flat100k`: one `scope` whose body spawns 100,000 tiny jobs.
//! * `nested1000x100`: one `scope` spawns 1,000 jobs, each spawning 100 tiny jobs
//!   (101,000 spawns).
//! * `chain100k`: a spawn-first chain: each of 100,000 links spawns the next link, then a leaf
//!   (200,000 spawns).
//! * `detached100k`: a detached chain 100,000 deep, `spawn(next); spawn(side)` (200,001
//!   spawns), waited for by the calling thread, which yields between looks at a counter.
//! * `tree2p17`: a binary spawn tree: each inner node spawns its two children, 2^17 leaves
//!   (2^18 − 2 = 262,142 spawns).
//!
//! `cargo build --profile bench --example callgrind_shapes` (release with debug symbols).
#[path = "../benches/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::process::ExitCode;

use common::shapes::{self, index_sum, Shape, SPAWN_SHAPES};

const FLAT: u64 = 100_000;

/// The shapes counted here besides issue 27's.
const OTHERS: [Shape; 2] = [
    Shape {
        name: "fib25",
        ops: 121_392,
        unit: "join",
        expected: 75_025,
        treepool: |p| p.install(|| shapes::tp::fib(black_box(25))),
        rayon: |p| p.install(|| shapes::ry::fib(black_box(25))),
    },
    Shape {
        name: "flat100k",
        ops: FLAT,
        unit: "spawn",
        expected: index_sum(FLAT),
        treepool: |p| p.install(|| shapes::tp::flat(black_box(FLAT))),
        rayon: |p| p.install(|| shapes::ry::flat(black_box(FLAT))),
    },
];

/// Every shape with its name on the command line: the bench name without underscores.
fn all_shapes() -> impl Iterator<Item = (String, &'static Shape)> {
    OTHERS
        .iter()
        .chain(SPAWN_SHAPES.iter())
        .map(|s| (s.name.replace('_', ""), s))
}

fn usage() -> ExitCode {
    let names: Vec<_> = all_shapes().map(|(name, _)| name).collect();
    eprintln!(
        "usage: callgrind_shapes <shape> <runs> [treepool|rayon] | callgrind_shapes list\n\
         shapes: {}",
        names.join(", ")
    );
    ExitCode::FAILURE
}

/// Runs `shape` once, then `runs` more times, on a one-thread pool of `pool`: whether every
/// result was right, `None` for an unknown pool.
fn run(shape: &Shape, runs: u32, pool: &str) -> Option<bool> {
    let right = |result: u64| result == shape.expected;
    match pool {
        "treepool" => {
            let pool = common::treepool_pool(1, None);
            Some((0..=runs).all(|_| right((shape.treepool)(&pool))))
        }
        "rayon" => {
            let pool = common::rayon_pool(1);
            Some((0..=runs).all(|_| right((shape.rayon)(&pool))))
        }
        _ => None,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [cmd] = &args[..] {
        if cmd != "list" {
            return usage();
        }
        for (name, s) in all_shapes() {
            println!("{name} {} {}", s.ops, s.unit);
        }
        return ExitCode::SUCCESS;
    }
    let (name, runs, pool) = match &args[..] {
        [name, runs] => (name, runs, "treepool"),
        [name, runs, pool] => (name, runs, pool.as_str()),
        _ => return usage(),
    };
    let shape = all_shapes().find(|(n, _)| n == name).map(|(_, s)| s);
    let (Some(shape), Ok(runs)) = (shape, runs.parse::<u32>()) else {
        return usage();
    };
    match run(shape, runs, pool) {
        None => usage(),
        Some(true) => ExitCode::SUCCESS,
        Some(false) => {
            eprintln!("{name} on {pool}: wrong result");
            ExitCode::FAILURE
        }
    }
}
