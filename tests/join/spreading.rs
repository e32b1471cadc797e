//! How a `join` tree spreads over a pool's threads (issue "Many cores"): while any worker is
//! idle, every `join` gives out a private half (`WorkerThread::work_wanted`), so a tree whose
//! leaves block reaches every thread, as a rayon tree does. Before that rule a half became
//! public only when its owner reached its next `join` after a request: a leaf that blocks
//! never reaches one, and a tree whose leaves wait for each other hung.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::common::{catch, fib, pool, settle, watchdog};

/// A binary join tree of 2^levels leaves, each of which waits at `barrier`.
fn tree(levels: u32, barrier: &Barrier) {
    if levels == 0 {
        barrier.wait();
        return;
    }
    treepool::join(|| tree(levels - 1, barrier), || tree(levels - 1, barrier));
}

/// A tree with one leaf per thread, every leaf waiting until all have started, finishes: each
/// thread got a leaf while the others were blocked in theirs. From 4 threads (two levels) to 16
/// (four levels, one past the halves a job keeps before its joins turn plain).
#[test]
fn a_tree_of_one_blocking_leaf_per_thread_reaches_every_thread() {
    for levels in 2..=4 {
        let threads = 1usize << levels;
        watchdog(60, move || {
            let pool = pool(threads, 2 * threads);
            // Every worker idle first, as a pool between two calls is: the spread then owes
            // nothing to the order in which the workers started.
            while pool.stats().idle_workers < threads {
                std::thread::yield_now();
            }
            let barrier = Barrier::new(threads);
            pool.install(|| tree(levels, &barrier));
            let stats = pool.stats();
            assert!(stats.promotions >= threads as u64 - 1, "{stats:?}");
        });
    }
}

/// The idle count (`Stats::idle_workers`) never exceeds the number of workers, and after the pool
/// settles every worker counts idle, also after panics in `a`, `b`, scope bodies and spawns
/// (from the adversarial review of issues 35 and 36: a passing probe).
#[test]
fn the_idle_count_stays_within_the_workers_and_settles() {
    watchdog(120, || {
        let p = Arc::new(pool(3, 4));
        let stop = Arc::new(AtomicBool::new(false));
        let max_seen = Arc::new(AtomicUsize::new(0));
        let sampler = {
            let (p, stop, max_seen) = (p.clone(), stop.clone(), max_seen.clone());
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    max_seen.fetch_max(p.stats().idle_workers, SeqCst);
                    std::thread::yield_now();
                }
            })
        };
        for _ in 0..30 {
            p.install(|| fib(16));
            let _ = catch(|| p.join(|| fib(12), || -> u64 { panic!("b") }));
            let _ = catch(|| p.join(|| -> u64 { panic!("a") }, || fib(12)));
            let _ = catch(|| {
                p.scope(|s| {
                    for i in 0..8 {
                        s.spawn(move |_| {
                            fib(10);
                            if i == 3 {
                                panic!("spawn");
                            }
                        });
                    }
                    panic!("body");
                })
            });
            p.spawn(|| {
                fib(12);
            });
        }
        settle([&*p]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.stats().idle_workers != 3 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        stop.store(true, SeqCst);
        sampler.join().unwrap();
        assert!(
            max_seen.load(SeqCst) <= 3,
            "idle_workers {} > 3",
            max_seen.load(SeqCst)
        );
        assert_eq!(p.stats().idle_workers, 3, "{:?}", p.stats());
    });
}
