//! The builder's thread of a `use_current_thread` pool making free calls while the pool is
//! dropped on another thread at a random moment: each call must finish, in the pool (before
//! the drop) or in the global pool (after it), never in the terminated pool once its workers
//! have exited.
//!
//! One-thread pools: the builder's thread is the pool's only worker, so a job left in the
//! terminated pool has nobody to run it, and a call that waits for one hangs (the watchdog
//! fails the test).
//!
//! From the review of the builder's-thread fixes: `broadcast`, `spawn_broadcast` and the
//! in-place scopes looked at the thread's borrowed state twice (to pick the pool, then to enter
//! it), and a drop between the two looks sent the call into the terminated pool: it hung within
//! a few hundred trials. They now look once (`in_current_pool`), as `scope` and `join` did.
//! Detached spawns must run too (issue 36): queued in the one-thread pool when it is dropped,
//! they run at the builder's thread's next look, which drains the pool.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use crate::common::{watchdog, Rng};

/// Trials: pools built, each dropped elsewhere while the builder's thread calls in a loop.
const TRIALS: u64 = 4000;

/// Runs `call` on the builder's thread of a fresh one-thread `use_current_thread` pool, over and
/// over, while another thread drops the pool after a random spin; `TRIALS` times. A hang fails
/// the test with the number of the trial that hung.
fn race_calls_with_drops(seed: u64, call: fn()) {
    let trial = Arc::new(AtomicU64::new(0));
    let watched = trial.clone();
    let race = move || {
        let (to_dropper, pools) = mpsc::channel::<treepool::ThreadPool>();
        let dropper = std::thread::spawn(move || {
            let mut rng = Rng::new(seed);
            for pool in pools {
                for _ in 0..rng.range(0, 4000) {
                    std::hint::spin_loop();
                }
                drop(pool);
            }
        });
        for i in 0..TRIALS {
            // Relaxed: a progress count, read after the watchdog gave up.
            watched.store(i, Ordering::Relaxed);
            let pool = treepool::ThreadPoolBuilder::new()
                .num_threads(1)
                .use_current_thread()
                .build()
                .expect("the thread is no worker");
            to_dropper.send(pool).unwrap();
            while treepool::current_thread_index() == Some(0) {
                call();
            }
        }
        drop(to_dropper);
        dropper.join().unwrap();
    };
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| watchdog(30, race))) {
        // Relaxed: as the store.
        let hung = trial.load(Ordering::Relaxed);
        eprintln!("trial {hung} of {TRIALS} did not finish");
        panic::resume_unwind(payload);
    }
}

/// `treepool::broadcast` (its root job) must not wait in the terminated pool.
#[test]
fn builders_thread_broadcasts_while_its_pool_is_dropped_elsewhere() {
    race_calls_with_drops(0xb0ad, || {
        let ran = treepool::broadcast(|ctx| ctx.index());
        assert!(!ran.is_empty());
    });
}

/// `treepool::in_place_scope` with a spawn: its spawn must run.
#[test]
fn builders_thread_opens_in_place_scopes_while_its_pool_is_dropped_elsewhere() {
    race_calls_with_drops(0x5c0b, || {
        let mut hit = false;
        treepool::in_place_scope(|s| s.spawn(|_| hit = true));
        assert!(hit);
    });
}

/// `treepool::scope` with a spawn (it looked once before the fix too).
#[test]
fn builders_thread_opens_scopes_while_its_pool_is_dropped_elsewhere() {
    race_calls_with_drops(0x5c0c, || {
        let mut hit = false;
        treepool::scope(|s| s.spawn(|_| hit = true));
        assert!(hit);
    });
}

/// Detached `treepool::spawn` and `treepool::spawn_broadcast`: every job accepted runs, in the
/// pool before the drop, in the global pool after it, or (queued in the one-thread pool when it
/// was dropped) at the builder's thread's next look, which drains the terminated pool before it
/// leaves it (issue 36: the look dropped the pool with the jobs still queued, and they never ran).
#[test]
fn builders_thread_spawns_detached_jobs_while_its_pool_is_dropped_elsewhere() {
    static SPAWNED: AtomicU64 = AtomicU64::new(0);
    static RAN: AtomicU64 = AtomicU64::new(0);
    race_calls_with_drops(0x5ba7, || {
        // Relaxed: counts, compared once every job has run (the spin below).
        SPAWNED.fetch_add(2, Ordering::Relaxed);
        treepool::spawn(|| {
            RAN.fetch_add(1, Ordering::Relaxed);
        });
        // Counted once: the broadcast has one job in the pool, one per worker in the global
        // pool.
        treepool::spawn_broadcast(|ctx| {
            if ctx.index() == 0 {
                RAN.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    // Jobs that went to the global pool may still be running; a lost one hangs this.
    watchdog(30, || {
        crate::common::spin_until(|| RAN.load(Ordering::Relaxed) == SPAWNED.load(Ordering::Relaxed))
    });
}
