//! `scope_fifo`, `ScopeFifo::spawn_fifo`, `spawn_fifo`, `in_place_scope` and
//! `in_place_scope_fifo`: rayon-core's documented behaviour (spawn order per thread, the body of
//! an in-place scope on the caller, panics raised after every job finished) under the token
//! table's bounds, with `max_inflight` down to 1. Meant to run under AddressSanitizer and
//! `--cfg treepool_chaos` too (`.ci/run` does).
use crate::common;
use crate::common::{assert_idle, assert_peak_bounds, pool, settle, watchdog};

use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

/// B1 and B2 on the peaks of a pool that jobs of other pools called into: each call (an
/// `install`, or an in-place scope opened by another pool's job) adds its credit token.
fn assert_peak_bounds_with_calls(stats: &treepool::Stats, cap: usize) {
    let tokens = cap + stats.peak_calls_in;
    assert!(stats.peak_executing <= tokens, "B1 with calls: {stats:?}");
    assert!(
        stats.peak_inflight <= tokens * stats.peak_depth.max(1),
        "B2 with calls: {stats:?}"
    );
    assert!(stats.tokens_in_use <= cap, "{stats:?}");
}

/// rayon's `test_order!`: ten spawns, each spawning ten, on a one-thread pool of `cap` tokens.
fn fifo_tree_order(cap: usize) -> (Vec<i32>, treepool::Stats) {
    let p = pool(1, cap);
    let order = p.install(|| {
        let order = Mutex::new(vec![]);
        treepool::scope_fifo(|s| {
            let order = &order;
            for i in 0..10 {
                s.spawn_fifo(move |s| {
                    for j in 0..10 {
                        s.spawn_fifo(move |_| order.lock().unwrap().push(i * 10 + j));
                    }
                });
            }
        });
        order.into_inner().unwrap()
    });
    (order, p.stats())
}

#[test]
fn fifo_spawns_of_one_thread_run_in_spawn_order() {
    watchdog(60, || {
        // 1 token: every spawn waits for admission; 2: the one-thread default; 200: no waits.
        for cap in [1, 2, 3, 200] {
            let (order, stats) = fifo_tree_order(cap);
            assert_eq!(order, (0..100).collect::<Vec<_>>(), "cap {cap}");
            assert_peak_bounds(&stats, cap);
            assert_idle(&stats);
        }
    });
}

/// rayon's `test_nested_order!`: ten outer spawns, each opening an inner scope of ten spawns.
macro_rules! nested_order {
    ($cap:expr, $outer_scope:path => $outer_spawn:ident, $inner_scope:path => $inner_spawn:ident) => {{
        let p = pool(1, $cap);
        let order = p.install(|| {
            let order = Mutex::new(vec![]);
            $outer_scope(|s| {
                let order = &order;
                for i in 0..10 {
                    s.$outer_spawn(move |_| {
                        $inner_scope(|s| {
                            for j in 0..10 {
                                s.$inner_spawn(move |_| order.lock().unwrap().push(i * 10 + j));
                            }
                        });
                    });
                }
            });
            order.into_inner().unwrap()
        });
        let stats = p.stats();
        assert_peak_bounds(&stats, $cap);
        assert_idle(&stats);
        order
    }};
}

#[test]
fn fifo_scope_nested_in_lifo_scope_and_the_reverse() {
    watchdog(60, || {
        // rayon's orders need a cap at which no spawn waits (a waiting *lifo* spawn runs its
        // newest admitted sibling early, as `Scope::spawn` always did); at 1 token the fifo
        // parts keep their order and nothing hangs.
        for cap in [100, 200] {
            let fifo_in_lifo =
                nested_order!(cap, treepool::scope => spawn, treepool::scope_fifo => spawn_fifo);
            let expected: Vec<i32> = (0..10)
                .rev()
                .flat_map(|i| (0..10).map(move |j| i * 10 + j))
                .collect();
            assert_eq!(fifo_in_lifo, expected, "fifo in lifo, cap {cap}");
            let lifo_in_fifo =
                nested_order!(cap, treepool::scope_fifo => spawn_fifo, treepool::scope => spawn);
            let expected: Vec<i32> = (0..10)
                .flat_map(|i| (0..10).rev().map(move |j| i * 10 + j))
                .collect();
            assert_eq!(lifo_in_fifo, expected, "lifo in fifo, cap {cap}");
            let fifo_in_fifo = nested_order!(
                cap,
                treepool::scope_fifo => spawn_fifo,
                treepool::scope_fifo => spawn_fifo
            );
            assert_eq!(
                fifo_in_fifo,
                (0..100).collect::<Vec<_>>(),
                "fifo in fifo, cap {cap}"
            );
        }
        for cap in [1, 2] {
            let fifo_in_fifo = nested_order!(
                cap,
                treepool::scope_fifo => spawn_fifo,
                treepool::scope_fifo => spawn_fifo
            );
            assert_eq!(
                fifo_in_fifo,
                (0..100).collect::<Vec<_>>(),
                "fifo in fifo, cap {cap}"
            );
            let mut fifo_in_lifo =
                nested_order!(cap, treepool::scope => spawn, treepool::scope_fifo => spawn_fifo);
            // Each inner fifo scope still runs its ten in order.
            for chunk in fifo_in_lifo.chunks(10) {
                assert!(
                    chunk.windows(2).all(|w| w[0] + 1 == w[1]),
                    "{fifo_in_lifo:?}"
                );
            }
            fifo_in_lifo.sort();
            assert_eq!(fifo_in_lifo, (0..100).collect::<Vec<_>>());
            let mut lifo_in_fifo =
                nested_order!(cap, treepool::scope_fifo => spawn_fifo, treepool::scope => spawn);
            lifo_in_fifo.sort();
            assert_eq!(lifo_in_fifo, (0..100).collect::<Vec<_>>());
        }
    });
}

/// rayon's `test_mixed_order!`: spawns into an outer and an inner scope, interleaved from one
/// body (negative values go to the inner scope), on a one-thread pool of `cap` tokens.
macro_rules! mixed_order {
    ($cap:expr, $outer_scope:path => $outer_spawn:ident, $inner_scope:path => $inner_spawn:ident) => {{
        let p = pool(1, $cap);
        let order = p.install(|| {
            let order = Mutex::new(vec![]);
            $outer_scope(|outer| {
                let order = &order;
                outer.$outer_spawn(move |_| order.lock().unwrap().push(0));
                $inner_scope(|inner| {
                    inner.$inner_spawn(move |_| order.lock().unwrap().push(-1));
                    outer.$outer_spawn(move |_| order.lock().unwrap().push(1));
                    inner.$inner_spawn(move |_| order.lock().unwrap().push(-2));
                    outer.$outer_spawn(move |_| order.lock().unwrap().push(2));
                    inner.$inner_spawn(move |_| order.lock().unwrap().push(-3));
                });
                outer.$outer_spawn(move |_| order.lock().unwrap().push(3));
            });
            order.into_inner().unwrap()
        });
        let stats = p.stats();
        assert_peak_bounds(&stats, $cap);
        assert_idle(&stats);
        order
    }};
}

#[test]
fn mixed_fifo_and_lifo_spawns_from_one_body() {
    watchdog(60, || {
        // Fifo only: rayon's order also at the default one-thread cap (2), where spawns wait.
        for cap in [2, 200] {
            let ff = mixed_order!(cap, treepool::scope_fifo => spawn_fifo, treepool::scope_fifo => spawn_fifo);
            assert_eq!(ff, [-1, 0, -2, 1, -3, 2, 3], "fifo/fifo, cap {cap}");
        }
        // With a lifo scope: rayon's order where no spawn waits for admission.
        for cap in [100, 200] {
            let fl =
                mixed_order!(cap, treepool::scope_fifo => spawn_fifo, treepool::scope => spawn);
            assert_eq!(fl, [-3, 0, -2, 1, -1, 2, 3], "fifo/lifo, cap {cap}");
            let lf =
                mixed_order!(cap, treepool::scope => spawn, treepool::scope_fifo => spawn_fifo);
            assert_eq!(lf, [-1, 2, -2, 1, -3, 3, 0], "lifo/fifo, cap {cap}");
        }
        // One token: the order differs, but every job runs once and nothing hangs.
        let mut ff =
            mixed_order!(1, treepool::scope_fifo => spawn_fifo, treepool::scope_fifo => spawn_fifo);
        ff.sort();
        assert_eq!(ff, [-3, -2, -1, 0, 1, 2, 3]);
    });
}

#[test]
fn detached_fifo_spawns_of_one_thread_run_in_spawn_order() {
    watchdog(60, || {
        for cap in [1, 2, 200] {
            let p = pool(1, cap);
            let (tx, rx) = mpsc::channel();
            p.install(|| {
                for i in 0..50 {
                    let tx = tx.clone();
                    treepool::spawn_fifo(move || tx.send(i).unwrap());
                }
            });
            drop(tx);
            let order: Vec<i32> = rx.iter().collect();
            assert_eq!(order, (0..50).collect::<Vec<_>>(), "cap {cap}");
            // The method, from a job of the pool, keeps the order too.
            let (tx, rx) = mpsc::channel();
            let p = Arc::new(p);
            let q = p.clone();
            p.install(move || {
                for i in 0..50 {
                    let tx = tx.clone();
                    q.spawn_fifo(move || tx.send(i).unwrap());
                }
            });
            assert_eq!(rx.iter().collect::<Vec<i32>>(), (0..50).collect::<Vec<_>>());
            let [stats] = settle([&p]);
            assert_peak_bounds(&stats, cap);
        }
    });
}

#[test]
fn detached_fifo_spawns_from_outside_all_run() {
    watchdog(60, || {
        let p = pool(2, 1);
        let (tx, rx) = mpsc::channel();
        for i in 0..200 {
            let tx = tx.clone();
            p.spawn_fifo(move || tx.send(i).unwrap());
        }
        drop(tx);
        let mut got: Vec<i32> = rx.iter().collect();
        got.sort();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
        let [stats] = settle([&p]);
        assert_peak_bounds(&stats, 1);
    });
}

/// A pool whose workers are named `{prefix}{index}`.
fn named_pool(prefix: &'static str, threads: usize, cap: usize) -> treepool::ThreadPool {
    treepool::ThreadPoolBuilder::new()
        .num_threads(threads)
        .max_inflight(cap)
        .thread_name(move |i| format!("{prefix}{i}"))
        .build()
        .unwrap()
}

fn thread_name() -> String {
    thread::current().name().unwrap_or("").to_string()
}

/// Spawns from an in-place scope of the pool named `b-`: each records the name of the thread it
/// ran on; returns them once the scope has ended.
fn spawn_and_record<'a>(s: &treepool::Scope<'a>, names: &'a Mutex<Vec<String>>, n: usize) {
    for _ in 0..n {
        s.spawn(move |s| {
            names.lock().unwrap().push(thread_name());
            s.spawn(move |_| names.lock().unwrap().push(thread_name()));
        });
    }
}

#[test]
fn in_place_scope_runs_its_body_on_the_caller() {
    watchdog(60, || {
        for cap in [1, 3] {
            let b = named_pool("b-", 2, cap);
            // From a plain thread: the body runs here; its spawns on b's workers.
            let names = Mutex::new(vec![]);
            let caller = thread::current().id();
            b.in_place_scope(|s| {
                assert_eq!(thread::current().id(), caller);
                assert_eq!(treepool::current_thread_index(), None);
                spawn_and_record(s, &names, 20);
            });
            let names = names.into_inner().unwrap();
            assert_eq!(names.len(), 40);
            assert!(names.iter().all(|n| n.starts_with("b-")), "{names:?}");
            // From a worker of the same pool: inline, on that worker.
            b.install(|| {
                let me = thread::current().id();
                let index = treepool::current_thread_index();
                b.in_place_scope(|s| {
                    assert_eq!(thread::current().id(), me);
                    assert_eq!(treepool::current_thread_index(), index);
                    s.spawn(|_| assert!(thread_name().starts_with("b-")));
                });
                treepool::in_place_scope_fifo(|s| {
                    assert_eq!(thread::current().id(), me);
                    s.spawn_fifo(|_| assert!(thread_name().starts_with("b-")));
                });
            });
            // From a worker of another pool: on that worker; the spawns on b's workers.
            let a = named_pool("a-", 1, 1);
            let names = Mutex::new(vec![]);
            a.install(|| {
                let me = thread::current().id();
                assert!(thread_name().starts_with("a-"));
                b.in_place_scope(|s| {
                    assert_eq!(thread::current().id(), me);
                    spawn_and_record(s, &names, 20);
                });
                b.in_place_scope_fifo(|s| {
                    assert_eq!(thread::current().id(), me);
                    for _ in 0..20 {
                        let names = &names;
                        s.spawn_fifo(move |_| names.lock().unwrap().push(thread_name()));
                    }
                });
            });
            let names = names.into_inner().unwrap();
            assert_eq!(names.len(), 60);
            assert!(names.iter().all(|n| n.starts_with("b-")), "{names:?}");
            // The free function on a plain thread: the global pool, body here.
            let ran = AtomicUsize::new(0);
            treepool::in_place_scope(|s| {
                assert_eq!(thread::current().id(), caller);
                s.spawn(|_| {
                    assert!(treepool::current_thread_index().is_some());
                    ran.fetch_add(1, Relaxed);
                });
            });
            assert_eq!(ran.into_inner(), 1);
            for p in [&a, &b] {
                let [stats] = settle([p]);
                assert_peak_bounds_with_calls(&stats, p.max_inflight());
            }
            // The in-place scope opened from a's job ran on a credit of b's.
            assert!(b.stats().admitted_on_credit >= 2);
        }
    });
}

#[test]
fn spawns_borrow_the_callers_stack() {
    watchdog(60, || {
        let p = pool(2, 2);
        let mut squares = vec![0u64; 64];
        p.in_place_scope(|s| {
            for (i, sq) in squares.iter_mut().enumerate() {
                s.spawn(move |_| *sq = (i * i) as u64);
            }
        });
        assert!(squares
            .iter()
            .enumerate()
            .all(|(i, &v)| v == (i * i) as u64));
        let mut doubled = vec![0u64; 64];
        p.scope_fifo(|s| {
            for (i, d) in doubled.iter_mut().enumerate() {
                s.spawn_fifo(move |_| *d = 2 * i as u64);
            }
        });
        assert!(doubled.iter().enumerate().all(|(i, &v)| v == 2 * i as u64));
        let mut tripled = vec![0u64; 64];
        p.in_place_scope_fifo(|s| {
            for (i, t) in tripled.iter_mut().enumerate() {
                s.spawn_fifo(move |_| *t = 3 * i as u64);
            }
        });
        assert!(tripled.iter().enumerate().all(|(i, &v)| v == 3 * i as u64));
        let stats = p.stats();
        assert_peak_bounds(&stats, 2);
        assert_idle(&stats);
    });
}

/// The payload of a panic that `f` raises, which must be one.
fn panic_of(f: impl FnOnce()) -> Box<dyn std::any::Any + Send> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("the scope panicked")
}

#[derive(Debug, PartialEq)]
struct Payload(usize);

#[test]
fn panics_are_raised_after_every_job_finished() {
    watchdog(60, || {
        let p = pool(2, 1);
        // A fifo job's panic: the others all run; the original payload comes back.
        let done = AtomicUsize::new(0);
        let payload = panic_of(|| {
            p.scope_fifo(|s| {
                for i in 0..20 {
                    let done = &done;
                    s.spawn_fifo(move |_| {
                        if i == 7 {
                            std::panic::panic_any(Payload(7));
                        }
                        done.fetch_add(1, Relaxed);
                    });
                }
            })
        });
        assert_eq!(payload.downcast_ref::<Payload>(), Some(&Payload(7)));
        assert_eq!(done.load(Relaxed), 19);
        // The body's panic on a plain thread, after its spawns ran.
        let done = AtomicUsize::new(0);
        let payload = panic_of(|| {
            p.in_place_scope(|s| {
                for _ in 0..10 {
                    s.spawn(|_| {
                        done.fetch_add(1, Relaxed);
                    });
                }
                std::panic::panic_any(Payload(1));
            })
        });
        assert_eq!(payload.downcast_ref::<Payload>(), Some(&Payload(1)));
        assert_eq!(done.load(Relaxed), 10);
        // A spawned job's panic in an in-place fifo scope on a plain thread.
        let payload = panic_of(|| {
            p.in_place_scope_fifo(|s| {
                s.spawn_fifo(|s| s.spawn_fifo(|_| std::panic::panic_any(Payload(2))));
            })
        });
        assert_eq!(payload.downcast_ref::<Payload>(), Some(&Payload(2)));
        // A detached fifo job's panic goes to the handler and leaks nothing.
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let h = treepool::ThreadPoolBuilder::new()
            .num_threads(1)
            .max_inflight(1)
            .panic_handler(move |payload| {
                let ok = payload.downcast_ref::<Payload>() == Some(&Payload(3));
                tx.lock().unwrap().send(ok).unwrap();
            })
            .build()
            .unwrap();
        h.spawn_fifo(|| std::panic::panic_any(Payload(3)));
        assert!(rx.recv().unwrap());
        settle([&h]);
        let stats = p.stats();
        assert_peak_bounds(&stats, 1);
        assert_idle(&stats);
    });
}

/// A tree of `depth` levels, `width` children each, alternating fifo and lifo scopes and
/// spawns and in-place scopes; returns how many leaves ran.
fn mixed_tree(depth: u32, width: usize, leaves: &AtomicUsize) {
    if depth == 0 {
        leaves.fetch_add(1, Relaxed);
        return;
    }
    match depth % 3 {
        0 => treepool::scope_fifo(|s| {
            for _ in 0..width {
                s.spawn_fifo(|_| mixed_tree(depth - 1, width, leaves));
            }
        }),
        1 => treepool::scope(|s| {
            for _ in 0..width {
                s.spawn(|_| mixed_tree(depth - 1, width, leaves));
            }
        }),
        _ => treepool::in_place_scope_fifo(|s| {
            for _ in 0..width {
                s.spawn_fifo(|_| mixed_tree(depth - 1, width, leaves));
            }
        }),
    }
}

#[test]
fn max_inflight_one_on_one_thread_never_deadlocks() {
    watchdog(120, || {
        let p = pool(1, 1);
        // Trees nested every way, from a job of the pool.
        let leaves = AtomicUsize::new(0);
        p.install(|| mixed_tree(6, 3, &leaves));
        assert_eq!(leaves.load(Relaxed), 3usize.pow(6));
        // The same from the plain thread, whose in-place body waits for pool tokens.
        let leaves = AtomicUsize::new(0);
        p.in_place_scope_fifo(|s| {
            for _ in 0..3 {
                s.spawn_fifo(|_| mixed_tree(5, 3, &leaves));
            }
        });
        assert_eq!(leaves.load(Relaxed), 3 * 3usize.pow(5));
        // A detached fifo spawn fan-out inside a fifo scope inside a lifo scope.
        let (tx, rx) = mpsc::channel::<usize>();
        p.scope(|s| {
            s.spawn(|_| {
                treepool::scope_fifo(|s| {
                    for i in 0..10 {
                        let tx = tx.clone();
                        s.spawn_fifo(move |_| treepool::spawn_fifo(move || tx.send(i).unwrap()));
                    }
                })
            });
        });
        drop(tx);
        assert_eq!(rx.iter().count(), 10);
        let [stats] = settle([&p]);
        assert_peak_bounds(&stats, 1);
    });
}

#[test]
fn in_place_scopes_across_pools_at_one_token() {
    watchdog(120, || {
        let a = pool(1, 1);
        let b = pool(1, 1);
        let leaves = AtomicUsize::new(0);
        // A job of a (holding a's only token) opens an in-place scope of b, whose jobs open
        // in-place scopes of a again: nobody waits for a token of a pool while holding one of
        // another.
        a.install(|| {
            b.in_place_scope_fifo(|s| {
                for _ in 0..4 {
                    s.spawn_fifo(|_| {
                        a.in_place_scope(|s| {
                            for _ in 0..4 {
                                s.spawn(|_| {
                                    leaves.fetch_add(1, Relaxed);
                                });
                            }
                        });
                    });
                }
            });
        });
        assert_eq!(leaves.load(Relaxed), 16);
        for p in [&a, &b] {
            let [stats] = settle([p]);
            assert_peak_bounds_with_calls(&stats, 1);
            // Every in-place scope opened from the other pool's job took a credit.
            assert!(stats.admitted_on_credit >= 1, "{stats:?}");
        }
    });
}

#[test]
fn threads_started_in_an_in_place_body_spawn_without_waiting() {
    watchdog(60, || {
        let p = pool(2, 1);
        let (ran, spawned) = (AtomicUsize::new(0), AtomicUsize::new(0));
        p.in_place_scope(|s| {
            // One job holds the only token until every helper thread has spawned: their spawns
            // cannot wait for it (they are left to the owner, this thread, which parks).
            spawn_from_threads(s, 1, (4, 25), &ran, &spawned);
        });
        assert_eq!(ran.load(Relaxed), 100);
        let stats = p.stats();
        assert_peak_bounds(&stats, 1);
        assert_idle(&stats);
    });
}

#[test]
fn wide_fifo_fan_out_keeps_the_bounds() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 3), (4, 2)] {
            let p = pool(threads, cap);
            let count = AtomicUsize::new(0);
            p.scope_fifo(|s| {
                for _ in 0..2000 {
                    s.spawn_fifo(|s| {
                        for _ in 0..5 {
                            s.spawn_fifo(|_| {
                                count.fetch_add(1, Relaxed);
                            });
                        }
                    });
                }
            });
            assert_eq!(count.load(Relaxed), 10_000);
            let stats = p.stats();
            assert_peak_bounds(&stats, cap);
            // Backpressure: the fan-out never had more than cap x levels in flight.
            assert!(stats.peak_inflight <= cap * 3, "{stats:?}");
            assert!(stats.admission_waits > 0, "{stats:?}");
            assert_idle(&stats);
        }
    });
}

#[test]
fn spawns_left_to_an_in_place_owner_on_another_pools_worker() {
    watchdog(60, || {
        let a = pool(1, 1);
        let b = pool(2, 1);
        let (ran, spawned) = (AtomicUsize::new(0), AtomicUsize::new(0));
        a.install(|| {
            b.in_place_scope(|s| {
                // Two jobs hold the credit root's loan and b's only pool token until the helper
                // threads are done, so every helper spawn is left to the owner (this worker of
                // a), which admits them as children of its credit root at the scope's end.
                spawn_from_threads(s, 2, (3, 20), &ran, &spawned);
            });
        });
        assert_eq!(ran.load(Relaxed), 60);
        // The 60 left to the owner were admitted as children of its credit root (on its loan,
        // or a pool token); each one after the other.
        let stats = b.stats();
        assert_eq!(stats.admitted_on_credit, 1, "{stats:?}");
        assert_eq!(
            stats.admitted_on_loan + stats.admitted_from_pool,
            62,
            "{stats:?}"
        );
        for p in [&a, &b] {
            let [stats] = settle([p]);
            assert_peak_bounds_with_calls(&stats, 1);
        }
    });
}

/// Spawns `holders` jobs into `s` that hold their tokens until `threads` plain threads, started
/// here, have each spawned `per_thread` jobs into `s` (each adds 1 to `ran`); `spawned` counts
/// the threads done.
fn spawn_from_threads<'s>(
    s: &treepool::Scope<'s>,
    holders: usize,
    (threads, per_thread): (usize, usize),
    ran: &'s AtomicUsize,
    spawned: &'s AtomicUsize,
) {
    for _ in 0..holders {
        s.spawn(move |_| common::spin_until(|| spawned.load(Acquire) == threads));
    }
    thread::scope(|t| {
        for _ in 0..threads {
            t.spawn(|| {
                for _ in 0..per_thread {
                    s.spawn(move |_| {
                        ran.fetch_add(1, Relaxed);
                    });
                }
                spawned.fetch_add(1, Release);
            });
        }
    });
}

#[test]
fn scope_fifo_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<treepool::ScopeFifo<'static>>();
    check::<treepool::Scope<'static>>();
}
