//! Workload 9: how long a small `install` from a second thread waits while one big scope keeps
//! the pool saturated.
//!
//! Not a criterion benchmark (`harness = false`, plain `main`): for each pool, one thread runs a
//! scope of `JOBS` spawns of `JOB_WORK` of spinning each (on `TREEPOOL_BENCH_THREADS` workers,
//! default 2, about a second in all), while this thread times `pool.install(|| ())` every
//! `EVERY` until the scope ends. In treepool the install is a root job that waits for a pool
//! token; the spawner's jobs hold every token, the first one that frees goes to the root (the
//! pool queue comes before the scope's next spawn), and its granter pushes it on its own
//! deque, where it is the newest job. In rayon the install goes to the global injector, which
//! a worker reads only once its own deque is empty: after the scope's spawns.
//!
//! Prints the median and the 90th percentile and writes them as JSON lines to
//! `target/treepool-bench/install_latency_t<threads>.json`.

#[macro_use]
mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::J;

/// The scope's spawns.
const JOBS: u64 = 20_000;
/// What each spawned job spins for.
const JOB_WORK: Duration = Duration::from_micros(100);
/// How often the second thread starts an install.
const EVERY: Duration = Duration::from_millis(5);

fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

for_both_pools! {
    /// The saturating scope: `JOBS` spawns of `JOB_WORK` each.
    pub fn big_scope(jobs: u64, busy: &AtomicBool) {
        pl::scope(|s| {
            busy.store(true, Ordering::SeqCst);
            for _ in 0..jobs {
                s.spawn(|_| spin(JOB_WORK));
            }
        });
    }
}

/// Times installs of an empty closure every `EVERY` from this thread while `run_scope` runs on
/// another one; returns the latencies, sorted.
fn latencies(install: impl Fn(), run_scope: impl FnOnce(&AtomicBool) + Send) -> Vec<Duration> {
    let busy = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let mut samples = Vec::new();
    std::thread::scope(|t| {
        t.spawn(|| {
            run_scope(&busy);
            done.store(true, Ordering::SeqCst);
        });
        while !busy.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        while !done.load(Ordering::SeqCst) {
            let start = Instant::now();
            install();
            let waited = start.elapsed();
            if !done.load(Ordering::SeqCst) {
                samples.push(waited);
            }
            std::thread::sleep(EVERY);
        }
    });
    samples.sort();
    samples
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let threads = common::bench_threads();
    let jobs = if common::mode() == common::Mode::Test {
        JOBS / 20
    } else {
        JOBS
    };
    let mut out = common::JsonLines::create("install_latency", threads);
    let mut row = |pool: &str, samples: &[Duration]| {
        let at = |q: f64| samples.get((samples.len() as f64 * q) as usize).copied();
        let ms = |d: Option<Duration>| d.map_or(J::Null, |d| J::F(d.as_secs_f64() * 1e3));
        let show = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{d:.2?}"));
        println!(
            "install during a saturating scope, {pool:>8} ({threads} threads): median {}, \
             p90 {}, max {} over {} installs",
            show(at(0.5)),
            show(at(0.9)),
            show(samples.last().copied()),
            samples.len()
        );
        out.line(&[
            ("workload", J::S("install_latency".into())),
            ("pool", J::S(pool.into())),
            ("threads", J::U(threads as u128)),
            ("installs", J::U(samples.len() as u128)),
            ("median_ms", ms(at(0.5))),
            ("p90_ms", ms(at(0.9))),
            ("max_ms", ms(samples.last().copied())),
        ]);
    };

    let tp = common::treepool_pool(threads, common::bench_cap());
    let samples = latencies(
        || tp.install(|| black_box(())),
        |busy| tp.install(|| tp::big_scope(jobs, busy)),
    );
    row("treepool", &samples);
    drop(tp);

    let ry = common::rayon_pool(threads);
    let samples = latencies(
        || ry.install(|| black_box(())),
        |busy| ry.install(|| ry::big_scope(jobs, busy)),
    );
    row("rayon", &samples);
    eprintln!("install latency figures written to {}", out.path.display());
}
