//! The ordered stream's window and its panics: a window far larger than the source, the window
//! and run-once under stress and at `max_inflight(1)`, a source panic with items in flight, items
//! whose drop panics when they are dropped unrun, a panic while the consumer ends after an error,
//! forgotten streams and zero-sized items. Each test runs under a watchdog (a hang fails it) or
//! in a child process (an abort fails it).

use crate::common;
use crate::common::{assert_peak_bounds, describe, pool, settle, watchdog};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// `.window(n)` is documented as a bound ("the most items pulled and not yet handed back"), so a
/// caller that wants no bound passes a huge one. The stream allocates `n` slots at the first
/// `next`, whatever the source's length: `usize::MAX` panics ("capacity overflow") and 2^40
/// aborts the process (allocation failure), for a three-item source.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn a_huge_window_on_a_short_source() {
    const WINDOW_ENV: &str = "TREEPOOL_TEST_WINDOW";
    if let Ok(window) = std::env::var(WINDOW_ENV) {
        let window: usize = window.parse().unwrap();
        let p = pool(2, 2);
        let out: Vec<u32> = p.scope(|s| s.map_ordered(0..3u32, |i| i).window(window).collect());
        assert_eq!(out, [0, 1, 2]);
        return;
    }
    let mut failures = Vec::new();
    for window in [usize::MAX, 1usize << 40, 1usize << 28] {
        let name = common::test_name!();
        if let Err(report) = common::child_outcome(&name, WINDOW_ENV, &window.to_string(), 60) {
            failures.push(format!("window {window}: {}", common::tail(&report, 1500)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n======\n"));
}

/// An item that counts its runs and its drops, and may panic on drop.
struct Item {
    i: usize,
    drops: Arc<AtomicUsize>,
    bomb: bool,
}

impl Drop for Item {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.bomb {
            panic!("item {} drop bomb", self.i);
        }
    }
}

/// Found by review 19's attacks on the ordered stream.
#[test]
fn window_and_run_once_under_stress() {
    watchdog(240, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 3), (4, 1), (4, 4)] {
            for window in [1, 2, 3, 7, 64] {
                let p = pool(threads, cap);
                let n = 300usize;
                let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                let out_of_window = AtomicUsize::new(0);
                let pulled = AtomicUsize::new(0);
                let handed = AtomicUsize::new(0);
                let got: Vec<usize> = p.scope(|s| {
                    let src = (0..n).inspect(|_| {
                        let now = pulled.fetch_add(1, SeqCst) + 1;
                        if now - handed.load(SeqCst) > window {
                            out_of_window.fetch_add(1, SeqCst);
                        }
                    });
                    s.map_ordered(src, |i| {
                        runs[i].fetch_add(1, SeqCst);
                        if i % 7 == 0 {
                            treepool::join(|| common::Rng::new(i as u64).next(), || ());
                        }
                        i
                    })
                    .window(window)
                    .inspect(|_| {
                        handed.fetch_add(1, SeqCst);
                    })
                    .collect()
                });
                assert_eq!(got, (0..n).collect::<Vec<_>>());
                assert_eq!(out_of_window.load(SeqCst), 0, "window {window} exceeded");
                for (i, r) in runs.iter().enumerate() {
                    assert_eq!(r.load(SeqCst), 1, "item {i} ran {} times", r.load(SeqCst));
                }
                assert_peak_bounds(&settle([&p])[0], cap);
            }
        }
    });
}

/// The source panics mid-stream while items are in flight; the caller catches the panic (drops
/// the stream) and the pool must be idle, every pulled item dropped exactly once, none run
/// after.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn a_source_panic_mid_stream_with_items_in_flight() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (4, 2)] {
            for place in 0..3 {
                let p = pool(threads, cap);
                let drops = Arc::new(AtomicUsize::new(0));
                let made = AtomicUsize::new(0);
                let d2 = drops.clone();
                let made2 = &made;
                let body = |s: &treepool::Scope<'_>| {
                    let src = (0..100usize).map(move |i| {
                        if i == 13 {
                            panic!("source boom at 13");
                        }
                        made2.fetch_add(1, SeqCst);
                        Item {
                            i,
                            drops: d2.clone(),
                            bomb: false,
                        }
                    });
                    let mut it = s
                        .map_ordered(src, |item: Item| {
                            thread::sleep(Duration::from_micros(200));
                            item.i
                        })
                        .window(5);
                    let mut seen = Vec::new();
                    for v in it.by_ref() {
                        seen.push(v);
                    }
                    seen
                };
                let caught = catch_unwind(AssertUnwindSafe(|| match place {
                    0 => p.scope(body),
                    1 => p.in_place_scope(body),
                    _ => pool(1, 1).install(|| p.in_place_scope(body)),
                }));
                let msg = describe(caught.expect_err("the source panic is raised"));
                assert!(msg.contains("source boom"), "{msg}");
                settle([&p]);
                assert_eq!(
                    drops.load(SeqCst),
                    made.load(SeqCst),
                    "every item dropped once"
                );
            }
        }
    });
}

/// Items whose `Drop` panics, dropped unrun by an early drop of the stream, and by an error.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn item_drops_that_panic_when_dropped_unrun() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 4), (4, 2)] {
            let p = pool(threads, cap);
            let drops = Arc::new(AtomicUsize::new(0));
            let made = Arc::new(AtomicUsize::new(0));
            let (d2, m2) = (drops.clone(), made.clone());
            let got = catch_unwind(AssertUnwindSafe(|| {
                p.scope(|s| {
                    let src = (0..50usize).map(move |i| {
                        m2.fetch_add(1, SeqCst);
                        Item {
                            i,
                            drops: d2.clone(),
                            bomb: i >= 3,
                        }
                    });
                    let mut it = s
                        .try_map_ordered(src, |mut item: Item| {
                            let i = item.i;
                            item.bomb = false; // no bomb for the ones that run
                            if i == 2 {
                                Err(i)
                            } else {
                                Ok(i)
                            }
                        })
                        .window(10);
                    let a = it.next();
                    let b = it.next();
                    let c = it.next();
                    let d = it.next();
                    (a, b, c, d)
                })
            }));
            match got {
                Ok(v) => assert_eq!(v, (Some(Ok(0)), Some(Ok(1)), Some(Err(2)), None)),
                Err(payload) => panic!(
                    "threads {threads} cap {cap}: an item's panicking drop escaped: {}",
                    describe(payload)
                ),
            }
            settle([&p]);
        }
    });
}

/// f panics on one item while the consumer waits in `end()` for the running ones after an
/// error; the panic must win, with its payload.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn a_panic_while_the_consumer_is_in_end_after_an_error() {
    watchdog(120, || {
        for (threads, cap) in [(2, 2), (3, 3), (4, 4)] {
            for _ in 0..20 {
                let p = pool(threads, cap);
                let started_5 = AtomicBool::new(false);
                let caught = catch_unwind(AssertUnwindSafe(|| {
                    p.scope(|s| {
                        s.try_map_ordered(0..8u32, |i| {
                            match i {
                                0 => {
                                    // Fail only once item 1 runs (elsewhere).
                                    let deadline = Instant::now() + Duration::from_millis(200);
                                    while !started_5.load(SeqCst) && Instant::now() < deadline {
                                        thread::yield_now();
                                    }
                                    Err("err 0")
                                }
                                1 => {
                                    started_5.store(true, SeqCst);
                                    thread::sleep(Duration::from_millis(30));
                                    panic!("panic 1")
                                }
                                _ => Ok(i),
                            }
                        })
                        .window(4)
                        .collect::<Vec<_>>()
                    })
                }));
                match caught {
                    Err(payload) => assert_eq!(describe(payload), "panic 1"),
                    Ok(v) => {
                        // Item 1 did not start before item 0 failed: then the error alone.
                        assert_eq!(v, vec![Err("err 0")]);
                        assert!(!started_5.load(SeqCst), "item 1 ran but its panic was lost");
                    }
                }
                settle([&p]);
            }
        }
    });
}

/// Found by review 19's attacks on the ordered stream.
#[test]
fn forgotten_streams_and_zero_sized_items() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (4, 3)] {
            let p = pool(threads, cap);
            let ran = AtomicUsize::new(0);
            p.scope(|s| {
                for k in 0..5 {
                    let mut it = s
                        .map_ordered(std::iter::repeat(()).take(100), |()| {
                            ran.fetch_add(1, SeqCst);
                        })
                        .window(7);
                    for _ in 0..k {
                        assert_eq!(it.next(), Some(()));
                    }
                    std::mem::forget(it);
                }
            });
            p.in_place_scope(|s| {
                let mut it = s.map_ordered(0..100u32, |_| ()).window(5);
                it.next();
                std::mem::forget(it);
            });
            settle([&p]);
            let zst: usize = p.scope(|s| {
                s.map_ordered(std::iter::repeat(()).take(10_000), |()| ())
                    .count()
            });
            assert_eq!(zst, 10_000);
            assert_peak_bounds(&settle([&p])[0], cap);
        }
    });
}

/// max_inflight(1) with 1..4 threads, consumer in every place, items that join and spawn.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn max_inflight_one_everywhere() {
    watchdog(240, || {
        for threads in 1..=4 {
            let p = pool(threads, 1);
            for place in 0..4 {
                let body = |s: &treepool::Scope<'_>| -> u64 {
                    s.map_ordered(0..80u64, |i| {
                        let (a, b) = treepool::join(|| i, || i);
                        treepool::scope(|s2| {
                            s2.spawn(|_| {
                                std::hint::black_box(0);
                            })
                        });
                        a + b
                    })
                    .window(1 + (i_place(place) % 3))
                    .sum()
                };
                let sum = match place {
                    0 => p.scope(body),
                    1 => p.in_place_scope(body),
                    2 => pool(2, 1).install(|| p.in_place_scope(body)),
                    _ => p.install(|| treepool::in_place_scope(body)),
                };
                assert_eq!(sum, (0..80u64).map(|i| 2 * i).sum::<u64>());
            }
            settle([&p]);
        }
    });
}

fn i_place(p: usize) -> usize {
    p
}
