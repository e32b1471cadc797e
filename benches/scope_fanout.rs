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
//! through `pool.install`.

#[macro_use]
mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, SamplingMode};

const FLAT: u64 = 100_000;
const OUTER: u64 = 1_000;
const INNER: u64 = 100;
const THREE: (u64, u64, u64) = (10, 10, 1_000);

for_both_pools! {
    pub fn flat(n: u64) -> u64 {
        let total = AtomicU64::new(0);
        pl::scope(|s| {
            for i in 0..n {
                let total = &total;
                s.spawn(move |_| {
                    total.fetch_add(black_box(i), Ordering::Relaxed);
                });
            }
        });
        total.into_inner()
    }

    pub fn nested(outer: u64, inner: u64) -> u64 {
        let total = AtomicU64::new(0);
        pl::scope(|s| {
            for i in 0..outer {
                let total = &total;
                s.spawn(move |s| {
                    for j in 0..inner {
                        s.spawn(move |_| {
                            total.fetch_add(black_box(i * inner + j), Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        total.into_inner()
    }

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

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);

    let flat_sum = FLAT * (FLAT - 1) / 2;
    assert_eq!(tp.install(|| tp::flat(FLAT)), flat_sum);
    assert_eq!(ry.install(|| ry::flat(FLAT)), flat_sum);
    let n = OUTER * INNER;
    let nested_sum = n * (n - 1) / 2;
    assert_eq!(tp.install(|| tp::nested(OUTER, INNER)), nested_sum);
    assert_eq!(ry.install(|| ry::nested(OUTER, INNER)), nested_sum);
    let (x, y, z) = THREE;
    let three_sum = (x * y * z) * (x * y * z - 1) / 2;
    assert_eq!(tp.install(|| tp::three(x, y, z)), three_sum);
    assert_eq!(ry.install(|| ry::three(x, y, z)), three_sum);

    let mut g = c.benchmark_group(common::group_name("scope_flat_100k", threads));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("treepool", |b| b.iter(|| tp.install(|| tp::flat(FLAT))));
    g.bench_function("rayon", |b| b.iter(|| ry.install(|| ry::flat(FLAT))));
    g.finish();

    let mut g = c.benchmark_group(common::group_name("scope_nested_1000x100", threads));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("treepool", |b| {
        b.iter(|| tp.install(|| tp::nested(OUTER, INNER)))
    });
    g.bench_function("rayon", |b| {
        b.iter(|| ry.install(|| ry::nested(OUTER, INNER)))
    });
    g.finish();

    let mut g = c.benchmark_group(common::group_name("scope_three_10x10x1000", threads));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("treepool", |b| b.iter(|| tp.install(|| tp::three(x, y, z))));
    g.bench_function("rayon", |b| b.iter(|| ry.install(|| ry::three(x, y, z))));
    g.finish();
}

fn main() {
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
