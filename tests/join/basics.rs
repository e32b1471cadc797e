//! `join` itself: results on any thread count, from outside (the global pool), panics of either
//! half, a half of a job waiting for a call run on credit above the job it waits under, halves
//! met while their job waits to admit a spawn, and steals counted. Every test runs under a
//! watchdog.

use crate::common;
use crate::common::{catch, fib, join_until, pool, spin_until, watchdog};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

fn sum_tree(lo: u64, hi: u64) -> u64 {
    if hi - lo <= 1 {
        return lo;
    }
    let mid = (lo + hi) / 2;
    let (a, b) = treepool::join(|| sum_tree(lo, mid), || sum_tree(mid, hi));
    a + b
}

#[test]
fn join_results_on_1_2_and_4_threads() {
    watchdog(60, || {
        for threads in [1, 2, 4] {
            for cap in [1, 3, 16] {
                let pool = pool(threads, cap);
                assert_eq!(
                    pool.install(|| fib(20)),
                    6765,
                    "{threads} threads cap {cap}"
                );
                assert_eq!(pool.install(|| sum_tree(0, 10_000)), 49_995_000);
                assert_eq!(pool.join(|| "a", || 7), ("a", 7));
                common::assert_idle(&pool.stats());
            }
        }
    });
}

#[test]
fn join_from_outside_uses_the_global_pool() {
    watchdog(30, || {
        let (a, b) = treepool::join(|| fib(15), || treepool::current_thread_index().is_some());
        assert_eq!(a, 610);
        assert!(b, "the join ran on a worker of the global pool");
    });
}

#[test]
fn panics_in_a_in_b_and_in_both() {
    watchdog(30, || {
        let pool = pool(2, 2);
        let b_ran = AtomicBool::new(false);
        let err = catch(|| pool.join(|| panic!("in a"), || b_ran.store(true, Ordering::SeqCst)));
        assert_eq!(err.unwrap_err(), "in a");
        assert!(b_ran.load(Ordering::SeqCst), "b still ran");
        let err = catch(|| pool.join(|| 1, || -> u32 { panic!("in b") }));
        assert_eq!(err.unwrap_err(), "in b");
        let err = catch(|| pool.join(|| -> u32 { panic!("a wins") }, || -> u32 { panic!("b") }));
        assert_eq!(err.unwrap_err(), "a wins");
        // The pool still works and is idle.
        assert_eq!(pool.install(|| fib(10)), 55);
        common::assert_idle(&pool.stats());
    });
}

/// Pool A (1 thread, 1 token): job J runs join(a, b); `a` spawns a detached D on J's loan,
/// then waits in pool C (a call into another pool), so A's thread helps and runs D above J's
/// frame. D calls into pool B and waits there until `b` has run its own spawn. Run inline as
/// part of J above D, `b` would spawn a child of J needing J's loan, held by D, buried under
/// `b`: a deadlock; declined (no token is free), it would wait for J, below D, which waits for
/// it. It runs on credit (named policy CalledOutHalfOnCredit: J waits for a call), a child of J
/// with a token of its own. With the policy off this test hangs.
#[test]
fn a_half_of_a_job_waiting_for_a_call_runs_on_credit_above_the_job_it_waits_under() {
    watchdog(60, || {
        let a = Arc::new(pool(1, 1));
        let b_pool = Arc::new(pool(1, 1));
        let c_pool = pool(1, 1);
        let ran_b_child = Arc::new(AtomicBool::new(false));
        let d_done = Arc::new(AtomicBool::new(false));
        let (a2, ran) = (a.clone(), ran_b_child.clone());
        a.install(|| {
            treepool::join(
                || {
                    let (b_pool, done, ran) = (b_pool.clone(), d_done.clone(), ran.clone());
                    treepool::spawn(move || {
                        b_pool.install(|| spin_until(|| ran.load(Ordering::SeqCst)));
                        done.store(true, Ordering::SeqCst);
                    });
                    c_pool.install(|| spin_until(|| d_done.load(Ordering::SeqCst)));
                },
                || treepool::scope(|s| s.spawn(|_| ran.store(true, Ordering::SeqCst))),
            )
        });
        assert!(ran_b_child.load(Ordering::SeqCst));
        let [s] = common::settle([&a2]);
        assert_eq!(s.halves_on_credit, 1, "{s:?}");
        // One credit at most on top of the one token: the half, while it ran.
        assert!(s.peak_executing <= 2 && s.peak_calls_in == 1, "{s:?}");
    });
}

#[test]
fn a_join_half_met_while_its_job_waits_to_admit_a_spawn_is_not_run_as_that_job() {
    // Pool of 2 threads, 1 token. The scope job J lends its token to D, which the other worker
    // runs for 300 ms. Then J joins: `a` spawns, and waits for a token (J's is lent, none is
    // free). Run as part of J in that wait, `b`'s own spawn would be a second child of J
    // waiting for its token, which the token table does not allow (debug builds assert it). So
    // the admission wait leaves `b` in the thread's split stack (AdmittingKeepsHalves): J takes
    // it back after `a` and runs it, or a thief that claims it runs it admitted, or declines it
    // for want of a token, and J runs it after `a`.
    watchdog(60, || {
        let pool = pool(2, 1);
        let d_started = AtomicBool::new(false);
        let children = AtomicUsize::new(0);
        pool.scope(|s| {
            s.spawn(|_| {
                d_started.store(true, Ordering::SeqCst);
                let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
            });
            // Until the other worker took D, so that J's token is out when `a` spawns. (If it
            // has not in 2 s, this thread runs D itself and the case is not covered; it cannot
            // fail for it.)
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            spin_until(|| d_started.load(Ordering::SeqCst) || std::time::Instant::now() > deadline);
            let child = |_: &treepool::Scope<'_>| {
                children.fetch_add(1, Ordering::SeqCst);
            };
            treepool::join(|| s.spawn(child), || s.spawn(child));
        });
        assert_eq!(children.load(Ordering::SeqCst), 2);
        common::settle([&pool]);
    });
}

#[test]
fn steals_are_counted() {
    watchdog(30, || {
        let pool = pool(2, 2);
        let b_started = AtomicBool::new(false);
        pool.join(
            // `a` waits until `b` runs, which only another worker can make happen: by stealing
            // it once this thread, at one of `join_until`'s joins, has promoted `b` (its oldest
            // private half) for the idle worker that asked for work.
            || join_until(|| b_started.load(Ordering::SeqCst)),
            || b_started.store(true, Ordering::SeqCst),
        );
        let stats = pool.stats();
        assert!(stats.steals >= 1 && stats.promotions >= 1, "{stats:?}");
    });
}
