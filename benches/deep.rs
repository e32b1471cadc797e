//! Workload 8: deep spawn trees, whose depth is their length (issue "Never overflow the
//! stack").
//!
//! * `chain`: `link(s, d)` spawns `link(s, d - 1)` first, then a leaf; 100,000 links.
//! * `queue`: a work queue; each job pops the best item of a shared `BinaryHeap`, pushes three
//!   and spawns three jobs; 200,000 jobs.
//! * `detached`: `spawn(next); spawn(side)`, 100,000 deep.
//! * `tsp`: rayon-demo's branch-and-bound TSP solver (`tests/common/tsp.rs`), 11 random cities,
//!   each job taking the best partial tour from a shared queue (about 130,000 jobs).
//!
//! `chain` and `detached` are `benches/common/shapes.rs`'s, shared with `benches/spawn_shapes.rs`.
//!
//! Time (criterion): each shape on both pools of `TREEPOOL_BENCH_THREADS` workers (default 2),
//! treepool at its default cap, through `pool.install`.
//!
//! Memory (not criterion): each of the first three shapes on a fresh pool in a child process of
//! this binary (`TREEPOOL_DEEP_CHILD`), which reports its peak RSS (`VmHWM`) above its RSS just
//! before the run, with treepool's `peak_depth`, `peak_inflight` and `stack_segments`: treepool
//! at 1 thread and `max_inflight(1)` (the lending rules keep every level of the chain in
//! flight) and at `TREEPOOL_BENCH_THREADS` with the default cap; rayon at 1 thread and at
//! `TREEPOOL_BENCH_THREADS`. Written as JSON lines to `target/treepool-bench/deep_t<threads>.json`.

#[macro_use]
mod common;

use std::collections::BinaryHeap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use common::shapes::{self, detached_on, CHAIN, DETACHED};
use common::J;
use criterion::{Criterion, SamplingMode};

const QUEUE: usize = 200_000;
const TSP_CITIES: usize = 11;
const TSP_SEQ_THRESHOLD: usize = 4;
/// Set in the memory runs' child processes: `<pool> <shape> <threads> <cap or default>`.
const CHILD_ENV: &str = "TREEPOOL_DEEP_CHILD";

for_both_pools! {
    #[allow(dead_code)]
    mod tsp {
        use super::pl;
        include!("../tests/common/tsp.rs");
    }

    fn work<'s>(s: &pl::Scope<'s>, heap: &'s Mutex<BinaryHeap<u64>>, jobs: &'s AtomicUsize, n: usize) {
        let Some(item) = heap.lock().unwrap().pop() else { return };
        for k in 0..3 {
            if jobs.fetch_add(1, Ordering::Relaxed) >= n {
                return;
            }
            heap.lock().unwrap().push(item.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(k));
            s.spawn(move |s| work(s, heap, jobs, n));
        }
    }

    /// The work queue of `n` jobs; returns the jobs spawned.
    pub fn queue(n: usize) -> usize {
        let heap = Mutex::new(BinaryHeap::from(vec![1u64]));
        let jobs = AtomicUsize::new(0);
        pl::scope(|s| s.spawn(|s| work(s, &heap, &jobs, n)));
        jobs.into_inner().min(n)
    }

    /// rayon-demo's TSP on `TSP_CITIES` random cities; returns the shortest tour's length.
    pub fn tsp() -> u64 {
        let cities = tsp::Cities::random(TSP_CITIES, 7);
        let solver = tsp::Solver::new(&cities, TSP_SEQ_THRESHOLD);
        solver.solve().expect("a tour").0
    }
}

/// One shape's run on one pool, returning what the run counted.
type Run<'a> = &'a dyn Fn() -> u64;

fn bench(c: &mut Criterion) {
    let threads = common::bench_threads();
    let tp = common::treepool_pool(threads, common::bench_cap());
    let ry = common::rayon_pool(threads);
    let chain = shapes::spawn_shape("chain_100k");
    let detached = shapes::spawn_shape("detached_100k");
    let runs: [(&str, Run, Run); 4] = [
        ("deep_chain_100k", &|| (chain.treepool)(&tp), &|| {
            (chain.rayon)(&ry)
        }),
        (
            "deep_queue_200k",
            &|| tp.install(|| tp::queue(QUEUE)) as u64,
            &|| ry.install(|| ry::queue(QUEUE)) as u64,
        ),
        ("deep_detached_100k", &|| (detached.treepool)(&tp), &|| {
            (detached.rayon)(&ry)
        }),
        ("deep_tsp_11", &|| tp.install(tp::tsp), &|| {
            ry.install(ry::tsp)
        }),
    ];
    for (name, on_tp, on_ry) in runs {
        assert_eq!(on_tp(), on_ry(), "{name}: the pools disagree");
        let mut g = c.benchmark_group(common::group_name(name, threads));
        g.sampling_mode(SamplingMode::Flat).sample_size(20);
        g.bench_function("treepool", |b| b.iter(on_tp));
        g.bench_function("rayon", |b| b.iter(on_ry));
        g.finish();
    }
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`); 0 where there is none.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The memory run of one child: prints one JSON object on stdout.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let [pool, shape, threads, cap] = parts[..] else {
        panic!("{CHILD_ENV}={spec:?}: expected `<pool> <shape> <threads> <cap>`");
    };
    let threads: usize = threads.parse().expect("threads");
    let cap: Option<usize> = (cap != "default").then(|| cap.parse().expect("cap"));
    let size = match shape {
        "chain" => CHAIN,
        "queue" => QUEUE,
        _ => DETACHED,
    };
    let (before, start, stats) = match pool {
        "treepool" => {
            let p = common::treepool_pool(threads, cap);
            p.install(|| ()); // workers started
            let (before, start) = (status_bytes("VmRSS"), Instant::now());
            match shape {
                "chain" => assert_eq!(p.install(|| shapes::tp::chain(size)), size),
                "queue" => assert_eq!(p.install(|| tp::queue(size)), size),
                _ => _ = detached_on(|d| p.install(|| shapes::tp::detached(size, d)), size),
            }
            (before, start, Some(p.stats()))
        }
        _ => {
            let p = common::rayon_pool(threads);
            p.install(|| ());
            let (before, start) = (status_bytes("VmRSS"), Instant::now());
            match shape {
                "chain" => assert_eq!(p.install(|| shapes::ry::chain(size)), size),
                "queue" => assert_eq!(p.install(|| ry::queue(size)), size),
                _ => _ = detached_on(|d| p.install(|| shapes::ry::detached(size, d)), size),
            }
            (before, start, None)
        }
    };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let peak = status_bytes("VmHWM").saturating_sub(before);
    let (depth, inflight, segments) = stats.map_or((0, 0, 0), |s| {
        (s.peak_depth, s.peak_inflight, s.stack_segments)
    });
    println!(
        "{{\"peak_rss_bytes\": {peak}, \"ms\": {ms:.2}, \"peak_depth\": {depth}, \
         \"peak_inflight\": {inflight}, \"stack_segments\": {segments}, \"size\": {size}}}"
    );
}

/// The memory table: every (pool, shape, configuration) in a child process of its own.
fn memory(threads: usize) {
    if common::mode() == common::Mode::List {
        return;
    }
    let mut out = common::JsonLines::create("deep", threads);
    let configs = [
        ("treepool", 1, "1".to_string()),
        ("treepool", threads, "default".to_string()),
        ("rayon", 1, "default".to_string()),
        ("rayon", threads, "default".to_string()),
    ];
    for shape in ["chain", "queue", "detached"] {
        for (pool, t, cap) in &configs {
            let spec = format!("{pool} {shape} {t} {cap}");
            let output = Command::new(std::env::current_exe().expect("this bench binary"))
                .env(CHILD_ENV, &spec)
                .output()
                .expect("run the memory child");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let figures = stdout.lines().rev().find(|l| l.starts_with('{'));
            let Some(figures) = figures.filter(|_| output.status.success()) else {
                panic!(
                    "memory child `{spec}` failed: {}\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
            };
            println!("deep memory {spec}: {figures}");
            // The child's figures, with the run's identity in front.
            let head = [
                ("workload", J::S(format!("deep_{shape}"))),
                ("pool", J::S(pool.to_string())),
                ("threads", J::U(*t as u128)),
                ("max_inflight", J::S(cap.clone())),
            ];
            out.raw_line(&head, figures.trim());
        }
    }
    eprintln!("deep-tree memory figures written to {}", out.path.display());
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    memory(common::bench_threads());
    let mut c = common::criterion();
    bench(&mut c);
    c.final_summary();
}
