//! Workload: an ordered streaming map (`Scope::map_ordered`) against pariter and rayon.
//!
//! A source of numbered items is mapped in parallel and the results are consumed in input
//! order on the calling thread, with items of about 1 µs and about 100 µs of CPU each:
//!
//! * `treepool`: `pool.in_place_scope(|s| s.map_ordered(items, f).window(W))`, the consumer on
//!   the bench's thread (not a worker), `W` = 2 × threads;
//! * `treepool_in_pool`: the same in `pool.scope`, the consumer on a worker (it runs items itself
//!   while it waits, so the stream uses the pool's threads only);
//! * `pariter`: `items.parallel_map_custom(|o| o.threads(T).buffer_size(W), f)` (its default
//!   buffer is also 2 × threads), which starts its own `T` threads per stream;
//! * `rayon`: `items.par_bridge().map(f).collect()` into a `Vec`, then a sort by index (rayon
//!   keeps no order and no window: every result is held until the end).
//!
//! Reported: criterion groups `ordered_1us_t<threads>` (20,000 items) and
//! `ordered_100us_t<threads>` (400 items); divide by the item count for the cost per item. The
//! sequential time of one item is printed first, to check the nominal costs on this machine.

#[macro_use]
#[allow(unused_macros)]
mod common;

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, SamplingMode};
use pariter::IteratorExt;
use rayon::iter::{ParallelBridge, ParallelIterator};

/// Spin iterations of about 1 µs on the machine the figures in docs/benchmarks.md come from.
const PER_MICRO: u64 = 900;

/// About `micros` µs of CPU, depending on `seed`.
fn work(seed: u64, micros: u64) -> u64 {
    let mut x = seed;
    for _ in 0..micros * PER_MICRO {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    x
}

/// The expected fold of the results in order.
fn checksum(results: impl Iterator<Item = u64>) -> u64 {
    results.fold(0, |acc, r| acc.rotate_left(5) ^ r)
}

fn treepool_run(pool: &treepool::ThreadPool, items: u64, micros: u64, window: usize) -> u64 {
    pool.in_place_scope(|s| {
        checksum(
            s.map_ordered(0..items, move |i| work(i, micros))
                .window(window),
        )
    })
}

fn treepool_in_pool_run(
    pool: &treepool::ThreadPool,
    items: u64,
    micros: u64,
    window: usize,
) -> u64 {
    pool.scope(|s| {
        checksum(
            s.map_ordered(0..items, move |i| work(i, micros))
                .window(window),
        )
    })
}

fn pariter_run(items: u64, micros: u64, threads: usize, window: usize) -> u64 {
    checksum((0..items).parallel_map_custom(
        |o| o.threads(threads).buffer_size(window),
        move |i| work(i, micros),
    ))
}

fn rayon_run(pool: &rayon::ThreadPool, items: u64, micros: u64) -> u64 {
    let mut results: Vec<(u64, u64)> = pool.install(|| {
        (0..items)
            .par_bridge()
            .map(|i| (i, work(i, micros)))
            .collect()
    });
    results.sort_unstable_by_key(|&(i, _)| i);
    checksum(results.into_iter().map(|(_, r)| r))
}

fn bench(c: &mut Criterion, name: &str, items: u64, micros: u64) {
    let threads = common::bench_threads();
    let window = 2 * threads;
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);
    let expect = checksum((0..items).map(|i| work(i, micros)));
    assert_eq!(treepool_run(&tp, items, micros, window), expect);
    assert_eq!(treepool_in_pool_run(&tp, items, micros, window), expect);
    assert_eq!(pariter_run(items, micros, threads, window), expect);
    assert_eq!(rayon_run(&ry, items, micros), expect);

    let mut g = c.benchmark_group(common::group_name(name, threads));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("treepool", |b| {
        b.iter(|| treepool_run(&tp, black_box(items), micros, window))
    });
    g.bench_function("treepool_in_pool", |b| {
        b.iter(|| treepool_in_pool_run(&tp, black_box(items), micros, window))
    });
    g.bench_function("pariter", |b| {
        b.iter(|| pariter_run(black_box(items), micros, threads, window))
    });
    g.bench_function("rayon", |b| {
        b.iter(|| rayon_run(&ry, black_box(items), micros))
    });
    g.finish();
}

fn main() {
    if common::mode() != common::Mode::List {
        for micros in [1, 100] {
            let start = Instant::now();
            let n = 10_000 / micros;
            black_box((0..n).map(|i| work(i, micros)).sum::<u64>());
            let each = start.elapsed().as_nanos() as f64 / n as f64;
            println!("one item of nominal {micros} µs: {each:.0} ns sequentially");
        }
    }
    let mut c = common::criterion();
    bench(&mut c, "ordered_1us", 20_000, 1);
    bench(&mut c, "ordered_100us", 400, 100);
    c.final_summary();
}
