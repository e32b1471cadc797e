//! A join's `b` run by a wait of its own job (`WorkerThread::run_own_half`): in place, as part
//! of the job, once, with its panics, try_scope links and stack rule intact. From the second
//! adversarial review of issues 35 and 36, written for plain joins (past three private halves a
//! join kept its `b` in a list of its own then); every join keeps its `b` in its thread's split
//! stack since issue 39, and the tests still nest 3 joins first, as they did to reach a plain
//! join.

use crate::common::{
    catch, isolated, pool, quiet_panics_starting_with, settle, spin_until, watchdog,
};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// Runs `f` under `levels` nested joins of the current job.
fn under_kept_joins<R: Send>(levels: u32, f: impl FnOnce() -> R + Send) -> R {
    if levels == 0 {
        return f();
    }
    treepool::join(|| under_kept_joins(levels - 1, f), || ()).0
}

#[test]
fn b_run_by_a_wait_panics_and_the_join_reraises_it_after_a() {
    quiet_panics_starting_with("halves-run-by-waits:");
    watchdog(60, || {
        let (x, y) = (pool(1, 1), pool(1, 1));
        let b_ran = AtomicBool::new(false);
        let a_done = AtomicBool::new(false);
        let r = catch(|| {
            x.install(|| {
                under_kept_joins(3, || {
                    treepool::join(
                        || {
                            y.install(|| spin_until(|| b_ran.load(SeqCst)));
                            a_done.store(true, SeqCst);
                        },
                        || {
                            b_ran.store(true, SeqCst);
                            panic!("{}", String::from("halves-run-by-waits: plain b"));
                        },
                    )
                })
            })
        });
        assert_eq!(r.err().as_deref(), Some("halves-run-by-waits: plain b"));
        assert!(
            a_done.load(SeqCst),
            "a did not finish before b's panic was raised"
        );
        settle([&x, &y]);
    });
}

#[test]
fn a_panicking_after_its_b_ran_in_a_wait_wins_over_b() {
    quiet_panics_starting_with("halves-run-by-waits:");
    watchdog(60, || {
        let (x, y) = (pool(1, 1), pool(1, 1));
        let b_ran = AtomicUsize::new(0);
        let r = catch(|| {
            x.install(|| {
                under_kept_joins(3, || {
                    treepool::join(
                        || {
                            y.install(|| spin_until(|| b_ran.load(SeqCst) > 0));
                            panic!("{}", String::from("halves-run-by-waits: plain a"));
                        },
                        || {
                            b_ran.fetch_add(1, SeqCst);
                            panic!("{}", String::from("halves-run-by-waits: plain b"));
                        },
                    )
                })
            })
        });
        assert_eq!(r.err().as_deref(), Some("halves-run-by-waits: plain a"));
        assert_eq!(b_ran.load(SeqCst), 1, "b ran {} times", b_ran.load(SeqCst));
        settle([&x, &y]);
    });
}

/// `n` nested joins; the innermost `a` waits (through `y`) until every `b` ran.
fn chain(y: &treepool::ThreadPool, k: usize, n: usize, runs: &[AtomicUsize]) -> usize {
    if k == n {
        y.install(|| spin_until(|| runs.iter().all(|r| r.load(SeqCst) > 0)));
        return 0;
    }
    let (a, b) = treepool::join(
        || chain(y, k + 1, n, runs),
        || {
            runs[k].fetch_add(1, SeqCst);
            k
        },
    );
    a + b
}

#[test]
fn every_b_of_a_chain_runs_once_when_the_innermost_a_waits_for_all() {
    watchdog(60, || {
        let (x, y) = (pool(1, 2), pool(1, 1));
        for n in [1, 2, 5, 40] {
            let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            let sum = x.install(|| under_kept_joins(3, || chain(&y, 0, n, &runs)));
            assert_eq!(sum, n * (n - 1) / 2, "n {n}");
            for (k, r) in runs.iter().enumerate() {
                assert_eq!(
                    r.load(SeqCst),
                    1,
                    "n {n}: b {k} ran {} times",
                    r.load(SeqCst)
                );
            }
        }
        let [s, _] = settle([&x, &y]);
        crate::common::assert_peak_bounds(&s, 2);
    });
}

/// K, a spawned job run above J by J's wait, waits (through Y) for its own `b`: K's wait runs
/// K's halves as part of K, and J's halves only as admitted jobs, never as part of J (J is not
/// current): with one token (J's is lent to K) none of them runs inside K.
#[test]
fn a_job_run_above_by_the_joiners_wait_runs_the_joiners_halves_only_admitted() {
    watchdog(60, || {
        for cap in [1, 2] {
            let (x, y) = (pool(1, cap), pool(1, 1));
            let in_k = AtomicBool::new(false);
            let wrong = AtomicBool::new(false);
            let bk = AtomicBool::new(false);
            x.install(|| {
                under_kept_joins(3, || {
                    treepool::join(
                        || {
                            treepool::scope(|s| {
                                s.spawn(|_| {
                                    in_k.store(true, SeqCst);
                                    under_kept_joins(3, || {
                                        treepool::join(
                                            || y.install(|| spin_until(|| bk.load(SeqCst))),
                                            || bk.store(true, SeqCst),
                                        )
                                    });
                                    in_k.store(false, SeqCst);
                                });
                            })
                        },
                        || {
                            if in_k.load(SeqCst) {
                                wrong.store(true, SeqCst);
                            }
                        },
                    )
                })
            });
            assert!(
                cap > 1 || !wrong.load(SeqCst),
                "cap {cap}: J's b ran inside K with no token to admit it"
            );
            let [s, _] = settle([&x, &y]);
            crate::common::assert_peak_bounds(&s, cap);
        }
    });
}

#[test]
fn b_run_by_a_wait_in_a_fallible_body_is_not_cancelled_by_it() {
    watchdog(60, || {
        let (x, y) = (pool(1, 2), pool(1, 1));
        let b_done = AtomicBool::new(false);
        let ran = AtomicUsize::new(0);
        let (ra, rb) = x.install(|| {
            under_kept_joins(3, || {
                treepool::join(
                    || {
                        treepool::try_scope(|s: &treepool::TryScope<&str>| {
                            s.spawn(|_| Err("body's job failed"));
                            y.install(|| spin_until(|| b_done.load(SeqCst)));
                            Ok(())
                        })
                    },
                    || {
                        let r = treepool::try_scope(|s2: &treepool::TryScope<&str>| {
                            for _ in 0..10 {
                                s2.spawn(|_| {
                                    ran.fetch_add(1, SeqCst);
                                    Ok(())
                                });
                            }
                            Ok(s2.is_cancelled())
                        });
                        b_done.store(true, SeqCst);
                        r
                    },
                )
            })
        });
        assert_eq!(ra, Err("body's job failed"));
        assert_eq!(rb, Ok(false), "b's own try_scope was cancelled by a's body");
        assert_eq!(ran.load(SeqCst), 10);
        settle([&x, &y]);
    });
}

#[test]
fn a_stream_item_waiting_for_the_consumers_b_finishes() {
    watchdog(60, || {
        let (x, y) = (pool(1, 1), pool(1, 1));
        let b_done = AtomicBool::new(false);
        let (sum, ()) = x.install(|| {
            under_kept_joins(3, || {
                treepool::join(
                    || {
                        treepool::scope(|s| {
                            s.map_ordered(0..6usize, |i| {
                                if i == 2 {
                                    y.install(|| spin_until(|| b_done.load(SeqCst)));
                                }
                                i
                            })
                            .sum::<usize>()
                        })
                    },
                    || b_done.store(true, SeqCst),
                )
            })
        });
        assert_eq!(sum, 15);
        settle([&x, &y]);
    });
}

/// Level `n` of a chain in which every `b` is run by its `a`'s wait and starts the next
/// level: the waits nest `n` deep on one thread.
fn nested_waits(y: &treepool::ThreadPool, n: usize, deepest: &AtomicUsize) {
    if n == 0 {
        return;
    }
    let flag = AtomicBool::new(false);
    let mut buf = [0u8; 2048];
    buf[n % 2048] = n as u8;
    std::hint::black_box(&mut buf);
    treepool::join(
        || y.install(|| spin_until(|| flag.load(SeqCst))),
        || {
            flag.store(true, SeqCst);
            deepest.fetch_max(n, SeqCst);
            nested_waits(y, n - 1, deepest);
        },
    );
}

#[test]
fn halves_run_by_waits_nest_deep_without_overflow() {
    isolated!(120, || {
        watchdog(100, || {
            let x = treepool::ThreadPoolBuilder::new()
                .num_threads(1)
                .max_inflight(1)
                .stack_size(256 * 1024)
                .build()
                .unwrap();
            let y = Arc::new(pool(2, 2));
            let deepest = AtomicUsize::new(0);
            x.install(|| under_kept_joins(3, || nested_waits(&y, 600, &deepest)));
            assert_eq!(deepest.load(SeqCst), 600);
            let [s] = settle([&x]);
            assert!(s.stack_segments > 0, "no segment was used: {s:?}");
        })
    });
}
