//! Consumers on plain threads (no worker of any pool): their carriers wait for pool tokens and never
//! take credits past `max_inflight`; in in-place scopes, with panics and early drops, zipping
//! streams, at one thread and one token, with nested items, and zipped with a foreign owner's
//! stream. Each test runs under a watchdog.

use crate::common::{pool, settle, spin_us, watchdog};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Plain threads started in an in-place scope opened on a plain thread consume streams: the
/// pool's bounds hold (they took a credit each before).
///
/// Found by the final review of 6be5505 (plain-thread consumers' carriers, aside sleep, try_scope
/// marks, consumers that change kind).
#[test]
fn plain_thread_consumers_in_place_scope() {
    const CONSUMERS: usize = 6;
    let p = Arc::new(pool(2, 1));
    let p2 = p.clone();
    let sums = watchdog(60, move || {
        p2.in_place_scope(|s| {
            thread::scope(|t| {
                let handles: Vec<_> = (0..CONSUMERS)
                    .map(|_| {
                        t.spawn(|| {
                            s.map_ordered(0..20u64, |i| {
                                thread::sleep(Duration::from_millis(2));
                                i
                            })
                            .sum::<u64>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            })
        })
    });
    assert_eq!(sums, vec![190; CONSUMERS]);
    let [stats] = settle([&p]);
    assert_eq!(stats.calls_in, 0);
    assert!(
        stats.peak_executing <= 1,
        "B1: peak_executing {} with max_inflight 1: {stats:?}",
        stats.peak_executing
    );
}

/// Panics in `f` and early drops while plain-thread consumers' carriers wait for tokens and run:
/// every token is given back, no credit is taken.
///
/// Found by the final review of 6be5505 (plain-thread consumers' carriers, aside sleep, try_scope
/// marks, consumers that change kind).
#[test]
fn plain_thread_consumers_panics_and_early_drops_leave_nothing() {
    let p = Arc::new(pool(2, 1));
    let p2 = p.clone();
    watchdog(60, move || {
        for round in 0..30u64 {
            p2.in_place_scope(|s| {
                thread::scope(|t| {
                    for c in 0..4u64 {
                        t.spawn(move || {
                            let r = catch_unwind(AssertUnwindSafe(|| {
                                let mut it = s.map_ordered(0..30u64, move |i| {
                                    if (i + c + round) % 7 == 3 && c % 2 == 0 {
                                        panic!("item {i}");
                                    }
                                    thread::sleep(Duration::from_micros(300));
                                    i
                                });
                                let mut n = 0;
                                for x in it.by_ref() {
                                    n += x;
                                    if c == 3 && x == 5 {
                                        break;
                                    }
                                }
                                drop(it);
                                n
                            }));
                            let _ = r;
                        });
                    }
                });
            });
        }
    });
    let [stats] = settle([&p]);
    assert_eq!(stats.calls_in, 0, "credit leaked: {stats:?}");
}

/// One plain thread (started in an in-place body) zips many streams: each stream's fallback
/// carrier waits for a pool token (before, each took a credit: 8 over a cap of 1).
///
/// Found by the final review of 6be5505 (plain-thread consumers' carriers, aside sleep, try_scope
/// marks, consumers that change kind).
#[test]
fn one_plain_thread_zipping_streams_keeps_max_inflight() {
    const STREAMS: usize = 8;
    let p = Arc::new(pool(2, 1));
    let p2 = p.clone();
    let total = watchdog(60, move || {
        p2.in_place_scope(|s| {
            thread::scope(|t| {
                t.spawn(|| {
                    let mut its: Vec<_> = (0..STREAMS)
                        .map(|_| {
                            s.map_ordered(0..10u64, |i| {
                                thread::sleep(Duration::from_millis(2));
                                i
                            })
                        })
                        .collect();
                    let mut total = 0;
                    for _ in 0..10 {
                        for it in its.iter_mut() {
                            total += it.next().unwrap();
                        }
                    }
                    total
                })
                .join()
                .unwrap()
            })
        })
    });
    assert_eq!(total, 45 * STREAMS as u64);
    let [stats] = settle([&p]);
    assert!(
        stats.peak_calls_in == 0 && stats.peak_inflight <= 1,
        "one consumer thread, {STREAMS} streams: peak_calls_in {} peak_inflight {} (cap 1, \
         levels {}): {stats:?}",
        stats.peak_calls_in,
        stats.peak_inflight,
        stats.peak_depth
    );
}

/// Many plain-thread consumers at max_inflight(1) on one thread, in an in-place scope of a plain
/// thread, with source panics, item panics and early drops while others park in admission.
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn plain_consumers_one_thread_cap_one_source_panics_and_drops() {
    for threads in [1usize, 2] {
        let p = Arc::new(pool(threads, 1));
        let p2 = p.clone();
        watchdog(120, move || {
            for round in 0..40u64 {
                p2.in_place_scope(|s| {
                    thread::scope(|t| {
                        for c in 0..6u64 {
                            t.spawn(move || {
                                let _ = catch_unwind(AssertUnwindSafe(|| {
                                    let src = (0..25u64).inspect(move |&i| {
                                        if c == 1 && i == 7 + round % 5 {
                                            panic!("source {i}");
                                        }
                                    });
                                    let mut it = s
                                        .map_ordered(src, move |i| {
                                            if c == 2 && i == 3 + round % 4 {
                                                panic!("item {i}");
                                            }
                                            spin_us(50 + (i * 13) % 150);
                                            i
                                        })
                                        .window(1 + (c as usize % 3));
                                    let mut n = 0;
                                    for x in it.by_ref() {
                                        n += x;
                                        if c == 3 && x == round % 10 {
                                            break;
                                        }
                                    }
                                    n
                                }));
                            });
                        }
                    });
                });
            }
        });
        let [stats] = settle([&p]);
        assert_eq!(stats.calls_in, 0, "{stats:?}");
        assert_eq!(stats.peak_calls_in, 0, "{stats:?}");
        assert!(stats.peak_executing <= 1, "{stats:?}");
        assert!(stats.peak_inflight <= stats.peak_depth.max(1), "{stats:?}");
    }
}

/// Plain consumers whose items nest: join, spawn into the scope, and a nested stream consumed
/// inline by the carrier; cap 1, 1 and 2 threads.
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn plain_consumers_nested_items() {
    for threads in [1usize, 2] {
        let p = Arc::new(pool(threads, 1));
        let p2 = p.clone();
        let ran = Arc::new(AtomicUsize::new(0));
        let ran2 = ran.clone();
        watchdog(120, move || {
            for _ in 0..20 {
                p2.in_place_scope(|s| {
                    thread::scope(|t| {
                        for c in 0..4u64 {
                            let ran = &ran2;
                            t.spawn(move || {
                                let v: u64 = s
                                    .map_ordered(0..12u64, move |i| {
                                        let (a, b) = treepool::join(|| i, || i);
                                        let inner: u64 = treepool::scope(|s2| {
                                            s2.spawn(move |_| {
                                                ran.fetch_add(1, SeqCst);
                                            });
                                            s2.map_ordered(0..3u64, |j| j + c).sum()
                                        });
                                        assert_eq!(inner, 3 + 3 * c);
                                        a + b
                                    })
                                    .window(2)
                                    .sum();
                                assert_eq!(v, 132);
                            });
                        }
                    });
                });
            }
        });
        assert_eq!(ran.load(SeqCst), 20 * 4 * 12);
        let [stats] = settle([&p]);
        assert_eq!(stats.peak_calls_in, 0, "{stats:?}");
        assert!(stats.peak_executing <= 1, "{stats:?}");
    }
}

/// Another pool's worker owns an in-place scope of Y (credit root) and zips many streams while a
/// plain thread started in the body zips others: owner carriers wait on the credit root one at a
/// time, the plain thread's park for Y tokens; Y back to zero, no credit left.
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn foreign_owner_and_plain_thread_zip_streams() {
    let y = Arc::new(pool(2, 1));
    let x = Arc::new(pool(1, 1));
    let (y2, x2) = (y.clone(), x.clone());
    watchdog(120, move || {
        for _ in 0..10 {
            let total: u64 = x2.install(|| {
                y2.in_place_scope(|s| {
                    let zip = |n: usize| {
                        let mut its: Vec<_> = (0..n)
                            .map(|_| {
                                s.map_ordered(0..10u64, |i| {
                                    spin_us(100);
                                    i
                                })
                                .window(1)
                            })
                            .collect();
                        let mut total = 0;
                        for _ in 0..10 {
                            for it in its.iter_mut() {
                                total += it.next().unwrap();
                            }
                        }
                        total
                    };
                    thread::scope(|t| {
                        let h = t.spawn(|| zip(5));
                        let mine = zip(5);
                        mine + h.join().unwrap()
                    })
                })
            });
            assert_eq!(total, 450);
        }
    });
    let [stats] = settle([&y]);
    assert_eq!(stats.calls_in, 0, "{stats:?}");
    settle([&x]);
}
