//! Lazy join (the split stack, `src/base/half_stack.rs`): a `join`'s `b` stays private to its
//! joiner's thread while no other worker is idle; while one is, the joiner promotes its oldest
//! private half at its next `join` (or wait round). These tests force promotions (an `a` that
//! joins in a loop until `b` has run elsewhere) and check that every half runs exactly once,
//! that the panic of a promoted half is raised as any half's, and that the bounds hold. (A
//! promoted half declined for want of a token is in `tests/cross_pool/declined_halves.rs`, in
//! `join::split_stack_edges::shape_2_b_claimed_by_a_thief_with_no_token_while_the_joiners_token_is_lent`
//! and in the loom models `loom::join` and `loom::tokens`.)

use crate::common;
use crate::common::{join_until, pool, watchdog};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Counts, per leaf, the runs of a join tree of `levels` levels.
fn tree(levels: u32, first: usize, runs: &[AtomicUsize]) {
    if levels == 0 {
        runs[first].fetch_add(1, Ordering::Relaxed);
        return;
    }
    let half = 1 << (levels - 1);
    treepool::join(
        || tree(levels - 1, first, runs),
        || tree(levels - 1, first + half, runs),
    );
}

#[test]
fn every_half_runs_once_when_halves_are_promoted_and_stolen() {
    watchdog(60, || {
        let pool = pool(4, 8);
        let runs: Vec<AtomicUsize> = (0..1 << 14).map(|_| AtomicUsize::new(0)).collect();
        let stolen_ran = AtomicBool::new(false);
        pool.install(|| {
            treepool::join(
                // Keep this thread joining until `b` ran on another worker, so at least one
                // promotion and one steal happen whatever the timing.
                || join_until(|| stolen_ran.load(Ordering::SeqCst)),
                || {
                    tree(14, 0, &runs);
                    stolen_ran.store(true, Ordering::SeqCst);
                },
            )
        });
        assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
        let [stats] = common::settle([&pool]);
        assert!(stats.promotions >= 1 && stats.steals >= 1, "{stats:?}");
        assert!(stats.peak_executing <= 8, "{stats:?}");
    });
}

#[test]
fn a_panic_in_a_stolen_half_is_raised_by_join_after_both_halves_ran() {
    watchdog(60, || {
        let pool = pool(2, 4);
        let b_started = AtomicBool::new(false);
        let a_finished = AtomicBool::new(false);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| {
                treepool::join(
                    || {
                        join_until(|| b_started.load(Ordering::SeqCst));
                        a_finished.store(true, Ordering::SeqCst);
                    },
                    || {
                        b_started.store(true, Ordering::SeqCst);
                        panic!("b panicked on a thief");
                    },
                )
            })
        }));
        let payload = caught.expect_err("join re-raises b's panic");
        assert_eq!(common::describe(payload), "b panicked on a thief");
        assert!(a_finished.load(Ordering::SeqCst));
        common::settle([&pool]);
    });
}

#[test]
fn a_deep_join_recursion_on_two_threads_returns_every_value() {
    fn depth(n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let (a, b) = treepool::join(|| depth(n - 1), || 1);
        a + b
    }
    watchdog(60, || {
        let pool = treepool::ThreadPoolBuilder::new()
            .num_threads(2)
            .stack_size(64 << 20)
            .build()
            .unwrap();
        // 20,000 nested joins: three keep their `b` (promoted on request), the rest are plain.
        assert_eq!(pool.install(|| depth(20_000)), 20_000);
        common::settle([&pool]);
    });
}

#[test]
fn a_joiner_gets_its_b_stolen_after_every_other_worker_went_to_sleep() {
    // A sleeping worker asks no more, so its last request must reach whichever worker becomes
    // busy, and the promotion that serves it must wake a sleeper. Here `b` runs only if it is
    // promoted and stolen: before the fix, with the other workers asleep, it never was.
    watchdog(60, || {
        // Many workers, so that an idle worker's random requests (one victim per round) miss
        // the busy one: only the requests made before sleeping reach it for sure.
        let pool = pool(64, 64);
        for _ in 0..5 {
            // Not a race hidden by a delay: the condition under test is a pool whose workers
            // all went to sleep (after 64 idle rounds each), which takes a moment of idleness.
            std::thread::sleep(std::time::Duration::from_millis(100));
            let b_ran = AtomicBool::new(false);
            pool.install(|| {
                // A tiny join first: it serves whatever request the idle period left raised.
                treepool::join(|| {}, || {});
                treepool::join(
                    || join_until(|| b_ran.load(Ordering::SeqCst)),
                    || b_ran.store(true, Ordering::SeqCst),
                )
            });
        }
        common::settle([&pool]);
    });
}

#[test]
fn a_join_nested_six_deep_runs_b_even_when_a_panics() {
    // Six joins deep on one thread, every `b` private in the thread's split stack: the
    // innermost `a` panics, its `b` still runs (taken back after `a`), and the panic is raised
    // once both ran, as for any join. (Written when past three kept private halves a join kept
    // no `b` and made two plain calls.)
    fn nest(levels: u32, b_ran: &AtomicBool) {
        if levels == 0 {
            treepool::join(
                || panic!("a panicked in a nested join"),
                || b_ran.store(true, Ordering::SeqCst),
            );
            return;
        }
        treepool::join(|| nest(levels - 1, b_ran), || {});
    }
    watchdog(60, || {
        let pool = pool(1, 1);
        let b_ran = AtomicBool::new(false);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| nest(5, &b_ran));
        }));
        let payload = caught.expect_err("join re-raises a's panic");
        assert_eq!(common::describe(payload), "a panicked in a nested join");
        assert!(b_ran.load(Ordering::SeqCst));
        common::settle([&pool]);
    });
}
