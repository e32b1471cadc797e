//! Adversarial review of the soundness rewrite (issue 9): attacks on deferred scope spawns,
//! credit roots, cross-pool cycles, panics across pools, pools dropped mid-flight, and the
//! per-pool bounds sampled mid-flight. Every test runs under a watchdog, so a hang fails.
//!
//! The random cross-pool stress (`random_cross_pool_trees_with_deferred_scope_spawns`) reaches
//! scopes of *other* pools through a list of raw scope pointers (a test-only lifetime erasure:
//! a job only spawns into a scope it is nested in, so the scope is alive, and everything it
//! spawns is `'static`). Its length is `TREEPOOL_ATTACK_SECS` seconds (default 5) or
//! `TREEPOOL_ATTACK_TREES` trees, whichever ends first; `TREEPOOL_ATTACK_SEED` reruns one tree
//! (`TREEPOOL_ATTACK_ROOTS` overrides how many plain threads run it at once).

use crate::common;
use crate::common::{describe, pool, spin_until, wait_idle, watchdog, Bomb, Rng};

use std::panic::{catch_unwind, panic_any, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use treepool::{Scope, ThreadPool};

fn fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

/// Waits until the pool is idle, credits included (a credit parked for a detached descendant
/// is released just after the in-flight count drops).
fn wait_fully_idle(pool: &ThreadPool) {
    spin_until(|| {
        let s = pool.stats();
        s.inflight == 0 && s.tokens_in_use == 0 && s.calls_in == 0
    });
    common::assert_idle(&pool.stats());
}

/// Checks the documented per-pool bounds on a snapshot; `peak_calls_in` stands in for the
/// instant's `calls_in` (a snapshot's fields are read one after another).
fn bounds_violation(s: &treepool::Stats, cap: usize) -> Option<String> {
    if s.tokens_in_use > cap {
        return Some(format!(
            "tokens_in_use {} > cap {cap}: {s:?}",
            s.tokens_in_use
        ));
    }
    if s.executing > cap + s.calls_in {
        return Some(format!("executing > cap + calls_in: {s:?}"));
    }
    if s.inflight > (cap + s.peak_calls_in) * s.peak_depth.max(1) {
        return Some(format!("inflight > (cap + peak_calls_in) x depth: {s:?}"));
    }
    if s.peak_executing > cap + s.peak_calls_in {
        return Some(format!("peak_executing > cap + peak_calls_in: {s:?}"));
    }
    if s.peak_inflight > (cap + s.peak_calls_in) * s.peak_depth.max(1) {
        return Some(format!(
            "peak_inflight > (cap + peak_calls_in) x depth: {s:?}"
        ));
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Deferred scope spawns
// ---------------------------------------------------------------------------------------------

/// The scope's owner is a credit root of B (called from a job of A) and B's only pool token is
/// held by an unrelated job for the whole test: spawns into the scope from A are deferred and
/// must run as the owner's children on its *credit* loan, without B's pool token ever freeing.
#[test]
fn deferred_spawns_run_on_the_credit_of_a_scope_owner_while_bs_only_token_is_held() {
    watchdog(60, || {
        let a = Arc::new(pool(1, 1));
        let b = Arc::new(pool(2, 1));
        let release = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(false));
        let (r, h) = (release.clone(), held.clone());
        b.spawn(move || {
            h.store(true, Ordering::SeqCst);
            spin_until(|| r.load(Ordering::SeqCst));
        });
        spin_until(|| held.load(Ordering::SeqCst));
        let ran = Arc::new(AtomicUsize::new(0));
        let (a2, b2, ran2) = (a.clone(), b.clone(), ran.clone());
        a.install(move || {
            let a3 = a2.clone();
            b2.scope(|s| {
                a3.install(|| {
                    for _ in 0..5 {
                        let ran = ran2.clone();
                        s.spawn(move |s| {
                            ran.fetch_add(1, Ordering::SeqCst);
                            let ran = ran.clone();
                            s.spawn(move |_| {
                                ran.fetch_add(1, Ordering::SeqCst);
                            });
                        });
                    }
                });
            });
        });
        assert_eq!(ran.load(Ordering::SeqCst), 10);
        assert_eq!(
            b.stats().tokens_in_use,
            1,
            "the unrelated job still holds B's token"
        );
        release.store(true, Ordering::SeqCst);
        wait_fully_idle(&a);
        wait_fully_idle(&b);
    });
}

/// A deferred job calls back into A, whose job spawns into the same scope again (deferred again
/// while the owner waits at the scope's end), and into a nested scope owned by the deferred job
/// itself; some of these jobs panic (one with a payload whose `Drop` panics). Three pools, one
/// thread and one token each.
#[test]
fn deferred_jobs_that_spawn_back_across_pools_nest_scopes_and_panic() {
    watchdog(120, || {
        for round in 0..30 {
            let a = Arc::new(pool(1, 1));
            let b = Arc::new(pool(1, 1));
            let c = Arc::new(pool(1, 1));
            let ran = Arc::new(AtomicUsize::new(0));
            let (a2, b2, c2, ran2) = (a.clone(), b.clone(), c.clone(), ran.clone());
            let err = catch_unwind(AssertUnwindSafe(|| {
                b2.scope(|s| {
                    a2.install(|| {
                        c2.install(|| {
                            for i in 0..3 {
                                let (a3, c3, ran3) = (a2.clone(), c2.clone(), ran2.clone());
                                s.spawn(move |s| {
                                    ran3.fetch_add(1, Ordering::SeqCst);
                                    // Back into A, and from there into this scope (deferred
                                    // again) and into a nested scope this deferred job owns.
                                    let r = ran3.clone();
                                    treepool::scope(|inner| {
                                        a3.install(|| {
                                            let r2 = r.clone();
                                            s.spawn(move |_| {
                                                r2.fetch_add(1, Ordering::SeqCst);
                                            });
                                            let r3 = r.clone();
                                            let c4 = c3.clone();
                                            inner.spawn(move |_| {
                                                r3.fetch_add(1, Ordering::SeqCst);
                                                c4.install(|| r3.fetch_add(1, Ordering::SeqCst));
                                            });
                                        });
                                    });
                                    match (i, round % 3) {
                                        (1, 0) => panic_any(Bomb),
                                        (2, 1) => panic!("deferred job panicked"),
                                        _ => {}
                                    }
                                });
                            }
                        })
                    })
                })
            }));
            match (round % 3, err) {
                (0, Err(p)) => assert_eq!(describe(p), "<Bomb>"),
                (1, Err(p)) => assert_eq!(describe(p), "deferred job panicked"),
                (2, Ok(())) => {}
                (k, other) => panic!("round kind {k}: unexpected {:?}", other.map_err(describe)),
            }
            assert_eq!(ran.load(Ordering::SeqCst), 3 * 4, "round {round}");
            for p in [&a, &b, &c] {
                wait_fully_idle(p);
            }
        }
    });
}

/// While the owner is at the scope's end (its body returned), jobs of the scope call into A and
/// A's jobs (several threads) spawn into the scope concurrently: the deferred list is pushed by
/// many threads while the owner swaps it out. B has 1 and 2 tokens.
#[test]
fn concurrent_deferred_spawns_while_the_owner_waits_at_the_scope_end() {
    watchdog(120, || {
        for (b_threads, b_cap) in [(1, 1), (2, 1), (2, 2), (3, 1)] {
            for _ in 0..10 {
                let a = Arc::new(pool(4, 4));
                let b = Arc::new(pool(b_threads, b_cap));
                let leaves = Arc::new(AtomicUsize::new(0));
                let (a2, leaves2) = (a.clone(), leaves.clone());
                b.scope(|s| {
                    for _ in 0..3 {
                        let (a3, leaves3) = (a2.clone(), leaves2.clone());
                        s.spawn(move |s| {
                            a3.scope(|as_| {
                                for _ in 0..4 {
                                    let leaves4 = leaves3.clone();
                                    as_.spawn(move |_| {
                                        for _ in 0..25 {
                                            let l = leaves4.clone();
                                            s.spawn(move |_| {
                                                l.fetch_add(1, Ordering::Relaxed);
                                            });
                                        }
                                    });
                                }
                            });
                        });
                    }
                });
                assert_eq!(leaves.load(Ordering::Relaxed), 3 * 4 * 25);
                wait_fully_idle(&a);
                wait_fully_idle(&b);
            }
        }
    });
}

/// The owner spends a long time in its body after the crossing spawn: with B's only token held
/// by the owner, the deferred job must not start before the body ends, and must start after.
#[test]
fn a_deferred_job_waits_for_the_owners_body_and_then_runs() {
    watchdog(60, || {
        let a = pool(1, 1);
        let b = pool(1, 1);
        let ran = AtomicBool::new(false);
        b.scope(|s| {
            a.install(|| s.spawn(|_| ran.store(true, Ordering::SeqCst)));
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(100) {
                assert!(!ran.load(Ordering::SeqCst), "ran without a token");
                std::hint::spin_loop();
            }
        });
        assert!(ran.load(Ordering::SeqCst));
        wait_fully_idle(&a);
        wait_fully_idle(&b);
    });
}

/// The scope body panics (with a plain payload, then a `Bomb`) after a crossing spawn was
/// deferred: the deferred job still runs before the scope returns, and the body's panic is
/// raised.
#[test]
fn a_deferred_job_runs_when_the_owners_body_panics() {
    watchdog(60, || {
        for bomb in [false, true] {
            let a = pool(1, 1);
            let b = pool(1, 1);
            let ran = AtomicBool::new(false);
            let err = catch_unwind(AssertUnwindSafe(|| {
                b.scope(|s| {
                    a.install(|| {
                        s.spawn(|_| {
                            std::thread::sleep(Duration::from_millis(20));
                            ran.store(true, Ordering::SeqCst);
                        })
                    });
                    if bomb {
                        panic_any(Bomb);
                    }
                    panic!("body");
                })
            }));
            assert!(
                ran.load(Ordering::SeqCst),
                "the scope returned before its deferred job"
            );
            let want = if bomb { "<Bomb>" } else { "body" };
            assert_eq!(describe(err.unwrap_err()), want);
            wait_fully_idle(&a);
            wait_fully_idle(&b);
        }
    });
}

/// Bug-shaped: a scope's owner holds the pool's only token and its body hands the scope to a
/// plain `std::thread` (joined inside the body), which spawns into it. `Scope::spawn` from a
/// thread outside every pool parks for a pool token, which the owner holds while it waits for
/// that thread: a hang. (rayon's `Scope::spawn` never blocks, so this works there.)
#[test]
fn a_plain_thread_spawning_into_a_scope_whose_owner_holds_the_only_token() {
    watchdog(20, || {
        for threads in [1, 2] {
            let pool = pool(threads, 1);
            let ran = AtomicBool::new(false);
            pool.scope(|s| {
                std::thread::scope(|ts| {
                    ts.spawn(|| s.spawn(|_| ran.store(true, Ordering::SeqCst)));
                });
            });
            assert!(ran.load(Ordering::SeqCst));
            wait_fully_idle(&pool);
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Credit roots, detached spawns, calls_in
// ---------------------------------------------------------------------------------------------

/// Credit roots of B spawn detached jobs that outlive the call (their credit stays parked), from
/// several jobs of A at once; every job runs, `calls_in` goes back to 0, and the peaks obey
/// `executing <= cap + calls_in`, `inflight <= (cap + calls_in) x levels`. Detached spawns from
/// A's jobs straight into B (queued) are mixed in.
#[test]
fn credit_roots_whose_detached_children_outlive_the_call() {
    watchdog(120, || {
        for (a_threads, b_threads, b_cap) in [(1, 1, 1), (2, 1, 1), (2, 2, 1), (3, 2, 2)] {
            let a = Arc::new(pool(a_threads, 2));
            let b = Arc::new(pool(b_threads, b_cap));
            let ran = Arc::new(AtomicUsize::new(0));
            let (b2, ran2) = (b.clone(), ran.clone());
            a.scope(|s| {
                for _ in 0..8 {
                    let (b3, ran3) = (b2.clone(), ran2.clone());
                    s.spawn(move |_| {
                        let b4 = b3.clone();
                        b3.install(|| {
                            for _ in 0..3 {
                                let r = ran3.clone();
                                treepool::spawn(move || {
                                    std::thread::sleep(Duration::from_millis(2));
                                    let r2 = r.clone();
                                    treepool::spawn(move || {
                                        r2.fetch_add(1, Ordering::SeqCst);
                                    });
                                    r.fetch_add(1, Ordering::SeqCst);
                                });
                            }
                        });
                        let r = ran3.clone();
                        b4.spawn(move || {
                            r.fetch_add(1, Ordering::SeqCst);
                        });
                    });
                }
            });
            spin_until(|| ran.load(Ordering::SeqCst) == 8 * 7);
            wait_fully_idle(&a);
            wait_fully_idle(&b);
            let s = b.stats();
            assert!(bounds_violation(&s, b_cap).is_none(), "{s:?}");
            assert!(s.peak_calls_in >= 1 && s.admitted_on_credit == 8, "{s:?}");
        }
    });
}

/// Join halves of a job of X whose `a` is inside a call into Y: the X worker waiting in that
/// call can run `b` (in place, as part of the joiner's job), or another X worker can take it
/// (admitted on the joiner's loan, or declined and run by the joiner); `b` calls into Y too,
/// and Y's jobs call back into X. Many rounds, small caps.
#[test]
fn join_halves_taken_while_the_joiner_is_in_a_cross_pool_call() {
    watchdog(120, || {
        for (xt, xc, yt, yc) in [(1, 1, 1, 1), (2, 1, 1, 1), (2, 1, 2, 1), (2, 2, 2, 2)] {
            let x = Arc::new(pool(xt, xc));
            let y = Arc::new(pool(yt, yc));
            for _ in 0..20 {
                let (x2, y2) = (x.clone(), y.clone());
                let total = x.install(move || {
                    let (x3, y3) = (x2.clone(), y2.clone());
                    let (p, q) = treepool::join(
                        || {
                            let x4 = x3.clone();
                            y3.install(move || {
                                let (a, b) = treepool::join(
                                    || x4.install(|| fib(8)),
                                    || x4.join(|| fib(6), || fib(5)),
                                );
                                a + b.0 + b.1
                            })
                        },
                        || {
                            let x4 = x3.clone();
                            y3.install(move || {
                                x4.scope(|s| {
                                    s.spawn(|_| {
                                        fib(7);
                                    });
                                    fib(9)
                                })
                            })
                        },
                    );
                    p + q
                });
                assert_eq!(total, 21 + 8 + 5 + 34);
            }
            wait_fully_idle(&x);
            wait_fully_idle(&y);
        }
    });
}

/// Three pools of one thread and one token call each other in cycles (A→B→C→A→B→…) with scopes,
/// joins and spawns at every level, and spawns into the scopes of the pools further up.
#[test]
fn three_single_token_pools_in_cycles() {
    watchdog(120, || {
        let pools: Arc<Vec<ThreadPool>> = Arc::new((0..3).map(|_| pool(1, 1)).collect());
        let ran = Arc::new(AtomicUsize::new(0));
        fn level(pools: &Arc<Vec<ThreadPool>>, ran: &Arc<AtomicUsize>, depth: usize) {
            ran.fetch_add(1, Ordering::SeqCst);
            if depth == 0 {
                return;
            }
            let next = &pools[depth % 3];
            next.scope(|s| {
                let (p2, r2) = (pools.clone(), ran.clone());
                s.spawn(move |_| level(&p2, &r2, depth - 1));
                let (p2, r2) = (pools.clone(), ran.clone());
                pools[(depth + 1) % 3].install(move || {
                    let (p3, r3) = (p2.clone(), r2.clone());
                    s.spawn(move |_| level(&p3, &r3, depth - 1));
                    treepool::join(|| r2.fetch_add(1, Ordering::SeqCst), || fib(5));
                });
            });
        }
        for _ in 0..5 {
            let (p, r) = (pools.clone(), ran.clone());
            pools[0].install(move || level(&p, &r, 6));
        }
        // level(d) = 1 + [d > 0] * (2 * level(d - 1) + 1)
        let mut expect = 1;
        for _ in 0..6 {
            expect = 2 * expect + 2;
        }
        assert_eq!(ran.load(Ordering::SeqCst), 5 * expect);
        for p in pools.iter() {
            wait_fully_idle(p);
        }
    });
}

/// Deep ping-pong: A → B → A → … 60 calls deep, one thread and one token per pool, with a
/// scope spawn into the previous level's scope (of the other pool: deferred or offered) at every
/// level. Every call runs on credit; `calls_in` peaks at about half the depth in each pool.
#[test]
fn deep_ping_pong_between_two_single_token_pools() {
    watchdog(120, || {
        let pools: Arc<Vec<ThreadPool>> = Arc::new(
            (0..2)
                .map(|_| {
                    treepool::ThreadPoolBuilder::new()
                        .num_threads(1)
                        .max_inflight(1)
                        .stack_size(64 << 20)
                        .build()
                        .unwrap()
                })
                .collect(),
        );
        let ran = Arc::new(AtomicUsize::new(0));
        fn level(
            pools: &Arc<Vec<ThreadPool>>,
            ran: &Arc<AtomicUsize>,
            prev: Option<&Scope<'_>>,
            d: usize,
        ) {
            ran.fetch_add(1, Ordering::SeqCst);
            if let Some(prev) = prev {
                let r = ran.clone();
                prev.spawn(move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                });
            }
            if d == 0 {
                return;
            }
            pools[d % 2].scope(|s| level(pools, ran, Some(s), d - 1));
        }
        for _ in 0..5 {
            let (p, r) = (pools.clone(), ran.clone());
            pools[1].install(move || level(&p, &r, None, 60));
        }
        assert_eq!(ran.load(Ordering::SeqCst), 5 * (61 + 60));
        for p in pools.iter() {
            wait_fully_idle(p);
            let s = p.stats();
            assert!(s.peak_calls_in >= 25, "{s:?}");
            assert!(bounds_violation(&s, 1).is_none(), "{s:?}");
        }
    });
}

/// Many plain threads hammer two pools whose jobs call each other; every job checks its pool's
/// bounds at entry.
#[test]
fn plain_threads_hammer_two_pools_that_call_each_other() {
    watchdog(180, || {
        let a = Arc::new(pool(2, 1));
        let b = Arc::new(pool(2, 2));
        let bad = Arc::new(Mutex::new(Vec::<String>::new()));
        let check = |p: &ThreadPool, cap: usize, bad: &Mutex<Vec<String>>| {
            if let Some(v) = bounds_violation(&p.stats(), cap) {
                bad.lock().unwrap().push(v);
            }
        };
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (a, b, bad) = (a.clone(), b.clone(), bad.clone());
                std::thread::spawn(move || {
                    for i in 0..30 {
                        let (first, second, c1, c2) = if (t + i) % 2 == 0 {
                            (&a, &b, 1, 2)
                        } else {
                            (&b, &a, 2, 1)
                        };
                        first.scope(|s| {
                            for _ in 0..3 {
                                s.spawn(|s| {
                                    check(first, c1, &bad);
                                    second.join(
                                        || {
                                            check(second, c2, &bad);
                                            first.install(|| check(first, c1, &bad))
                                        },
                                        || {
                                            second.scope(|s2| {
                                                s2.spawn(|_| check(second, c2, &bad));
                                                s.spawn(|_| check(first, c1, &bad));
                                            })
                                        },
                                    );
                                });
                            }
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        wait_fully_idle(&a);
        wait_fully_idle(&b);
        let bad = bad.lock().unwrap();
        assert!(
            bad.is_empty(),
            "{} violations, first: {}",
            bad.len(),
            bad[0]
        );
        assert!(bounds_violation(&a.stats(), 1).is_none());
        assert!(bounds_violation(&b.stats(), 2).is_none());
    });
}

// ---------------------------------------------------------------------------------------------
// Dropping pools, global pool
// ---------------------------------------------------------------------------------------------

/// The last handle of B is dropped by a job of A right after it called into B and spawned
/// (queued) into B, while B's only token is busy: everything spawned must still run.
#[test]
fn the_last_handle_of_a_pool_dropped_in_another_pools_job_after_spawning_into_it() {
    watchdog(120, || {
        for round in 0..50 {
            let a = pool(2, 2);
            let b = Arc::new(pool(1 + round % 2, 1));
            let ran = Arc::new(AtomicUsize::new(0));
            let r = ran.clone();
            b.spawn(move || {
                std::thread::sleep(Duration::from_micros(200));
                r.fetch_add(1, Ordering::SeqCst);
            });
            for _ in 0..2 {
                let (b2, r) = (b.clone(), ran.clone());
                a.spawn(move || {
                    let r2 = r.clone();
                    b2.install(|| r2.fetch_add(1, Ordering::SeqCst));
                    for _ in 0..3 {
                        let r3 = r.clone();
                        b2.spawn(move || {
                            r3.fetch_add(1, Ordering::SeqCst);
                        });
                    }
                    drop(b2);
                });
            }
            drop(b);
            spin_until(|| ran.load(Ordering::SeqCst) == 1 + 2 * 4);
            wait_idle(&a);
        }
    });
}

/// The pool is dropped by its own worker (the last handle is owned by one of its jobs) while a
/// scope of it has deferred spawns from another pool outstanding.
#[test]
fn a_pool_dropped_by_its_own_job_while_a_scope_has_deferred_spawns() {
    watchdog(60, || {
        for _ in 0..20 {
            let a = Arc::new(pool(2, 2));
            let b = Arc::new(pool(1, 1));
            let ran = Arc::new(AtomicUsize::new(0));
            let (a2, b2, r) = (a.clone(), b.clone(), ran.clone());
            b.spawn(move || {
                treepool::scope(|s| {
                    a2.install(|| {
                        for _ in 0..4 {
                            let r = r.clone();
                            s.spawn(move |_| {
                                r.fetch_add(1, Ordering::SeqCst);
                            });
                        }
                    });
                    drop(b2); // maybe the last handle
                });
            });
            drop(b);
            spin_until(|| ran.load(Ordering::SeqCst) == 4);
            wait_fully_idle(&a);
        }
    });
}

/// The free functions called on a worker of pool A go to A, also inside a credit root of A
/// called from B, and never to the global pool.
#[test]
fn free_functions_on_another_pools_worker_use_that_pool() {
    watchdog(60, || {
        let a = pool(3, 2);
        let b = pool(1, 1);
        let (n, idx, scoped) = b.install(|| {
            a.install(|| {
                let n = treepool::current_num_threads();
                let (i, _) = treepool::join(treepool::current_thread_index, || ());
                let mut scoped = None;
                treepool::scope(|s| s.spawn(|_| scoped = treepool::current_thread_index()));
                (n, i, scoped)
            })
        });
        assert_eq!(n, 3);
        assert!(idx.unwrap() < 3 && scoped.unwrap() < 3);
        let before = a.stats().admitted_on_loan + a.stats().admitted_from_pool;
        let (tx, rx) = std::sync::mpsc::channel();
        b.install(|| {
            a.install(|| treepool::spawn(move || tx.send(treepool::current_num_threads()).unwrap()))
        });
        assert_eq!(rx.recv().unwrap(), 3);
        wait_fully_idle(&a);
        assert!(a.stats().admitted_on_loan + a.stats().admitted_from_pool > before);
    });
}

// ---------------------------------------------------------------------------------------------
// Random cross-pool trees
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// `pools[p].install(child)`.
    Install(usize, usize),
    /// `pools[p].join(c1, c2)`.
    Join(usize, usize, usize),
    /// `pools[p].scope(|s| spawn each child into s)`.
    Scope(usize, Vec<usize>),
    /// `pools[p].spawn(child)` (detached).
    Detached(usize, usize),
    /// Spawn `child` into the k-th enclosing scope (modulo their number), of whatever pool.
    SpawnInto(usize, usize),
}

#[derive(Debug, Clone, Default)]
struct Node {
    ops: Vec<Op>,
    panic: bool,
}

struct Tree {
    nodes: Vec<Node>,
}

fn gen_tree(rng: &mut Rng, npools: usize, budget: usize) -> Tree {
    let mut nodes = vec![Node::default()];
    let mut stack = vec![(0usize, 0usize)];
    while let Some((n, depth)) = stack.pop() {
        if depth >= 6 || nodes.len() >= budget {
            continue;
        }
        let nops = rng.range(0, 3) as usize;
        for _ in 0..nops {
            if nodes.len() + 3 >= budget {
                break;
            }
            let p = rng.range(0, npools as u64 - 1) as usize;
            let kind = rng.range(0, 9);
            let k = rng.range(0, 2) as usize;
            let mut child = || {
                let panic = rng.range(0, 15) == 0;
                nodes.push(Node { ops: vec![], panic });
                let c = nodes.len() - 1;
                stack.push((c, depth + 1));
                c
            };
            let op = match kind {
                0 | 1 => Op::Install(p, child()),
                2 => {
                    let c1 = child();
                    let c2 = child();
                    Op::Join(p, c1, c2)
                }
                3 | 4 => Op::Scope(p, (0..=k).map(|_| child()).collect()),
                5 => Op::Detached(p, child()),
                _ => Op::SpawnInto(k, child()),
            };
            nodes[n].ops.push(op);
        }
    }
    Tree { nodes }
}

struct World {
    pools: Vec<ThreadPool>,
    caps: Vec<usize>,
    /// Leaf jobs running now / at most at once, per pool.
    leaves: Vec<AtomicUsize>,
    peak_leaves: Vec<AtomicUsize>,
    ran: AtomicUsize,
    bad: Mutex<Vec<String>>,
}

/// A scope pointer of some pool: (pool index, address of a `Scope`).
type Scopes = Vec<(usize, usize)>;

fn erase(s: &Scope<'_>) -> usize {
    s as *const Scope<'_> as *const () as usize
}

/// # Safety
/// `addr` is the address of a scope that is alive: the caller runs inside it.
unsafe fn scope_at<'a>(addr: usize) -> &'a Scope<'static> {
    unsafe { &*(addr as *const Scope<'static>) }
}

fn run_node(w: &Arc<World>, t: &Arc<Tree>, n: usize, pool: usize, is_job: bool, scopes: &Scopes) {
    w.ran.fetch_add(1, Ordering::SeqCst);
    if let Some(v) = bounds_violation(&w.pools[pool].stats(), w.caps[pool]) {
        w.bad.lock().unwrap().push(format!("pool {pool}: {v}"));
    }
    let node = &t.nodes[n];
    if node.ops.is_empty() && is_job {
        let now = w.leaves[pool].fetch_add(1, Ordering::SeqCst) + 1;
        w.peak_leaves[pool].fetch_max(now, Ordering::SeqCst);
        for _ in 0..20 {
            std::thread::yield_now();
        }
        w.leaves[pool].fetch_sub(1, Ordering::SeqCst);
    }
    for op in &node.ops {
        // Every op is caught, so that every node of the tree runs whatever panics.
        let _ = catch_unwind(AssertUnwindSafe(|| run_op(w, t, op, pool, scopes)));
    }
    if node.panic {
        resume_unwind(Box::new("node panicked"));
    }
}

fn run_op(w: &Arc<World>, t: &Arc<Tree>, op: &Op, pool: usize, scopes: &Scopes) {
    match *op {
        Op::Install(p, c) => {
            w.pools[p].install(|| run_node(w, t, c, p, p != pool, scopes));
        }
        Op::Join(p, c1, c2) => {
            w.pools[p].join(
                || run_node(w, t, c1, p, false, scopes),
                || run_node(w, t, c2, p, false, scopes),
            );
        }
        Op::Scope(p, ref cs) => {
            w.pools[p].scope(|s| {
                let mut inner = scopes.clone();
                inner.push((p, erase(s)));
                for &c in cs {
                    let (w2, t2, inner2) = (w.clone(), t.clone(), inner.clone());
                    // SAFETY: `s` is alive: this is its body.
                    unsafe { scope_at(erase(s)) }.spawn(move |_| {
                        run_node(&w2, &t2, c, p, true, &inner2);
                    });
                }
            });
        }
        Op::Detached(p, c) => {
            let (w2, t2) = (w.clone(), t.clone());
            w.pools[p].spawn(move || run_node(&w2, &t2, c, p, true, &Vec::new()));
        }
        Op::SpawnInto(k, c) => {
            if scopes.is_empty() {
                return run_node(w, t, c, pool, false, scopes);
            }
            let k = k % scopes.len();
            let (sp, addr) = scopes[k];
            let inner: Scopes = scopes[..=k].to_vec();
            let (w2, t2) = (w.clone(), t.clone());
            // SAFETY: scope k encloses the running code (scopes are passed down only through
            // calls that wait: install, join, scope), so it is alive.
            unsafe { scope_at(addr) }.spawn(move |_| run_node(&w2, &t2, c, sp, true, &inner));
        }
    }
}

fn run_tree(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let npools = rng.range(2, 4) as usize;
    let mut caps = Vec::new();
    let mut pools = Vec::new();
    for _ in 0..npools {
        let threads = rng.range(1, 3) as usize;
        let cap = rng.range(1, 3) as usize;
        caps.push(cap);
        pools.push(
            treepool::ThreadPoolBuilder::new()
                .num_threads(threads)
                .max_inflight(cap)
                .panic_handler(drop)
                .build()
                .unwrap(),
        );
    }
    let tree = Arc::new(gen_tree(&mut rng, npools, 40));
    let w = Arc::new(World {
        pools,
        leaves: (0..npools).map(|_| AtomicUsize::new(0)).collect(),
        peak_leaves: (0..npools).map(|_| AtomicUsize::new(0)).collect(),
        caps,
        ran: AtomicUsize::new(0),
        bad: Mutex::new(Vec::new()),
    });
    // 1 to 3 plain threads run the same tree at once, each from a pool of its own choice.
    let roots = rng.range(1, 3) as usize;
    let roots = std::env::var("TREEPOOL_ATTACK_ROOTS").map_or(roots, |v| v.parse().unwrap());
    let tops: Vec<usize> = (0..roots)
        .map(|_| rng.range(0, npools as u64 - 1) as usize)
        .collect();
    std::thread::scope(|ts| {
        for &top in &tops {
            let (w2, t2) = (w.clone(), tree.clone());
            ts.spawn(move || {
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    w2.pools[top].install(|| run_node(&w2, &t2, 0, top, true, &Vec::new()))
                }));
            });
        }
    });
    spin_until(|| w.ran.load(Ordering::SeqCst) == roots * tree.nodes.len());
    for (i, p) in w.pools.iter().enumerate() {
        wait_fully_idle(p);
        let s = p.stats();
        if let Some(v) = bounds_violation(&s, w.caps[i]) {
            w.bad
                .lock()
                .unwrap()
                .push(format!("pool {i} at the end: {v}"));
        }
        let leaves = w.peak_leaves[i].load(Ordering::SeqCst);
        if leaves > w.caps[i] + s.peak_calls_in {
            w.bad.lock().unwrap().push(format!(
                "pool {i}: {leaves} leaf jobs at once > cap {} + peak_calls_in {}",
                w.caps[i], s.peak_calls_in
            ));
        }
    }
    let bad = w.bad.lock().unwrap();
    match bad.first() {
        None => Ok(()),
        Some(first) => Err(format!("{} violations, first: {first}", bad.len())),
    }
}

#[test]
fn random_cross_pool_trees_with_deferred_scope_spawns() {
    let secs: u64 = std::env::var("TREEPOOL_ATTACK_SECS")
        .ok()
        .map_or(5, |v| v.parse().unwrap());
    let max_trees: u64 = std::env::var("TREEPOOL_ATTACK_TREES")
        .ok()
        .map_or(u64::MAX, |v| v.parse().unwrap());
    let seeds: Box<dyn Iterator<Item = u64>> = match std::env::var("TREEPOOL_ATTACK_SEED") {
        Ok(s) => Box::new(std::iter::once(s.parse().unwrap())),
        Err(_) => Box::new(1u64..),
    };
    let start = Instant::now();
    let mut trees = 0;
    let mut slowest = (Duration::ZERO, 0);
    for seed in seeds {
        if start.elapsed() > Duration::from_secs(secs) || trees >= max_trees {
            break;
        }
        let t0 = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| watchdog(60, move || run_tree(seed))));
        if t0.elapsed() > slowest.0 {
            slowest = (t0.elapsed(), seed);
        }
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => panic!("seed {seed}: {msg} (rerun: TREEPOOL_ATTACK_SEED={seed})"),
            Err(p) => panic!(
                "seed {seed}: {} (rerun: TREEPOOL_ATTACK_SEED={seed})",
                describe(p)
            ),
        }
        trees += 1;
    }
    println!(
        "{trees} random cross-pool trees; slowest: seed {} in {:?}",
        slowest.1, slowest.0
    );
}
