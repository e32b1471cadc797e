//! Calls from one pool's job into another pool: no deadlock at one token each, calls run on the
//! caller's credit and are counted, a spawn does not wait for a token, a scope spawn from the
//! other pool's job is left to the scope's owner. Every test runs under a watchdog.

use crate::common;
use crate::common::{fib, pool, spin_until, watchdog};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn cross_pool_a_b_a_does_not_deadlock_with_one_token_each() {
    watchdog(60, || {
        for threads in [1, 2] {
            let a = Arc::new(pool(threads, 1));
            let b = Arc::new(pool(threads, 1));
            let (a2, b2) = (a.clone(), b.clone());
            let result = a.install(move || {
                let a3 = a2.clone();
                b2.install(move || {
                    let inner = a3.install(|| fib(12));
                    let again = a3.scope(|s| {
                        s.spawn(|_| {});
                        7
                    });
                    inner + again
                })
            });
            assert_eq!(result, 151);
            common::assert_idle(&a.stats());
            common::assert_idle(&b.stats());
        }
    });
}

#[test]
fn cross_pool_calls_from_many_jobs_of_the_other_pool() {
    // Several jobs of B, all below one job of A that holds A's only token, call back into A at
    // once: each runs on its caller's credit, none waits for A's token.
    watchdog(60, || {
        let a = Arc::new(pool(2, 1));
        let b = Arc::new(pool(3, 4));
        let total = AtomicUsize::new(0);
        let (a2, b2) = (a.clone(), b.clone());
        a.install(|| {
            b2.scope(|s| {
                for _ in 0..12 {
                    let a3 = a2.clone();
                    let total = &total;
                    s.spawn(move |_| {
                        let v = a3.install(|| fib(10));
                        total.fetch_add(v as usize, Ordering::Relaxed);
                    });
                }
            })
        });
        assert_eq!(total.into_inner(), 12 * 55);
        common::assert_idle(&a.stats());
    });
}

#[test]
fn a_call_from_another_pools_job_runs_on_credit_and_is_counted() {
    watchdog(60, || {
        let a = pool(1, 1);
        let b = pool(1, 1);
        // From outside, a root of B takes B's only token; its call into A takes none of A's
        // tokens; that call's call back into B takes none of B's.
        let (in_a, in_b) = b.install(|| {
            a.install(|| {
                let in_a = a.stats();
                let in_b = b.install(|| b.stats());
                (in_a, in_b)
            })
        });
        assert_eq!(
            (in_a.tokens_in_use, in_a.calls_in, in_a.executing),
            (0, 1, 1)
        );
        assert_eq!(
            (in_b.tokens_in_use, in_b.calls_in, in_b.executing),
            (1, 1, 2)
        );
        for p in [&a, &b] {
            let stats = p.stats();
            assert_eq!((stats.peak_calls_in, stats.admitted_on_credit), (1, 1));
            common::assert_idle(&stats);
            assert_eq!(stats.calls_in, 0);
        }
        assert_eq!(b.stats().peak_executing, 2);
    });
}

#[test]
fn a_spawn_from_another_pools_job_does_not_wait_for_a_token() {
    // A job of A holds nothing of B, but waiting in B for a token while it holds A's could close
    // a cycle (B's token holder may be waiting for A). So the spawn is queued and returns.
    watchdog(60, || {
        let a = pool(1, 1);
        let b = Arc::new(pool(1, 1));
        let release = Arc::new(AtomicBool::new(false));
        let ran = Arc::new(AtomicBool::new(false));
        let r = release.clone();
        b.spawn(move || spin_until(|| r.load(Ordering::SeqCst))); // holds B's only token
        let (b2, ran2) = (b.clone(), ran.clone());
        a.install(move || b2.spawn(move || ran2.store(true, Ordering::SeqCst)));
        assert!(!ran.load(Ordering::SeqCst), "queued behind B's only token");
        release.store(true, Ordering::SeqCst);
        spin_until(|| ran.load(Ordering::SeqCst));
        common::settle([&b]);
    });
}

#[test]
fn a_scope_spawn_from_another_pools_job_is_left_to_the_scope_owner() {
    // The scope's owner holds B's only token and waits for the scope's end; a job it waits for
    // is spawned from A. Queued for a pool token it would wait for the owner's token forever;
    // the owner admits it as its own child instead.
    watchdog(60, || {
        for (a_threads, b_threads) in [(1, 1), (2, 2)] {
            let a = pool(a_threads, 1);
            let b = pool(b_threads, 1);
            let ran = AtomicUsize::new(0);
            b.scope(|s| {
                a.install(|| {
                    for _ in 0..3 {
                        s.spawn(|s| {
                            ran.fetch_add(1, Ordering::SeqCst);
                            // From inside: a child of the deferred job, as usual.
                            s.spawn(|_| {
                                ran.fetch_add(1, Ordering::SeqCst);
                            });
                        });
                    }
                });
                // From a job of B on the owner's loan, too.
                s.spawn(|s| {
                    a.install(|| {
                        s.spawn(|_| {
                            ran.fetch_add(1, Ordering::SeqCst);
                        })
                    })
                });
            });
            assert_eq!(ran.load(Ordering::SeqCst), 7);
            common::settle([&a, &b]);
        }
    });
}
