//! Workload 2: fib(25) and fib(30) by `join`, no sequential cutoff.
//!
//! Every call with n ≥ 2 is one `join` of fib(n−1) and fib(n−2): about 121k joins for fib(25)
//! and 1.35M for fib(30). This measures the join fast path (pop back, no steal) and the cost of
//! stealing small jobs. Groups `fib_<n>_t<threads>`, functions `treepool`, `rayon` (pools of
//! `TREEPOOL_BENCH_THREADS` workers, default 2, via `pool.install`) and `sequential`.

#[macro_use]
mod common;

use std::hint::black_box;

use criterion::{Criterion, SamplingMode};

fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        u64::from(n)
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

for_both_pools! {
    pub fn fib(n: u32) -> u64 {
        if n < 2 {
            return u64::from(n);
        }
        let (a, b) = pl::join(|| fib(n - 1), || fib(n - 2));
        a + b
    }
}

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);

    for n in [25u32, 30] {
        let expect = fib_seq(n);
        assert_eq!(tp.install(|| tp::fib(n)), expect);
        assert_eq!(ry.install(|| ry::fib(n)), expect);

        let mut g = c.benchmark_group(common::group_name(&format!("fib_{n}"), threads));
        if n >= 30 {
            g.sampling_mode(SamplingMode::Flat);
        }
        g.bench_function("treepool", |b| {
            b.iter(|| tp.install(|| tp::fib(black_box(n))))
        });
        g.bench_function("rayon", |b| b.iter(|| ry.install(|| ry::fib(black_box(n)))));
        g.bench_function("sequential", |b| b.iter(|| fib_seq(black_box(n))));
        g.finish();
    }
}

fn main() {
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
