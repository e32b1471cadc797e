//! Workload 2: fib(25) and fib(30) by `join`, no sequential cutoff.
//!
//! Every call with n ≥ 2 is one `join` of fib(n−1) and fib(n−2): fib(n+1) − 1 joins, 121,392
//! for fib(25) and 1,346,268 for fib(30). This measures the join fast path (pop back, no steal)
//! and the cost of stealing small jobs. Groups `fib_<n>_t<threads>`, functions:
//! * `treepool`, `rayon` (pools of `TREEPOOL_BENCH_THREADS` workers, default 2, one
//!   `pool.install` per iteration) and `chili` (a chili pool of the same thread count, one
//!   `pool.scope()` per iteration, see below), and `chili_every_join`: the same chili pool with
//!   every join through chili's own frame (`join_with_heartbeat_every::<1>`; see
//!   `benches/join_tree.rs`: chili's `join` frames one join in 64 once its queue holds 3);
//! * `sequential`;
//! * fib(25) only: `treepool_1t`, `rayon_1t`, `chili_1t`, one-thread pools for the per-join
//!   overhead `(1-thread pool time − sequential time) / joins`, computed by
//!   `benches/report.sh`. These are timed inside one `install` (one chili scope) per criterion
//!   sample (`iter_custom`), as in `join_tree`, so the install round-trip is not charged to the
//!   joins.
//!
//! `TREEPOOL_BENCH_CALLGRIND=fib_25:<runs>` runs fib(25) on a one-thread treepool pool instead,
//! for callgrind (see `common::callgrind_request`).
//!
//! chili has no `install`: `pool.scope()` returns a `Scope` on the calling thread, which runs
//! the work itself; `s.join(|s| .., |s| ..)` shares work with the pool's workers when the
//! scope's heartbeat fires (every 100 µs, chili's default). chili's `Config::thread_count`
//! counts the calling thread (`thread_count − 1` workers are spawned), so a chili pool of
//! `TREEPOOL_BENCH_THREADS` has that many threads running joins, like the treepool and rayon
//! pools of that many workers (whose caller only waits); chili adds one heartbeat thread that
//! runs no jobs.

mod common;

use std::hint::black_box;

use criterion::{Criterion, SamplingMode};

use common::timed;

fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        u64::from(n)
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

use common::shapes::{ry, tp};

mod ch {
    use chili::Scope;

    /// `fib` for chili: one join per call with n ≥ 2.
    pub fn fib(s: &mut Scope<'_>, n: u32) -> u64 {
        if n < 2 {
            return u64::from(n);
        }
        let (a, b) = s.join(|s| fib(s, n - 1), |s| fib(s, n - 2));
        a + b
    }

    /// `fib` with every join through chili's frame.
    pub fn fib_every_join(s: &mut Scope<'_>, n: u32) -> u64 {
        if n < 2 {
            return u64::from(n);
        }
        let (a, b) = s.join_with_heartbeat_every::<1, _, _, _, _>(
            |s| fib_every_join(s, n - 1),
            |s| fib_every_join(s, n - 2),
        );
        a + b
    }
}

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);
    let ch = common::chili_pool(threads);
    let tp1 = common::treepool_pool(1, common::bench_cap());
    let ry1 = common::rayon_pool(1);
    let ch1 = common::chili_pool(1);

    for n in [25u32, 30] {
        let expect = fib_seq(n);
        assert_eq!(tp.install(|| tp::fib(n)), expect);
        assert_eq!(ry.install(|| ry::fib(n)), expect);
        assert_eq!(ch::fib(&mut ch.scope(), n), expect);
        assert_eq!(ch::fib_every_join(&mut ch.scope(), n), expect);

        let mut g = c.benchmark_group(common::group_name(&format!("fib_{n}"), threads));
        if n >= 30 {
            g.sampling_mode(SamplingMode::Flat);
        }
        g.bench_function("treepool", |b| {
            b.iter(|| tp.install(|| tp::fib(black_box(n))))
        });
        g.bench_function("rayon", |b| b.iter(|| ry.install(|| ry::fib(black_box(n)))));
        g.bench_function("chili", |b| {
            b.iter(|| ch::fib(&mut ch.scope(), black_box(n)))
        });
        g.bench_function("chili_every_join", |b| {
            b.iter(|| ch::fib_every_join(&mut ch.scope(), black_box(n)))
        });
        if n == 25 {
            assert_eq!(tp1.install(|| tp::fib(n)), expect);
            assert_eq!(ry1.install(|| ry::fib(n)), expect);
            assert_eq!(ch::fib(&mut ch1.scope(), n), expect);
            g.bench_function("treepool_1t", |b| {
                b.iter_custom(|iters| tp1.install(|| timed(iters, || tp::fib(black_box(n)))))
            });
            g.bench_function("rayon_1t", |b| {
                b.iter_custom(|iters| ry1.install(|| timed(iters, || ry::fib(black_box(n)))))
            });
            g.bench_function("chili_1t", |b| {
                b.iter_custom(|iters| {
                    let mut s = ch1.scope();
                    timed(iters, || ch::fib(&mut s, black_box(n)))
                })
            });
        }
        g.bench_function("sequential", |b| b.iter(|| fib_seq(black_box(n))));
        g.finish();
    }
}

fn main() {
    if let Some((workload, runs)) = common::callgrind_request() {
        let n = match workload.as_str() {
            "fib_25" => 25,
            "fib_30" => 30,
            _ => panic!("no fib workload {workload:?}"),
        };
        let tp1 = common::treepool_pool(1, common::bench_cap());
        return common::callgrind_runs(runs, || {
            black_box(tp1.install(|| tp::fib(n)));
        });
    }
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
