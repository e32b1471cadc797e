//! How a `join` tree spreads over a pool's threads (issue "Many cores"): while any worker is
//! idle, every `join` gives out a private half (`WorkerThread::work_wanted`), so a tree whose
//! leaves block reaches every thread, as a rayon tree does. Before that rule a half became
//! public only when its owner reached its next `join` after a request: a leaf that blocks
//! never reaches one, and a tree whose leaves wait for each other hung.

use std::sync::Barrier;

use crate::common::{pool, watchdog};

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
