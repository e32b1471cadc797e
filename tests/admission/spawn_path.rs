//! The spawn path's shortcuts under attack (from the adversarial review of them): `finish`'s
//! no-RMW fast path, the `Spare` hand-off in `help_until_admitted` (which once starved queued
//! jobs: the two `a_queued_…` tests), and the one-allocation `LenderRef`. Meant to run under
//! AddressSanitizer and `--cfg treepool_chaos` too (`.ci/run` does).
use crate::common::{assert_idle, pool, settle, spin_until, watchdog, Rng};

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mid-flight bounds on a snapshot (peak figures, since a snapshot is not one instant).
fn check_mid_flight(p: &treepool::ThreadPool, cap: usize) {
    let s = p.stats();
    assert!(
        s.tokens_in_use <= cap,
        "tokens {} > cap {cap}: {s:?}",
        s.tokens_in_use
    );
    assert!(
        s.executing <= cap + s.calls_in,
        "executing > cap + calls_in: {s:?}"
    );
    assert!(
        s.peak_executing <= cap + s.peak_calls_in,
        "peak_executing > cap + peak_calls_in: {s:?}"
    );
    assert!(
        s.inflight <= (cap + s.peak_calls_in) * s.peak_depth.max(1),
        "inflight > (cap + calls_in) x depth: {s:?}"
    );
}

/// Runs `f` while a sampler thread checks the bounds of `p` continuously.
fn with_sampler(p: &Arc<treepool::ThreadPool>, cap: usize, f: impl FnOnce()) {
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                check_mid_flight(&p, cap);
                n += 1;
            }
            n
        })
    };
    f();
    stop.store(true, Relaxed);
    sampler.join().expect("the sampler saw a violated bound");
}

/// Exactly-once bookkeeping for jobs with ids.
struct Ledger {
    runs: Vec<AtomicU32>,
    next: AtomicUsize,
}

impl Ledger {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Ledger {
            runs: (0..n).map(|_| AtomicU32::new(0)).collect(),
            next: AtomicUsize::new(0),
        })
    }
    fn id(&self) -> usize {
        let id = self.next.fetch_add(1, Relaxed);
        assert!(id < self.runs.len(), "ledger too small");
        id
    }
    fn ran(&self, id: usize) {
        let was = self.runs[id].fetch_add(1, Relaxed);
        assert_eq!(was, 0, "job {id} ran twice");
    }
    fn check(&self) {
        let n = self.next.load(Relaxed);
        for (i, r) in self.runs[..n].iter().enumerate() {
            assert_eq!(r.load(Relaxed), 1, "job {i} ran {} times", r.load(Relaxed));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Attack A (Spare, POOL): a pool token freed by a job that a waiting spawner's help loop ran goes
// straight to that spawner and is never released to the pool queue, so a root waiting in the
// queue (an `install` from outside the pool, rule 5) is never granted while the spawner keeps
// spawning. Before fbdd427 the first release granted it.
// ---------------------------------------------------------------------------------------------
#[test]
fn a_queued_outside_install_is_granted_while_a_job_spawns_in_a_loop() {
    watchdog(20, || {
        const LIMIT: usize = 20_000;
        let p = Arc::new(pool(1, 2));
        let full = Arc::new(AtomicBool::new(false));
        let ran = Arc::new(AtomicBool::new(false));
        let outside = {
            let (p, full, ran) = (p.clone(), full.clone(), ran.clone());
            std::thread::spawn(move || {
                spin_until(|| full.load(Acquire));
                // Both tokens are in use: this root registers in the pool queue and parks.
                p.install(|| ran.store(true, Release));
            })
        };
        let spawned = p.install(|| {
            treepool::scope(|s| {
                s.spawn(|_| {}); // on the root's loan
                s.spawn(|_| {}); // on the second pool token
                full.store(true, Release);
                let waits = p.stats().admission_waits;
                spin_until(|| p.stats().admission_waits > waits);
                std::thread::sleep(Duration::from_millis(50)); // let it register
                let mut n = 0;
                while !ran.load(Acquire) && n < LIMIT {
                    s.spawn(|_| {});
                    n += 1;
                }
                n
            })
        });
        outside.join().unwrap();
        settle([&p]);
        assert!(
            spawned < LIMIT,
            "the queued install was not granted during {spawned} spawns, each of which freed a \
             pool token (the Spare kept it for the spawner every time)"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Stress shapes for the fast path, the Spare and LenderRef: meant for ASan + chaos.
// ---------------------------------------------------------------------------------------------

/// Recursive tree: each job spawns `fan` children into the scope, some of them detached,
/// some through a join whose halves both spawn.
fn tree<'s>(
    s: &treepool::Scope<'s>,
    depth: u32,
    fan: u32,
    ledger: &'s Arc<Ledger>,
    det: &'s Arc<AtomicUsize>,
    seed: u64,
) {
    let id = ledger.id();
    s.spawn(move |s| {
        ledger.ran(id);
        if depth == 0 {
            return;
        }
        let mut rng = Rng::new(seed);
        for i in 0..fan {
            match rng.range(0, 5) {
                0 => {
                    // join inside spawn: both halves spawn (`b` stolen, or declined, while
                    // the other half's spawn is in the help loop)
                    treepool::join(
                        || tree(s, depth - 1, fan, ledger, det, seed * 31 + i as u64),
                        || {
                            tree(
                                s,
                                depth - 1,
                                fan.saturating_sub(1),
                                ledger,
                                det,
                                seed * 37 + i as u64,
                            )
                        },
                    );
                }
                1 => {
                    // a detached child that outlives this job while holding its loan
                    let det = det.clone();
                    det.fetch_add(1, Relaxed);
                    treepool::spawn(move || {
                        let d2 = det.clone();
                        d2.fetch_add(1, Relaxed);
                        treepool::spawn(move || {
                            d2.fetch_sub(1, Relaxed);
                        });
                        det.fetch_sub(1, Relaxed);
                    });
                }
                _ => tree(s, depth - 1, fan, ledger, det, seed * 41 + i as u64),
            }
        }
    });
}

#[test]
fn recursive_spawn_join_detached_on_caps_1_and_2() {
    watchdog(60, || {
        for threads in 1..=4 {
            for cap in 1..=2 {
                let p = Arc::new(pool(threads, cap));
                let ledger = Ledger::new(200_000);
                let det = Arc::new(AtomicUsize::new(0));
                let start = Instant::now();
                with_sampler(&p, cap, || {
                    for round in 0..3u64 {
                        p.scope(|s| {
                            tree(
                                s,
                                3,
                                4,
                                &ledger,
                                &det,
                                round + 1 + threads as u64 * 7 + cap as u64,
                            )
                        });
                    }
                });
                spin_until(|| det.load(Relaxed) == 0);
                settle([&p]);
                ledger.check();
                assert!(
                    start.elapsed() < Duration::from_secs(15),
                    "{threads}/{cap} too slow"
                );
            }
        }
    });
}

/// Nested help loops: cap 1, one thread; every job the loop runs spawns and waits itself.
#[test]
fn nested_help_loops_on_one_token() {
    watchdog(20, || {
        for threads in [1, 2] {
            let p = Arc::new(pool(threads, 1));
            let count = AtomicUsize::new(0);
            with_sampler(&p, 1, || {
                p.scope(|s| {
                    for _ in 0..50 {
                        s.spawn(|s| {
                            count.fetch_add(1, Relaxed);
                            for _ in 0..20 {
                                s.spawn(|s| {
                                    count.fetch_add(1, Relaxed);
                                    for _ in 0..3 {
                                        s.spawn(|_| {
                                            count.fetch_add(1, Relaxed);
                                        });
                                    }
                                });
                            }
                        });
                    }
                });
            });
            assert_eq!(count.load(Relaxed), 50 + 50 * 20 + 50 * 20 * 3);
            settle([&p]);
        }
    });
}

/// A loan that passes through the spare from a grandchild: the child run by the help loop
/// spawns a detached grandchild on its loan and finishes while lending (parked); the help loop
/// then runs the grandchild, whose finish returns the parked loan up the chain into the spare.
#[test]
fn parked_loan_reaches_the_spare_through_a_grandchild() {
    watchdog(20, || {
        for threads in [1, 2, 3] {
            for cap in [1, 2] {
                let p = Arc::new(pool(threads, cap));
                let count = Arc::new(AtomicUsize::new(0));
                let expect = Arc::new(AtomicUsize::new(0));
                with_sampler(&p, cap, || {
                    p.install(|| {
                        treepool::scope(|s| {
                            for _ in 0..400 {
                                let (c, e) = (count.clone(), expect.clone());
                                e.fetch_add(1, Relaxed);
                                s.spawn(move |_| {
                                    c.fetch_add(1, Relaxed);
                                    for _ in 0..2 {
                                        let c = c.clone();
                                        e.fetch_add(1, Relaxed);
                                        treepool::spawn(move || {
                                            c.fetch_add(1, Relaxed);
                                        });
                                    }
                                });
                            }
                        })
                    });
                });
                settle([&p]);
                assert_eq!(count.load(Relaxed), expect.load(Relaxed));
            }
        }
    });
}

/// Panics in jobs run by the help loop, including ones that spawn before panicking.
#[test]
fn panics_in_jobs_run_by_the_help_loop() {
    watchdog(20, || {
        for threads in [1, 2, 4] {
            for cap in [1, 2] {
                let p = Arc::new(pool(threads, cap));
                let ok = AtomicUsize::new(0);
                with_sampler(&p, cap, || {
                    for _ in 0..20 {
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            p.scope(|s| {
                                for i in 0..50 {
                                    let ok = &ok;
                                    s.spawn(move |s| {
                                        s.spawn(move |_| {
                                            ok.fetch_add(1, Relaxed);
                                        });
                                        if i % 7 == 3 {
                                            panic!("boom");
                                        }
                                        ok.fetch_add(1, Relaxed);
                                    });
                                }
                            })
                        }));
                        assert!(r.is_err());
                    }
                });
                settle([&p]);
                assert_eq!(ok.load(Relaxed), 20 * (50 + 50 - 7));
            }
        }
    });
}

/// Deferred scope spawns from another pool's job (their embedded lender is replaced), mixed with
/// ordinary spawns, on one token.
#[test]
fn deferred_spawns_from_another_pool_on_one_token() {
    watchdog(20, || {
        for threads in [1, 2] {
            let a = Arc::new(pool(threads, 1));
            let b = pool(2, 1);
            let count = AtomicUsize::new(0);
            with_sampler(&a, 1, || {
                for _ in 0..20 {
                    a.scope(|s| {
                        for _ in 0..10 {
                            s.spawn(|s| {
                                b.install(|| {
                                    for _ in 0..5 {
                                        s.spawn(|s| {
                                            count.fetch_add(1, Relaxed);
                                            s.spawn(|_| {
                                                count.fetch_add(1, Relaxed);
                                            });
                                        });
                                    }
                                });
                                count.fetch_add(1, Relaxed);
                            });
                        }
                    });
                }
            });
            assert_eq!(count.load(Relaxed), 20 * 10 * (1 + 5 * 2));
            settle([&a]);
            settle([&b]);
        }
    });
}

/// Join inside spawn inside join, with the spawning half's help loop popping the other half.
#[test]
fn join_halves_popped_by_the_help_loop() {
    watchdog(20, || {
        for threads in [1, 2, 4] {
            for cap in [1, 2] {
                let p = Arc::new(pool(threads, cap));
                let count = AtomicUsize::new(0);
                with_sampler(&p, cap, || {
                    p.scope(|s| {
                        for _ in 0..30 {
                            s.spawn(|s| {
                                let c = &count;
                                treepool::join(
                                    || {
                                        for _ in 0..10 {
                                            s.spawn(move |_| {
                                                c.fetch_add(1, Relaxed);
                                            });
                                        }
                                    },
                                    || {
                                        for _ in 0..10 {
                                            s.spawn(move |_| {
                                                treepool::join(
                                                    || c.fetch_add(1, Relaxed),
                                                    || c.fetch_add(1, Relaxed),
                                                );
                                            });
                                        }
                                    },
                                );
                            });
                        }
                    });
                });
                assert_eq!(count.load(Relaxed), 30 * (10 + 20));
                settle([&p]);
            }
        }
    });
}

// Attack A': the same starvation, with the victim a detached spawn from a job of another pool
// (queued in `waiters`, never waits: design §2.3 "granted by whoever frees a pool token").
#[test]
fn a_queued_cross_pool_spawn_is_granted_while_a_job_spawns_in_a_loop() {
    watchdog(20, || {
        const LIMIT: usize = 20_000;
        let a = Arc::new(pool(1, 2));
        let b = Arc::new(pool(1, 1));
        let full = Arc::new(AtomicBool::new(false));
        let ran = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(AtomicBool::new(false));
        {
            let (a, full, ran, queued) = (a.clone(), full.clone(), ran.clone(), queued.clone());
            b.spawn(move || {
                spin_until(|| full.load(Acquire));
                // Both of A's tokens are in use: queued in A's waiters; returns at once.
                a.spawn(move || ran.store(true, Release));
                queued.store(true, Release);
            });
        }
        let spawned = a.install(|| {
            treepool::scope(|s| {
                s.spawn(|_| {});
                s.spawn(|_| {});
                full.store(true, Release);
                spin_until(|| queued.load(Acquire));
                let mut n = 0;
                while !ran.load(Acquire) && n < LIMIT {
                    s.spawn(|_| {});
                    n += 1;
                }
                n
            })
        });
        spin_until(|| ran.load(Acquire));
        settle([&a]);
        assert!(
            spawned < LIMIT,
            "the queued cross-pool spawn was not granted during {spawned} spawns"
        );
    });
}

/// A job that the help loop runs hands its token, its place in the in-flight count and its place
/// in the scope's count to the spawn waiting there. On one thread and one token the jobs in
/// flight are exactly the root and one child at a time, so the exact `peak_inflight` is 2; a
/// place counted twice, or dropped, shows up as a higher peak, a count left over at the end, a
/// scope that returns before its jobs ran, or one that never returns (the watchdog).
#[test]
fn the_token_hand_off_carries_both_counts_exactly() {
    watchdog(30, || {
        let p = pool(1, 1);
        let ran = AtomicUsize::new(0);
        p.install(|| {
            treepool::scope(|s| {
                for _ in 0..1_000 {
                    s.spawn(|_| {
                        ran.fetch_add(1, Relaxed);
                    });
                }
            });
            assert_eq!(ran.load(Relaxed), 1_000, "the scope returned early");
        });
        let stats = p.stats();
        assert_eq!(stats.peak_inflight, 2, "{stats:?}");
        assert_eq!(stats.peak_depth, 2, "{stats:?}");
        assert_idle(&stats);

        // Two threads and two levels: the user's own count of started-but-unfinished jobs never
        // exceeds the reported peak, which stays within B2.
        for threads in [2, 3] {
            let p = Arc::new(pool(threads, 2));
            let alive = AtomicUsize::new(0);
            let user_peak = AtomicUsize::new(0);
            let enter = || {
                let now = alive.fetch_add(1, SeqCst) + 1;
                user_peak.fetch_max(now, SeqCst);
            };
            with_sampler(&p, 2, || {
                p.install(|| {
                    enter();
                    treepool::scope(|s| {
                        for _ in 0..200 {
                            s.spawn(|s| {
                                enter();
                                for _ in 0..20 {
                                    s.spawn(|_| {
                                        enter();
                                        alive.fetch_sub(1, SeqCst);
                                    });
                                }
                                alive.fetch_sub(1, SeqCst);
                            });
                        }
                    });
                    alive.fetch_sub(1, SeqCst);
                });
            });
            let stats = p.stats();
            let seen = user_peak.load(SeqCst);
            assert!(seen <= stats.peak_inflight, "user saw {seen}: {stats:?}");
            assert!(stats.peak_inflight <= 2 * stats.peak_depth, "B2: {stats:?}");
            settle([&p]);
        }
    });
}

/// The scope count goes with the token only between jobs of the same scope: a spawn into an inner
/// scope whose help loop runs a job of the outer scope (and the other way round) counts each
/// scope on its own. On one token every spawn waits and its help loop runs the job just pushed,
/// which alternates between the two scopes. Each scope must return exactly when its own jobs
/// are done.
#[test]
fn jobs_of_two_scopes_in_one_help_loop() {
    watchdog(30, || {
        for threads in [1, 2] {
            let p = pool(threads, 1);
            let outer_ran = AtomicUsize::new(0);
            let inner_ran = AtomicUsize::new(0);
            p.scope(|s| {
                s.spawn(|outer| {
                    treepool::scope(|inner| {
                        for _ in 0..300 {
                            outer.spawn(|_| {
                                outer_ran.fetch_add(1, Relaxed);
                            });
                            inner.spawn(|_| {
                                inner_ran.fetch_add(1, Relaxed);
                            });
                        }
                    });
                    assert_eq!(
                        inner_ran.load(Relaxed),
                        300,
                        "the inner scope returned early"
                    );
                });
            });
            assert_eq!(
                outer_ran.load(Relaxed),
                300,
                "the outer scope returned early"
            );
            settle([&p]);
        }
    });
}

/// A job granted a token by another worker is made runnable by that worker, at once, never left
/// to its spawner (found by the review of a change that did leave it: the spawner's thread may be
/// buried under an unrelated job it picked up while waiting). Pool of 3 workers, 2 tokens. R
/// (token 1) lends its token to C0, which computes on another worker for 3 s; C1 takes token 2
/// for 300 ms on the third worker. X, a call into the pool from a job of pool `q` (on credit),
/// is queued. R spawns C2: no loan, no token, so C2 registers and R's worker, waiting, picks up
/// X. X waits for a plain thread that calls `install` on the pool, which needs a pool token.
/// When C1 ends, its worker grants token 2 to C2. Had it left C2 to R's worker, blocked in X,
/// token 2 would never come free again (C2 could not run) and the `install` would wait for good.
/// (The 300 ms only give R's worker time to pick up X; if it has not, the test passes without
/// testing anything, never fails.)
#[test]
fn a_granted_job_runs_while_its_spawner_is_buried_under_a_blocked_job() {
    watchdog(20, || {
        let p = Arc::new(pool(3, 2));
        let q = Arc::new(pool(1, 1));
        let c0_started = Arc::new(AtomicBool::new(false));
        let c1_started = Arc::new(AtomicBool::new(false));
        let x_ran = Arc::new(AtomicBool::new(false));
        let c2_ran = Arc::new(AtomicBool::new(false));
        p.install(|| {
            treepool::scope(|s| {
                let c0 = c0_started.clone();
                s.spawn(move |_| {
                    c0.store(true, SeqCst);
                    std::thread::sleep(Duration::from_secs(3));
                });
                spin_until(|| c0_started.load(SeqCst));
                let c1 = c1_started.clone();
                s.spawn(move |_| {
                    c1.store(true, SeqCst);
                    std::thread::sleep(Duration::from_millis(300));
                });
                spin_until(|| c1_started.load(SeqCst));
                let (p2, x_ran2) = (p.clone(), x_ran.clone());
                q.spawn(move || {
                    let p3 = p2.clone();
                    p2.install(move || {
                        std::thread::scope(|t| {
                            t.spawn(|| p3.install(|| ()));
                        });
                        x_ran2.store(true, SeqCst);
                    })
                });
                spin_until(|| p.stats().calls_in == 1);
                let c2 = c2_ran.clone();
                s.spawn(move |_| c2.store(true, SeqCst));
            });
        });
        assert!(x_ran.load(SeqCst) && c2_ran.load(SeqCst));
        settle([&p]);
    });
}
