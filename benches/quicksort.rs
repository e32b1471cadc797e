//! Workload 3: quicksort of 1M random `u32` by `join`.
//!
//! Hoare-style partition around a median-of-three pivot, then `join` on the two sides; below
//! 1,000 elements a side is sorted with `sort_unstable`. The input (seeded, so every run sorts
//! the same data) is generated once; each iteration sorts a fresh copy, and the copy is made
//! outside the timed part (`iter_batched`). Group `quicksort_1m_t<threads>`, functions
//! `treepool`, `rayon` (via `pool.install`) and `sequential` (`sort_unstable` on the whole).

#[macro_use]
mod common;

use criterion::{BatchSize, Criterion, SamplingMode};
use rand::{Rng, SeedableRng};

const LEN: usize = 1_000_000;
const CUTOFF: usize = 1000;

/// Hoare partition around the median of three (moved to `v[0]`). Returns `mid` with every
/// element of `v[..mid]` ≤ every element of `v[mid..]`, both sides non-empty (len ≥ 2).
fn partition(v: &mut [u32]) -> usize {
    let len = v.len();
    let m = len / 2;
    if v[m] < v[0] {
        v.swap(0, m);
    }
    if v[len - 1] < v[0] {
        v.swap(0, len - 1);
    }
    if v[len - 1] < v[m] {
        v.swap(m, len - 1);
    }
    v.swap(0, m);
    let pivot = v[0];
    let (mut i, mut j) = (-1isize, len as isize);
    loop {
        i += 1;
        while v[i as usize] < pivot {
            i += 1;
        }
        j -= 1;
        while v[j as usize] > pivot {
            j -= 1;
        }
        if i >= j {
            return j as usize + 1;
        }
        v.swap(i as usize, j as usize);
    }
}

for_both_pools! {
    pub fn quicksort(v: &mut [u32]) {
        if v.len() < CUTOFF {
            v.sort_unstable();
            return;
        }
        let mid = partition(v);
        let (lo, hi) = v.split_at_mut(mid);
        pl::join(|| quicksort(lo), || quicksort(hi));
    }
}

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);

    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7265_6570);
    let input: Vec<u32> = (0..LEN).map(|_| rng.random()).collect();
    let mut sorted = input.clone();
    sorted.sort_unstable();
    let mut v = input.clone();
    tp.install(|| tp::quicksort(&mut v));
    assert!(v == sorted, "treepool quicksort is wrong");
    let mut v = input.clone();
    ry.install(|| ry::quicksort(&mut v));
    assert!(v == sorted, "rayon quicksort is wrong");

    let mut g = c.benchmark_group(common::group_name("quicksort_1m", threads));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("treepool", |b| {
        b.iter_batched_ref(
            || input.clone(),
            |v| tp.install(|| tp::quicksort(v)),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("rayon", |b| {
        b.iter_batched_ref(
            || input.clone(),
            |v| ry.install(|| ry::quicksort(v)),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("sequential", |b| {
        b.iter_batched_ref(
            || input.clone(),
            |v| v.sort_unstable(),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn main() {
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
