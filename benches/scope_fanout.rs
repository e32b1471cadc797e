//! Workload 4: scope fan-out.
//!
//! * `scope_flat_100k_t<threads>`: one scope whose body spawns 100,000 tiny jobs (each adds its
//!   index to a shared relaxed atomic, checked afterwards).
//! * `scope_nested_1000x100_t<threads>`: one scope spawns 1,000 jobs, each of which spawns 100
//!   tiny jobs on the same scope (100,000 leaves + 1,000 inner jobs).
//! * `scope_three_10x10x1000_t<threads>`: three levels, 10 × 10 inner jobs spawning 1,000 tiny
//!   jobs each on the same scope (100,000 leaves + 110 inner jobs).
//!
//! This is the spawn path: boxing a job, treepool's admission in `Scope::spawn` (which may wait
//! while helping) against rayon's push-and-return, and the scope's completion counting.
//! Functions `treepool` and `rayon` on pools of `TREEPOOL_BENCH_THREADS` workers (default 2),
//! through `pool.install`; `treepool_1t` and `rayon_1t` on pools of one worker (the per-spawn
//! cost without any stealing).
//!
//! `TREEPOOL_BENCH_CALLGRIND=<workload>:<runs>` runs one shape on a one-thread treepool pool
//! instead, for callgrind (see `common::callgrind_request`).
//!
//! `flat` and `nested` are `benches/common/shapes.rs`'s, shared with `benches/spawn_shapes.rs`.
//!
//! Before the timed groups, one untimed run of each shape per pool counts its allocation calls
//! (`common::CallCountingAlloc`) and writes them, per spawn, as JSON lines to
//! `target/treepool-bench/scope_fanout_t<threads>.json`.

#[macro_use]
mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use common::shapes::{self, index_sum, INNER, OUTER};
use common::J;
use criterion::{Criterion, SamplingMode};

#[global_allocator]
static ALLOC: common::CallCountingAlloc = common::CallCountingAlloc;

const FLAT: u64 = 100_000;
const THREE: (u64, u64, u64) = (10, 10, 1_000);

for_both_pools! {
    pub fn three(a: u64, b: u64, c: u64) -> u64 {
        let total = AtomicU64::new(0);
        pl::scope(|s| {
            for i in 0..a {
                let total = &total;
                s.spawn(move |s| {
                    for j in 0..b {
                        s.spawn(move |s| {
                            for k in 0..c {
                                s.spawn(move |_| {
                                    let leaf = (i * b + j) * c + k;
                                    total.fetch_add(black_box(leaf), Ordering::Relaxed);
                                });
                            }
                        });
                    }
                });
            }
        });
        total.into_inner()
    }
}

/// A fan-out shape: its group, its spawn count, and how each pool runs it.
struct Shape {
    workload: &'static str,
    spawns: u64,
    sum: u64,
    tp: fn() -> u64,
    ry: fn() -> u64,
}

fn fanouts() -> [Shape; 3] {
    let n = OUTER * INNER;
    let (x, y, z) = THREE;
    [
        Shape {
            workload: "scope_flat_100k",
            spawns: FLAT,
            sum: index_sum(FLAT),
            tp: || shapes::tp::flat(FLAT),
            ry: || shapes::ry::flat(FLAT),
        },
        Shape {
            workload: "scope_nested_1000x100",
            spawns: OUTER + n,
            sum: index_sum(n),
            tp: || shapes::tp::nested(OUTER, INNER),
            ry: || shapes::ry::nested(OUTER, INNER),
        },
        Shape {
            workload: "scope_three_10x10x1000",
            spawns: x + x * y + x * y * z,
            sum: index_sum(x * y * z),
            tp: || tp::three(THREE.0, THREE.1, THREE.2),
            ry: || ry::three(THREE.0, THREE.1, THREE.2),
        },
    ]
}

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);
    let tp1 = common::treepool_pool(1, common::bench_cap());
    let ry1 = common::rayon_pool(1);

    let mut figures = common::JsonLines::create("scope_fanout", threads);
    for shape in fanouts() {
        let runs: [(&str, &dyn Fn() -> u64); 2] = [
            ("treepool", &|| tp.install(shape.tp)),
            ("rayon", &|| ry.install(shape.ry)),
        ];
        for (pool, run) in runs {
            assert_eq!(run(), shape.sum, "{} on {pool}", shape.workload);
            let calls = common::count_allocations(|| assert_eq!(run(), shape.sum));
            let per_spawn = calls as f64 / shape.spawns as f64;
            println!(
                "{} {pool}: {per_spawn:.3} allocations per spawn",
                shape.workload
            );
            figures.line(&[
                ("workload", J::S(shape.workload.into())),
                ("pool", J::S(pool.into())),
                ("threads", J::U(threads as u128)),
                ("spawns", J::U(shape.spawns as u128)),
                ("allocations_per_spawn", J::F(per_spawn)),
            ]);
        }

        let mut g = c.benchmark_group(common::group_name(shape.workload, threads));
        g.sampling_mode(SamplingMode::Flat);
        g.bench_function("treepool", |b| b.iter(|| tp.install(shape.tp)));
        g.bench_function("rayon", |b| b.iter(|| ry.install(shape.ry)));
        g.bench_function("treepool_1t", |b| b.iter(|| tp1.install(shape.tp)));
        g.bench_function("rayon_1t", |b| b.iter(|| ry1.install(shape.ry)));
        g.finish();
    }
}

fn main() {
    if let Some((workload, runs)) = common::callgrind_request() {
        let tp1 = common::treepool_pool(1, common::bench_cap());
        let shape = fanouts().into_iter().find(|s| s.workload == workload);
        let shape = shape.unwrap_or_else(|| panic!("no fan-out workload {workload:?}"));
        return common::callgrind_runs(runs, || assert_eq!(tp1.install(shape.tp), shape.sum));
    }
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
