//! Workload 7: CPU burned by an idle pool.
//!
//! Not a criterion benchmark (`harness = false`, plain `main`): for each pool, build it with
//! `TREEPOOL_BENCH_THREADS` workers (default 2), run a short burst of work through
//! `pool.install` (fib(22) by join, then a scope of 10,000 spawns, a few rounds), then read the
//! process's CPU time (`getrusage(RUSAGE_SELF)`, user + sys), sleep for
//! `TREEPOOL_BENCH_IDLE_SECS` (default 1.0) and read it again. The difference is what the idle
//! workers burn right after work stops (spinning before they sleep, timers, wake-ups). A `none`
//! row measures the same window with no pool, the noise floor.
//!
//! Prints the figures and writes them as JSON lines to `target/treepool-bench/idle_t<threads>.json`.
//! Target: treepool burns no more CPU than rayon.

#[macro_use]
mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::J;

for_both_pools! {
    fn fib(n: u32) -> u64 {
        if n < 2 {
            return u64::from(n);
        }
        let (a, b) = pl::join(|| fib(n - 1), || fib(n - 2));
        a + b
    }

    pub fn burst() -> u64 {
        let mut acc = 0;
        for _ in 0..3 {
            acc += fib(black_box(22));
            let total = AtomicU64::new(0);
            pl::scope(|s| {
                for i in 0..10_000u64 {
                    let total = &total;
                    s.spawn(move |_| {
                        total.fetch_add(i, Ordering::Relaxed);
                    });
                }
            });
            acc += total.into_inner();
        }
        acc
    }
}

/// User + system CPU time of the whole process.
fn cpu_time() -> Duration {
    // SAFETY: `getrusage` only writes into the zeroed struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut ru), 0);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU burned by the process over `window` of sleeping on this thread.
fn idle_cpu(window: Duration) -> (Duration, Duration) {
    let c0 = cpu_time();
    let t0 = Instant::now();
    std::thread::sleep(window);
    let wall = t0.elapsed();
    (cpu_time().saturating_sub(c0), wall)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let threads = common::bench_threads();
    let secs: f64 = std::env::var("TREEPOOL_BENCH_IDLE_SECS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1.0);
    let window = Duration::from_secs_f64(secs);
    let mut out = common::JsonLines::create("idle", threads);

    let mut row = |pool: &str, cpu: Duration, wall: Duration| {
        let ms = cpu.as_secs_f64() * 1e3;
        let pct = 100.0 * cpu.as_secs_f64() / wall.as_secs_f64();
        println!(
            "idle {pool:>8} ({threads} threads): {ms:8.2} ms CPU over {:.3} s ({pct:.2}% of one core)",
            wall.as_secs_f64()
        );
        out.line(&[
            ("workload", J::S("idle".into())),
            ("pool", J::S(pool.into())),
            ("threads", J::U(threads as u128)),
            ("window_s", J::F(wall.as_secs_f64())),
            ("cpu_ms", J::F(ms)),
            ("cpu_pct_of_core", J::F(pct)),
        ]);
    };

    let (cpu, wall) = idle_cpu(window);
    row("none", cpu, wall);

    {
        let pool = common::treepool_pool(threads, common::bench_cap());
        black_box(pool.install(tp::burst));
        let (cpu, wall) = idle_cpu(window);
        row("treepool", cpu, wall);
    }
    std::thread::sleep(Duration::from_millis(100)); // let the dropped pool's threads exit

    {
        let pool = common::rayon_pool(threads);
        black_box(pool.install(ry::burst));
        let (cpu, wall) = idle_cpu(window);
        row("rayon", cpu, wall);
    }
    eprintln!("idle figures written to {}", out.path.display());
}
