//! Issue 27's spawn shapes side by side with rayon, on 1 and 2 threads, in one process
//! (`benches/spawn_shapes.sh` runs it and writes the table into docs/benchmarks.md).
//!
//! Shapes (`benches/common/shapes.rs`, one definition for both pools):
//! * `chain_100k`: the spawn-first chain, each of 100,000 links spawns the next link, then a
//!   leaf;
//! * `detached_100k`: the detached chain 100,000 deep, `spawn(next); spawn(side)`, waited for
//!   off the pool (the calling thread yields until the last job has counted itself);
//! * `tree_2p17`: the binary spawn tree, each inner node scope-spawns its two children, 2^17
//!   leaves;
//! * `nested_1000x100`: one scope spawns 1,000 jobs, each spawning 100 leaves on that scope.
//!
//! Groups `spawn_<shape>_t<threads>` for 1 and 2 threads, functions `treepool` (the builder's
//! default `max_inflight`) and `rayon`; the pools of a thread count are built once, and each
//! iteration is one `pool.install` (plus the wait, for the detached chain). Both pools' results
//! are checked before a group is timed. `TREEPOOL_BENCH_THREADS` and `TREEPOOL_BENCH_CAP` are
//! not read: the thread counts and the cap are the issue's.
//!
//! Defaults: 1 s of warm-up, 4 s of measurement, 20 flat samples per function, about 90 s for
//! the whole binary; `TREEPOOL_BENCH_QUICK=1` and criterion's flags override them.

#[macro_use]
mod common;

use std::time::Duration;

use common::shapes::SPAWN_SHAPES;
use criterion::{Criterion, SamplingMode};

const THREADS: [usize; 2] = [1, 2];

fn bench(c: &mut Criterion) {
    for threads in THREADS {
        let tp = common::treepool_pool(threads, None);
        let ry = common::rayon_pool(threads);
        for shape in &SPAWN_SHAPES {
            let results = ((shape.treepool)(&tp), (shape.rayon)(&ry));
            let expected = (shape.expected, shape.expected);
            assert_eq!(results, expected, "{} on {threads} threads", shape.name);
            let group = common::group_name(&format!("spawn_{}", shape.name), threads);
            let mut g = c.benchmark_group(group);
            g.sampling_mode(SamplingMode::Flat);
            g.bench_function("treepool", |b| b.iter(|| (shape.treepool)(&tp)));
            g.bench_function("rayon", |b| b.iter(|| (shape.rayon)(&ry)));
            g.finish();
        }
    }
}

fn main() {
    let base = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(20);
    let mut c = common::criterion_from(base);
    bench(&mut c);
    c.final_summary();
}
