//! Workload 6: a producer loop under backpressure.
//!
//! One scope body "reads" 2,000 items of 100 KB each (allocates and fills a `Vec<u8>` in the loop
//! body) and spawns one job per item that checksums it. rayon's `spawn` never waits, so the loop
//! can run ahead of the workers and hold hundreds of items; treepool's `Scope::spawn` waits for
//! admission, so at most `max_inflight` items are in jobs plus the one being read.
//!
//! Reported:
//! * time: criterion group `producer_2000x100k_t<threads>`, functions `treepool`, `rayon`
//!   (pools of `TREEPOOL_BENCH_THREADS` workers, default 2, through `pool.install`);
//! * peak items alive (+1 when an item's buffer is allocated, −1 when dropped) and peak heap
//!   bytes (counting global allocator around `System`), from separate untimed runs on fresh
//!   pools, as JSON lines in `target/treepool-bench/producer_t<threads>.json`, plus a
//!   `max_inflight` sweep over `TREEPOOL_BENCH_CAPS`.
//!
//! Targets: peak items alive ≤ max_inflight + 1, peak heap ≤ 5% of rayon's, time ratio ≤ 1.00.

#[macro_use]
mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{checksum, Buffer, PeakCounter};
use criterion::{Criterion, SamplingMode};

#[global_allocator]
static ALLOC: common::CountingAlloc = common::CountingAlloc;

const ITEMS: usize = 2_000;
const ITEM_BYTES: usize = 100_000;

/// Items whose buffer is alive.
static ITEMS_ALIVE: PeakCounter = PeakCounter::new();

fn produce_seq(items: usize) -> u64 {
    (0..items)
        .map(|i| checksum(&Buffer::read(i, ITEM_BYTES, &ITEMS_ALIVE).data))
        .fold(0, u64::wrapping_add)
}

for_both_pools! {
    pub fn produce(items: usize) -> u64 {
        let total = AtomicU64::new(0);
        pl::scope(|s| {
            let total = &total;
            for i in 0..items {
                let item = Buffer::read(i, ITEM_BYTES, &ITEMS_ALIVE);
                s.spawn(move |_| {
                    total.fetch_add(checksum(&item.data), Ordering::Relaxed);
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

    let mut g = c.benchmark_group(common::group_name("producer_2000x100k", threads));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("treepool", |b| {
        b.iter(|| tp.install(|| tp::produce(black_box(ITEMS))))
    });
    g.bench_function("rayon", |b| {
        b.iter(|| ry.install(|| ry::produce(black_box(ITEMS))))
    });
    g.finish();
}

fn main() {
    let threads = common::bench_threads();
    if common::mode() != common::Mode::List {
        let expect = produce_seq(ITEMS);
        common::write_figures(
            "producer",
            threads,
            &ITEMS_ALIVE,
            |p| assert_eq!(p.install(|| tp::produce(ITEMS)), expect),
            |p| assert_eq!(p.install(|| ry::produce(ITEMS)), expect),
        );
    }
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
