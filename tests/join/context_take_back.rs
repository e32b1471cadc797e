//! `join_context`'s eager `b` taken back after `a` (`join_eagerly`: the newest public half
//! retracted inline, else the general take-back), and its promotions' wake-ups: from the
//! adversarial review of commit 6a85ca2. Every `b` runs exactly once whatever took it (its
//! joiner inline, a wait of `a` in place, a thief, a declining thief and then its joiner), with
//! private halves of plain joins above or below it, with panics, at one token, traced; and a
//! thief asleep when `b` is published is woken (else the barrier tests hang: watchdog).

use crate::common::{catch, pool, quiet_panics_starting_with, settle, spin_until, watchdog, Rng};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Barrier;

/// Iterations of the loops below: `TREEPOOL_STRESS_TREES` scales them (10,000: `n`, the
/// default).
fn scale(n: usize) -> usize {
    match std::env::var("TREEPOOL_STRESS_TREES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(t) => (n * t / 10_000).max(1),
        None => n,
    }
}

/// rayon-core's `join_context_second`: `a` and `b` meet at `barrier` (of 2), so `b` must run on
/// another thread while `a` waits; each says whether it migrated.
pub(crate) fn migrated_at_a_barrier(barrier: &Barrier) -> (bool, bool) {
    treepool::join_context(
        |a| {
            barrier.wait();
            a.migrated()
        },
        |b| {
            barrier.wait();
            b.migrated()
        },
    )
}

/// Runs `f` under `levels` nested plain joins (private halves below the `join_context`).
fn under_plain_joins<R: Send>(levels: u32, f: impl FnOnce() -> R + Send) -> R {
    if levels == 0 {
        return f();
    }
    treepool::join(|| under_plain_joins(levels - 1, f), || ()).0
}

/// Runs `f` under `levels` nested `join_context`s (public halves below).
fn under_context_joins<R: Send>(levels: u32, f: impl FnOnce() -> R + Send) -> R {
    if levels == 0 {
        return f();
    }
    treepool::join_context(|_| under_context_joins(levels - 1, f), |_| ()).0
}

/// A wait inside `a` (a call into another pool) runs the current job's `b` in place; the
/// join then must not run it again, nor lose its value.
#[test]
fn b_run_in_place_by_a_wait_of_a_runs_once() {
    watchdog(120, || {
        let (x, y) = (pool(1, 2), pool(1, 1));
        for below in 0..4u32 {
            for context_below in [false, true] {
                let runs = AtomicUsize::new(0);
                let body = || {
                    treepool::join_context(
                        |_| {
                            y.install(|| spin_until(|| runs.load(SeqCst) > 0));
                            // After the wait: more joins of both kinds, which push above the
                            // slot of the `b` already run.
                            let (p, q) = treepool::join(|| 1, || 2);
                            let (r, s) = treepool::join_context(|_| 3, |_| 4);
                            p + q + r + s
                        },
                        |_| {
                            runs.fetch_add(1, SeqCst);
                            100
                        },
                    )
                };
                let (a, b) = x.install(|| {
                    if context_below {
                        under_context_joins(below, body)
                    } else {
                        under_plain_joins(below, body)
                    }
                });
                assert_eq!((a, b), (10, 100), "below {below} context {context_below}");
                assert_eq!(
                    runs.load(SeqCst),
                    1,
                    "below {below} context {context_below}"
                );
            }
        }
        settle([&x, &y]);
    });
}

/// As above on two workers: the other worker idle while `a` joins after the wait, so that
/// those joins promote the half already run (it becomes public again) and a thief may claim it.
#[test]
fn b_run_in_place_then_promoted_again_runs_once() {
    watchdog(240, || {
        let (x, y) = (pool(2, 4), pool(1, 1));
        for round in 0..scale(300) {
            let runs = AtomicUsize::new(0);
            let (a, b) = x.install(|| {
                under_plain_joins((round % 3) as u32, || {
                    treepool::join_context(
                        |_| {
                            y.install(|| spin_until(|| runs.load(SeqCst) > 0));
                            let mut sum = 0;
                            for i in 0..20u64 {
                                let (p, q) = treepool::join(|| i, || crate::common::fib(8));
                                let (r, s) = treepool::join_context(|_| i, |_| 1u64);
                                sum += p + q + r + s;
                            }
                            sum
                        },
                        |_| {
                            runs.fetch_add(1, SeqCst);
                            7u64
                        },
                    )
                })
            });
            assert_eq!(a, 2 * 190 + 20 * 21 + 20, "round {round}");
            assert_eq!(b, 7, "round {round}");
            assert_eq!(runs.load(SeqCst), 1, "round {round}");
        }
        settle([&x, &y]);
    });
}

/// rayon-core's `join_context_second`, many times: `a` blocks until `b` runs on another
/// worker, which may be asleep when `b` is published; a lost wake-up hangs (watchdog). With
/// plain joins' private halves and `join_context`s' public ones below.
#[test]
fn a_waiting_for_b_elsewhere_never_hangs() {
    watchdog(120, || {
        for threads in [2, 3, 5] {
            let x = pool(threads, threads + 1);
            for round in 0..scale(2000) {
                let barrier = Barrier::new(2);
                let below = (round % 4) as u32;
                let body = || migrated_at_a_barrier(&barrier);
                let (a, b) = x.install(|| {
                    if round % 2 == 0 {
                        under_plain_joins(below, body)
                    } else {
                        under_context_joins(below, body)
                    }
                });
                assert!(!a && b, "threads {threads} round {round}: a {a}, b {b}");
            }
            settle([&x]);
        }
    });
}

/// Nested: each `a` waits until every `b` of the chain ran elsewhere, the `b`s taken by
/// workers that sleep between the rounds.
#[test]
fn chains_of_a_waiting_for_their_bs_elsewhere_never_hang() {
    fn chain(k: usize, n: usize, started: &[AtomicBool], joiner: usize) -> usize {
        if k == n {
            spin_until(|| started.iter().all(|s| s.load(SeqCst)));
            return 0;
        }
        let (a, b) = treepool::join_context(
            |_| chain(k + 1, n, started, joiner),
            |ctx| {
                assert!(ctx.migrated());
                assert_ne!(treepool::current_thread_index(), Some(joiner));
                started[k].store(true, SeqCst);
                k
            },
        );
        a + b
    }
    watchdog(120, || {
        let x = pool(4, 8);
        for round in 0..scale(1000) {
            let n = 1 + round % 3;
            let started: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(false)).collect();
            let sum = x.install(|| {
                let joiner = treepool::current_thread_index().unwrap();
                chain(0, n, &started, joiner)
            });
            assert_eq!(sum, n * (n - 1) / 2, "round {round}");
        }
        settle([&x]);
    });
}

/// At one token a thief that claims `b` declines it (no token for it, unless the joiner already
/// waits for it and lends its own): the joiner runs it after `a`, once.
#[test]
fn b_declined_by_a_thief_at_one_token_runs_once() {
    watchdog(240, || {
        for threads in [2, 3] {
            let x = pool(threads, 1);
            for round in 0..scale(2000) {
                let runs = AtomicUsize::new(0);
                let on = AtomicUsize::new(usize::MAX);
                let (a, b) = x.install(|| {
                    under_plain_joins((round % 3) as u32, || {
                        treepool::join_context(
                            |_| {
                                crate::common::spin_us((round % 7) as u64 * 10);
                                treepool::join(|| 1, || 2).1
                            },
                            |ctx| {
                                runs.fetch_add(1, SeqCst);
                                on.store(treepool::current_thread_index().unwrap(), SeqCst);
                                ctx.migrated()
                            },
                        )
                    })
                });
                // `b` may still run on the thief, admitted on the loan of a joiner that waits
                // for it (design §4.1): only its single run is asserted.
                let _migrated = b;
                assert_eq!(a, 2);
                assert_eq!(runs.load(SeqCst), 1, "round {round}");
            }
            settle([&x]);
        }
    });
}

/// A panic of `a`: `b` still runs exactly once (taken back, or by a thief), and `a`'s panic
/// wins over `b`'s.
#[test]
fn a_panicking_runs_b_once_and_wins() {
    quiet_panics_starting_with("context-take-back:");
    watchdog(240, || {
        for cap in [1, 3] {
            let x = pool(2, cap);
            for round in 0..scale(1000) {
                let runs = AtomicUsize::new(0);
                let b_panics = round % 2 == 1;
                let r = catch(|| {
                    x.install(|| {
                        under_context_joins((round % 3) as u32, || {
                            treepool::join_context(
                                |_| {
                                    let _ = treepool::join_context(|_| 1, |_| 2);
                                    panic!("{}", String::from("context-take-back: a"));
                                },
                                |_| {
                                    runs.fetch_add(1, SeqCst);
                                    if b_panics {
                                        panic!("{}", String::from("context-take-back: b"));
                                    }
                                },
                            )
                        })
                    })
                });
                assert_eq!(
                    r.err().as_deref(),
                    Some("context-take-back: a"),
                    "round {round}"
                );
                assert_eq!(runs.load(SeqCst), 1, "cap {cap} round {round}");
            }
            settle([&x]);
        }
    });
}

/// A panic of `b` taken back inline (the new fast path) reaches the caller after `a` finished.
#[test]
fn b_panicking_inline_after_a_is_raised() {
    quiet_panics_starting_with("context-take-back:");
    watchdog(120, || {
        let x = pool(1, 1);
        for below in 0..3 {
            let a_done = AtomicBool::new(false);
            let r = catch(|| {
                x.install(|| {
                    under_plain_joins(below, || {
                        treepool::join_context(
                            |_| a_done.store(true, SeqCst),
                            |_| panic!("{}", String::from("context-take-back: b")),
                        )
                    })
                })
            });
            assert_eq!(r.err().as_deref(), Some("context-take-back: b"));
            assert!(a_done.load(SeqCst));
            // The pool is still sound: a join after it.
            assert_eq!(x.install(|| treepool::join_context(|_| 1, |_| 2)), (1, 2));
        }
        settle([&x]);
    });
}

/// Random trees mixing `join` and `join_context` on 1 to 4 workers and 1 to 3 tokens: the sum of
/// the leaves, and every node run exactly once.
#[test]
fn random_mixed_trees_sum_right() {
    fn node(rng_seed: u64, depth: u32, runs: &AtomicUsize) -> u64 {
        runs.fetch_add(1, SeqCst);
        if depth == 0 {
            return 1;
        }
        let mut rng = Rng::new(rng_seed);
        let (sa, sb) = (rng.next(), rng.next());
        let da = depth - 1 - (rng.range(0, 2) as u32).min(depth - 1);
        let db = depth - 1 - (rng.range(0, 2) as u32).min(depth - 1);
        let (a, b) = if rng.range(0, 2) == 0 {
            treepool::join(|| node(sa, da, runs), || node(sb, db, runs))
        } else {
            treepool::join_context(|_| node(sa, da, runs), |_| node(sb, db, runs))
        };
        a + b
    }
    fn count(rng_seed: u64, depth: u32) -> (u64, usize) {
        if depth == 0 {
            return (1, 1);
        }
        let mut rng = Rng::new(rng_seed);
        let (sa, sb) = (rng.next(), rng.next());
        let da = depth - 1 - (rng.range(0, 2) as u32).min(depth - 1);
        let db = depth - 1 - (rng.range(0, 2) as u32).min(depth - 1);
        let _ = rng.range(0, 2);
        let (a, na) = count(sa, da);
        let (b, nb) = count(sb, db);
        (a + b, na + nb + 1)
    }
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 3), (4, 2), (4, 8)] {
            let x = pool(threads, cap);
            for seed in 0..scale(200) as u64 {
                let depth = 4 + (seed % 8) as u32;
                let runs = AtomicUsize::new(0);
                let sum = x.install(|| node(seed, depth, &runs));
                let (want, nodes) = count(seed, depth);
                assert_eq!(sum, want, "threads {threads} cap {cap} seed {seed}");
                assert_eq!(
                    runs.load(SeqCst),
                    nodes,
                    "threads {threads} cap {cap} seed {seed}"
                );
            }
            settle([&x]);
        }
    });
}

/// A traced pool takes `join_eagerly`'s traced push: the same results, and no hang.
#[test]
fn traced_join_context_trees_and_barriers() {
    watchdog(240, || {
        let dir = std::env::temp_dir().join(format!("treepool-ctb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.json");
        let x = treepool::ThreadPoolBuilder::new()
            .num_threads(3)
            .max_inflight(4)
            .trace(&path)
            .build()
            .unwrap();
        fn split(d: u32) -> u64 {
            if d == 0 {
                return 1;
            }
            let (a, b) = treepool::join_context(|_| split(d - 1), |_| split(d - 1));
            a + b
        }
        for round in 0..scale(300) {
            assert_eq!(x.install(|| split(8)), 256, "round {round}");
            let barrier = Barrier::new(2);
            let (a, b) = x.install(|| migrated_at_a_barrier(&barrier));
            assert!(!a && b, "round {round}");
        }
        settle([&x]);
        // The workers write the trace as they exit, after `drop` returns: the file stays.
        drop(x);
    });
}

/// The kernel's view of this process's threads named `name`: whether each one is blocked
/// (state `S`, as a worker waiting on its condvar in `Sleep::sleep` is).
#[cfg(target_os = "linux")]
fn blocked_threads_named(name: &str) -> Vec<bool> {
    let mut states = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("a task").path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // `pid (comm) S ...`: the state follows the last `)`.
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        states.push(state == Some('S'));
    }
    states
}

/// A pool of `threads` workers whose threads are named `name` (at most 15 bytes).
#[cfg(target_os = "linux")]
fn named_pool(name: &'static str, threads: usize, cap: usize) -> treepool::ThreadPool {
    treepool::ThreadPoolBuilder::new()
        .num_threads(threads)
        .max_inflight(cap)
        .thread_name(move |_| name.to_string())
        .build()
        .expect("build a pool")
}

/// On a worker of a pool named `name` of `threads` workers: waits until every other worker is
/// blocked (asleep), seen twice in a row, so that only a wake-up reaches them.
#[cfg(target_os = "linux")]
fn until_the_others_sleep(name: &str, threads: usize) {
    let mut seen = 0;
    while seen < 2 {
        let states = blocked_threads_named(name);
        // This thread runs, so it is not blocked: all others are when `threads - 1` are.
        if states.len() == threads && states.iter().filter(|&&s| s).count() == threads - 1 {
            seen += 1;
        } else {
            seen = 0;
        }
        std::thread::yield_now();
    }
}

/// The promotion of `join_context`'s `b` (`WorkerThread::publish_through`) must wake a worker
/// that is already asleep: `a` blocks until `b` runs on another worker, so a missed wake-up
/// hangs (watchdog).
#[cfg(target_os = "linux")]
#[test]
fn a_sleeping_thief_is_woken_by_join_contexts_promotion() {
    watchdog(120, || {
        for (threads, name) in [(2, "ctb-sleep-2"), (3, "ctb-sleep-3")] {
            let x = named_pool(name, threads, threads + 1);
            for round in 0..scale(200) {
                let barrier = Barrier::new(2);
                let (a, b) = x.install(|| {
                    under_plain_joins((round % 3) as u32, || {
                        until_the_others_sleep(name, threads);
                        migrated_at_a_barrier(&barrier)
                    })
                });
                assert!(!a && b, "threads {threads} round {round}: a {a}, b {b}");
            }
            settle([&x]);
        }
    });
}

/// The promotion of a plain join's `b` for an idle worker (`WorkerThread::promote_oldest`, at
/// the join: `idle_at_join`) must wake that worker when it is asleep: `a` blocks until `b` has
/// run elsewhere, so a missed wake-up hangs (watchdog).
#[cfg(target_os = "linux")]
#[test]
fn a_sleeping_idle_worker_is_woken_by_a_plain_joins_promotion() {
    watchdog(120, || {
        for (threads, name) in [(2, "ctb-idle-2"), (3, "ctb-idle-3")] {
            let x = named_pool(name, threads, threads + 1);
            for round in 0..scale(200) {
                let b_ran = AtomicBool::new(false);
                let ((), on) = x.install(|| {
                    until_the_others_sleep(name, threads);
                    treepool::join(
                        || spin_until(|| b_ran.load(SeqCst)),
                        || {
                            b_ran.store(true, SeqCst);
                            treepool::current_thread_index()
                        },
                    )
                });
                assert!(on.is_some(), "threads {threads} round {round}");
            }
            settle([&x]);
        }
    });
}

/// `n` nested `join_context`s; the innermost `a` waits (through `y`) until every `b` ran.
fn context_chain(y: &treepool::ThreadPool, k: usize, n: usize, runs: &[AtomicUsize]) -> usize {
    if k == n {
        y.install(|| spin_until(|| runs.iter().all(|r| r.load(SeqCst) > 0)));
        return 0;
    }
    let (a, b) = treepool::join_context(
        |_| context_chain(y, k + 1, n, runs),
        |_| {
            runs[k].fetch_add(1, SeqCst);
            k
        },
    );
    a + b
}

/// A wait of the innermost `a` runs every `b` of a chain of `join_context`s (public halves,
/// retracted newest first) or thieves take some: each runs once, and each joiner, after `a`,
/// finds its half private, run (`split` below its slot), or taken.
#[test]
fn every_b_of_a_context_chain_runs_once_when_the_innermost_a_waits_for_all() {
    watchdog(120, || {
        for threads in [1, 2, 3] {
            let (x, y) = (pool(threads, 2), pool(1, 1));
            for round in 0..scale(100) {
                for n in [1, 2, 5, 40] {
                    let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    let sum = x.install(|| {
                        under_plain_joins((round % 3) as u32, || context_chain(&y, 0, n, &runs))
                    });
                    assert_eq!(sum, n * (n - 1) / 2, "threads {threads} n {n}");
                    for (k, r) in runs.iter().enumerate() {
                        let ran = r.load(SeqCst);
                        assert_eq!(ran, 1, "threads {threads} n {n}: b {k} ran {ran} times");
                    }
                }
            }
            settle([&x, &y]);
        }
    });
}
