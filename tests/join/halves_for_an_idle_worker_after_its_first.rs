//! Adversarial review of the promotion cap (`WorkerThread::serve_idle`: promote only while
//! fewer of the thread's public halves wait unclaimed than other workers are counted idle).
//!
//! A join made while another worker is counted idle used to publish its `b` (design §6:
//! only "a join made while every other worker was busy keeps b private"). Under the cap, a
//! join made while the idle worker's one half is still unclaimed keeps `b` private; once that
//! worker has run its half it is idle again, but the joiner, blocked in `a` until `b` runs
//! (leaves that meet, as in `spreading.rs`, with every worker idle first and no other work
//! before them in the job), never reaches another join or wait, so `b` never becomes public.
//! rayon-core finishes this tree (its `b` sits in the deque, stolen after the first half).

use std::sync::Barrier;
use std::time::Duration;

use crate::common::{pool, watchdog};

/// `join(join(leaf, leaf), other)`: the two leaves wait for each other at a barrier; `other`
/// is a short half. Two threads, both idle (asleep) first.
#[test]
fn two_meeting_leaves_below_a_first_half_given_out() {
    for round in 0..5 {
        watchdog(20, move || {
            let pool = pool(2, 4);
            while pool.stats().idle_workers < 2 {
                std::thread::yield_now();
            }
            // Asleep, as a pool between calls is.
            std::thread::sleep(Duration::from_millis(20));
            let barrier = Barrier::new(2);
            pool.install(|| {
                treepool::join(
                    || treepool::join(|| barrier.wait(), || barrier.wait()),
                    || std::hint::black_box(round),
                )
            });
        });
    }
}

/// The same with four threads: `join(join(join(L, L), x), y)`, `L` meeting at a barrier of 2,
/// `x` and `y` short: the two idle workers each get one half (`y`, `x`), run it, and are idle
/// again while the second leaf stays private.
#[test]
fn meeting_leaves_below_halves_given_out_to_every_idle_worker() {
    for _ in 0..5 {
        watchdog(20, || {
            let pool = pool(3, 6);
            while pool.stats().idle_workers < 3 {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(20));
            let barrier = Barrier::new(2);
            pool.install(|| {
                treepool::join(
                    || {
                        treepool::join(
                            || treepool::join(|| barrier.wait(), || barrier.wait()),
                            || 1,
                        )
                    },
                    || 2,
                )
            });
        });
    }
}
