//! Workload 5: the seed's indexer.
//!
//! A walk job spawns 2,000 file jobs. Each file job "reads" its file: it allocates a 100 KB
//! `Vec<u8>` and fills it; then it waits in a nested scope for 2 chunk jobs that checksum the
//! two halves, and drops the buffer. The tree is scope → walk → 2,000 files → 2 chunks each.
//!
//! Reported:
//! * time: criterion group `indexer_2000x100k_t<threads>`, functions `treepool`, `rayon`
//!   (pools of `TREEPOOL_BENCH_THREADS` workers, default 2, through `pool.install`);
//! * peak files in flight (a user-side counter: +1 when a file's buffer is allocated, −1 when it
//!   is dropped) and peak heap bytes (a counting global allocator around `System`), from separate
//!   untimed runs on fresh pools, written as JSON lines to
//!   `target/treepool-bench/indexer_t<threads>.json`, plus a `max_inflight` sweep over
//!   `TREEPOOL_BENCH_CAPS` (e.g. `1,2,4,8,16,64`).
//!
//! Target: time ratio ≤ 1.00 and peak files in flight ≤ max_inflight.

#[macro_use]
mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{checksum, Buffer, PeakCounter};
use criterion::{Criterion, SamplingMode};

#[global_allocator]
static ALLOC: common::CountingAlloc = common::CountingAlloc;

const FILES: usize = 2_000;
const FILE_BYTES: usize = 100_000;

/// Files whose buffer is alive.
static FILES_ALIVE: PeakCounter = PeakCounter::new();

fn combine(a: u64, b: u64) -> u64 {
    a ^ b.rotate_left(17)
}

fn index_seq(files: usize) -> u64 {
    (0..files)
        .map(|i| {
            let buf = Buffer::read(i, FILE_BYTES, &FILES_ALIVE);
            let (lo, hi) = buf.data.split_at(FILE_BYTES / 2);
            combine(checksum(lo), checksum(hi))
        })
        .fold(0, u64::wrapping_add)
}

for_both_pools! {
    fn file(i: usize) -> u64 {
        let buf = Buffer::read(i, FILE_BYTES, &FILES_ALIVE);
        let (lo, hi) = buf.data.split_at(FILE_BYTES / 2);
        let (mut a, mut b) = (0, 0);
        pl::scope(|s| {
            s.spawn(|_| a = checksum(lo));
            s.spawn(|_| b = checksum(hi));
        });
        combine(a, b)
    }

    pub fn index(files: usize) -> u64 {
        let total = AtomicU64::new(0);
        pl::scope(|s| {
            let total = &total;
            // The walk.
            s.spawn(move |s| {
                for i in 0..files {
                    s.spawn(move |_| {
                        total.fetch_add(file(i), Ordering::Relaxed);
                    });
                }
            });
        });
        total.into_inner()
    }
}

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);

    let mut g = c.benchmark_group(common::group_name("indexer_2000x100k", threads));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("treepool", |b| {
        b.iter(|| tp.install(|| tp::index(black_box(FILES))))
    });
    g.bench_function("rayon", |b| {
        b.iter(|| ry.install(|| ry::index(black_box(FILES))))
    });
    g.finish();
}

fn main() {
    let threads = common::bench_threads();
    if common::mode() != common::Mode::List {
        let expect = index_seq(FILES);
        common::write_figures(
            "indexer",
            threads,
            &FILES_ALIVE,
            |p| assert_eq!(p.install(|| tp::index(FILES)), expect),
            |p| assert_eq!(p.install(|| ry::index(FILES)), expect),
        );
    }
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
