//! The ordered streaming map (`Scope::map_ordered`, `Scope::try_map_ordered`): results in input
//! order, the window never exceeded, errors and panics, early drop, and the consumer's wait, from
//! a plain thread, from inside a job and from another pool's worker, each under a watchdog and
//! with `Stats` back to zero.

use crate::common;
use crate::common::{assert_peak_bounds, describe, pool, settle, watchdog, Rng};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use treepool::{Scope, ThreadPool};

/// (threads, max_inflight) of the pools the tests run on.
const CONFIGS: [(usize, usize); 4] = [(1, 1), (2, 1), (2, 4), (4, 2)];

/// Where the consumer runs.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// The test's thread, through an in-place scope.
    Plain,
    /// A scope body on one of the pool's workers (inside a job).
    Job,
    /// A worker of another pool, through an in-place scope.
    OtherPool,
}

const PLACES: [Place; 3] = [Place::Plain, Place::Job, Place::OtherPool];

/// Runs `consume` with a scope of `pool`, the consumer placed at `place`.
fn consume_at<'s, R: Send>(
    pool: &ThreadPool,
    place: Place,
    consume: impl FnOnce(&Scope<'s>) -> R + Send,
) -> R {
    match place {
        Place::Plain => pool.in_place_scope(consume),
        Place::Job => pool.scope(consume),
        Place::OtherPool => {
            let other = common::pool(1, 1);
            other.install(|| pool.in_place_scope(consume))
        }
    }
}

/// Burns about `units` × 1 µs of CPU.
fn work(units: u64) -> u64 {
    let mut x = units;
    for _ in 0..units * 200 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}

/// After a test: the pool is idle again, and it kept its bounds (no other pool called in when
/// `checked`).
fn assert_clean(pool: &ThreadPool, cap: usize, checked: bool) {
    let [stats] = settle([pool]);
    if checked {
        assert_peak_bounds(&stats, cap);
    }
}

#[test]
fn results_come_in_input_order_under_random_delays() {
    watchdog(120, || {
        for (threads, cap) in CONFIGS {
            for place in PLACES {
                let pool = pool(threads, cap);
                let out: Vec<(usize, u64)> = consume_at(&pool, place, |s| {
                    s.map_ordered(0..300usize, |i| {
                        let mut rng = Rng::new(i as u64);
                        let units = if rng.range(0, 9) == 0 {
                            rng.range(50, 300)
                        } else {
                            1
                        };
                        // Items that split their work further.
                        let (a, b) = treepool::join(|| work(units), || i);
                        (b, a)
                    })
                    .collect()
                });
                let order: Vec<usize> = out.iter().map(|&(i, _)| i).collect();
                assert_eq!(
                    order,
                    (0..300).collect::<Vec<_>>(),
                    "{threads}/{cap} {place:?}"
                );
                assert_clean(&pool, cap, !matches!(place, Place::OtherPool));
            }
        }
    });
}

/// A source that counts the items pulled and not yet handed back (the consumer counts them out).
struct Counted {
    next: usize,
    end: usize,
    live: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Iterator for Counted {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.next == self.end {
            return None;
        }
        let live = self.live.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(live, SeqCst);
        self.next += 1;
        Some(self.next - 1)
    }
}

fn counted(end: usize) -> (Counted, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let live = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let source = Counted {
        next: 0,
        end,
        live: live.clone(),
        peak: peak.clone(),
    };
    (source, live, peak)
}

#[test]
fn the_window_holds_under_a_slow_consumer_and_one_slow_item() {
    watchdog(120, || {
        for (threads, cap) in CONFIGS {
            for place in PLACES {
                for window in [1, 3, 8] {
                    let pool = pool(threads, cap);
                    let (source, live, peak) = counted(60);
                    let sum: usize = consume_at(&pool, place, |s| {
                        let mut sum = 0;
                        let items = s
                            .map_ordered(source, |i| {
                                // Item 7 is very slow, the others fast.
                                work(if i == 7 { 20_000 } else { 2 });
                                i
                            })
                            .window(window);
                        for (n, i) in items.enumerate() {
                            assert_eq!(n, i);
                            live.fetch_sub(1, SeqCst);
                            if i % 10 == 0 {
                                work(2_000); // a slow consumer now and then
                            }
                            sum += i;
                        }
                        sum
                    });
                    assert_eq!(sum, (0..60).sum::<usize>());
                    let peak = peak.load(SeqCst);
                    assert!(
                        peak <= window,
                        "peak {peak} > window {window} ({threads}/{cap} {place:?})"
                    );
                    assert_clean(&pool, cap, !matches!(place, Place::OtherPool));
                }
            }
        }
    });
}

/// Runs a fallible stream of `n` items where item `bad` fails; returns what it handed back and
/// the highest index whose function ran.
fn fail_at(
    pool: &ThreadPool,
    place: Place,
    n: usize,
    bad: usize,
    window: usize,
) -> (Vec<Result<usize, String>>, usize) {
    let highest = AtomicUsize::new(0);
    let out = consume_at(pool, place, |s| {
        s.try_map_ordered(0..n, |i| {
            highest.fetch_max(i, SeqCst);
            work(3);
            if i == bad {
                Err(format!("item {i}"))
            } else {
                Ok(i)
            }
        })
        .window(window)
        .collect()
    });
    (out, highest.load(SeqCst))
}

#[test]
fn the_first_error_ends_the_stream_at_every_position() {
    watchdog(120, || {
        for (threads, cap) in CONFIGS {
            for place in PLACES {
                let pool = pool(threads, cap);
                for bad in [0, 1, 25, 49] {
                    let (out, highest) = fail_at(&pool, place, 50, bad, 4);
                    let mut expected: Vec<Result<usize, String>> = (0..bad).map(Ok).collect();
                    expected.push(Err(format!("item {bad}")));
                    assert_eq!(out, expected, "{threads}/{cap} {place:?} bad {bad}");
                    // Nothing is pulled past the window of the failing item.
                    assert!(
                        highest < bad + 4,
                        "ran item {highest} after a failure at {bad}"
                    );
                }
                assert_clean(&pool, cap, !matches!(place, Place::OtherPool));
            }
        }
    });
}

#[test]
fn an_error_while_the_source_blocks_stops_the_pulls() {
    watchdog(60, || {
        let pool = pool(2, 2);
        let (tx, rx) = mpsc::sync_channel::<usize>(0);
        let feeder = thread::spawn(move || {
            for i in 0..1_000 {
                if tx.send(i).is_err() {
                    return i; // the stream dropped its receiver
                }
            }
            1_000
        });
        let out: Vec<Result<usize, usize>> = pool.in_place_scope(|s| {
            s.try_map_ordered(rx, |i| if i == 2 { Err(i) } else { Ok(i) })
                .window(3)
                .collect()
        });
        assert_eq!(out, [Ok(0), Ok(1), Err(2)]);
        let sent = feeder.join().unwrap();
        assert!(
            sent <= 2 + 3 + 1,
            "the source was pulled {sent} times after the failure at 2"
        );
        assert_clean(&pool, 2, true);
    });
}

#[test]
fn an_error_while_the_consumer_is_slow() {
    watchdog(60, || {
        for place in PLACES {
            let pool = pool(2, 2);
            let ran = AtomicUsize::new(0);
            let got = consume_at(&pool, place, |s| {
                let mut got = Vec::new();
                for r in s
                    .try_map_ordered(0..500usize, |i| {
                        ran.fetch_add(1, SeqCst);
                        if i == 10 {
                            Err(i)
                        } else {
                            Ok(i)
                        }
                    })
                    .window(5)
                {
                    work(500);
                    got.push(r);
                }
                got
            });
            assert_eq!(got.len(), 11);
            assert_eq!(got[10], Err(10));
            assert!(ran.load(SeqCst) <= 10 + 5, "{} items ran", ran.load(SeqCst));
            assert_clean(&pool, 2, !matches!(place, Place::OtherPool));
        }
    });
}

#[derive(Debug)]
struct ItemPanic(usize);

#[test]
fn a_panic_is_raised_in_order_with_its_payload_and_beats_an_error() {
    watchdog(60, || {
        for place in PLACES {
            let pool = pool(2, 2);
            // Item 4 panics while item 3, which fails, waits for it to start.
            let started_4 = AtomicBool::new(false);
            let handed = Mutex::new(Vec::new());
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                consume_at(&pool, place, |s| {
                    for r in s
                        .try_map_ordered(0..10usize, |i| match i {
                            3 => {
                                common::spin_until(|| started_4.load(SeqCst));
                                Err(3)
                            }
                            4 => {
                                started_4.store(true, SeqCst);
                                std::panic::panic_any(ItemPanic(4))
                            }
                            _ => Ok(i),
                        })
                        .window(8)
                    {
                        handed.lock().unwrap().push(r);
                    }
                })
            }));
            let payload = caught.expect_err("the panic of item 4");
            assert_eq!(
                payload.downcast_ref::<ItemPanic>().map(|p| p.0),
                Some(4),
                "{place:?}"
            );
            assert_eq!(*handed.lock().unwrap(), [Ok(0), Ok(1), Ok(2)]);
            assert_clean(&pool, 2, !matches!(place, Place::OtherPool));
        }
    });
}

#[test]
fn a_panic_of_the_function_or_the_source_keeps_its_payload() {
    watchdog(60, || {
        for (threads, cap) in CONFIGS {
            for place in PLACES {
                let pool = pool(threads, cap);
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    consume_at(&pool, place, |s| {
                        s.map_ordered(0..20usize, |i| {
                            if i == 6 {
                                std::panic::panic_any(ItemPanic(i));
                            }
                            i
                        })
                        .count()
                    })
                }));
                let payload = caught.expect_err("item 6 panics");
                assert_eq!(payload.downcast_ref::<ItemPanic>().map(|p| p.0), Some(6));
                let source = (0..20usize).inspect(|&i| {
                    if i == 9 {
                        std::panic::panic_any(ItemPanic(100 + i));
                    }
                });
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    consume_at(&pool, place, |s| s.map_ordered(source, |i| i).count())
                }));
                let payload = caught.expect_err("the source panics at 9");
                assert_eq!(payload.downcast_ref::<ItemPanic>().map(|p| p.0), Some(109));
                assert_clean(&pool, cap, !matches!(place, Place::OtherPool));
            }
        }
    });
}

/// An item that counts its drops.
struct Item(usize, Arc<AtomicUsize>);

impl Drop for Item {
    fn drop(&mut self) {
        self.1.fetch_add(1, SeqCst);
    }
}

#[test]
fn an_early_drop_stops_pulling_drops_unstarted_items_and_waits_for_running_ones() {
    watchdog(60, || {
        for (threads, cap) in CONFIGS {
            for place in PLACES {
                let pool = pool(threads, cap);
                let drops = Arc::new(AtomicUsize::new(0));
                let pulled = AtomicUsize::new(0);
                let (started, finished) = (AtomicUsize::new(0), AtomicUsize::new(0));
                let source = (0..1_000usize).map(|i| {
                    pulled.fetch_add(1, SeqCst);
                    Item(i, drops.clone())
                });
                let first: Vec<usize> = consume_at(&pool, place, |s| {
                    let mut stream = s
                        .map_ordered(source, |item| {
                            started.fetch_add(1, SeqCst);
                            work(100);
                            finished.fetch_add(1, SeqCst);
                            item.0
                        })
                        .window(6);
                    let first = stream.by_ref().take(3).collect();
                    drop(stream);
                    // Dropped: every started item has finished, every pulled item was dropped.
                    assert_eq!(started.load(SeqCst), finished.load(SeqCst));
                    assert_eq!(drops.load(SeqCst), pulled.load(SeqCst));
                    first
                });
                assert_eq!(first, [0, 1, 2]);
                assert!(
                    pulled.load(SeqCst) <= 3 + 6,
                    "pulled {}",
                    pulled.load(SeqCst)
                );
                assert!(started.load(SeqCst) < pulled.load(SeqCst) || pulled.load(SeqCst) <= 3 + 6);
                assert_clean(&pool, cap, !matches!(place, Place::OtherPool));
            }
        }
    });
}

#[test]
fn one_token_on_one_thread_with_items_that_join_and_spawn() {
    watchdog(60, || {
        for place in PLACES {
            let pool = pool(1, 1);
            let out: Vec<usize> = consume_at(&pool, place, |s| {
                s.map_ordered(0..100usize, |i| {
                    let count = AtomicUsize::new(0);
                    treepool::scope(|inner| {
                        for _ in 0..3 {
                            inner.spawn(|_| {
                                let (a, b) = treepool::join(|| 1, || 1);
                                count.fetch_add(a + b, SeqCst);
                            });
                        }
                    });
                    i + count.into_inner()
                })
                .window(4)
                .collect()
            });
            assert_eq!(out, (0..100).map(|i| i + 6).collect::<Vec<_>>());
            assert_clean(&pool, 1, !matches!(place, Place::OtherPool));
        }
    });
}

/// A consumer on a worker waits for its results without running other jobs: a long job spawned
/// into the same scope once the stream has started (so it is the newest job of the consumer's
/// own deque, the first a helping wait would pop) never starts on the consumer's thread while
/// the stream runs.
#[test]
fn a_waiting_consumer_on_a_worker_runs_no_unrelated_job() {
    watchdog(60, || {
        for cap in [1, 2, 4, 1, 2, 4] {
            let pool = pool(2, cap);
            let streaming = AtomicBool::new(true);
            let buried = AtomicBool::new(false);
            pool.scope(|s| {
                let consumer = thread::current().id();
                let (streaming, buried) = (&streaming, &buried);
                let mut stream = s
                    .map_ordered(0..200usize, |i| work(50) + i as u64)
                    .window(8);
                assert_eq!(stream.next(), Some(work(50)));
                s.spawn(move |_| {
                    if thread::current().id() == consumer && streaming.load(SeqCst) {
                        buried.store(true, SeqCst);
                    }
                    work(5_000);
                });
                assert_eq!(stream.count(), 199);
                streaming.store(false, SeqCst);
            });
            assert!(
                !buried.load(SeqCst),
                "cap {cap}: the consumer ran the unrelated job"
            );
            assert_clean(&pool, cap, true);
        }
    });
}

#[test]
fn an_unconsumed_stream_runs_nothing_and_a_leaked_one_finishes_with_its_scope() {
    watchdog(60, || {
        let pool = pool(2, 2);
        let ran = AtomicUsize::new(0);
        pool.scope(|s| {
            let stream = s.map_ordered(0..50usize, |i| {
                ran.fetch_add(1, SeqCst);
                i
            });
            drop(stream);
        });
        assert_eq!(ran.load(SeqCst), 0);
        pool.scope(|s| {
            let mut stream = s.map_ordered(0..50usize, |i| {
                ran.fetch_add(1, SeqCst);
                i
            });
            assert_eq!(stream.next(), Some(0));
            std::mem::forget(stream);
        });
        // The pulled items ran (or were left) before the scope returned: nothing runs later.
        let after = ran.load(SeqCst);
        assert!(after <= 50);
        assert_clean(&pool, 2, true);
        assert_eq!(ran.load(SeqCst), after);
    });
}

#[test]
fn a_zero_window_is_refused_with_a_clear_message() {
    let pool = pool(1, 1);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.scope(|s| s.map_ordered(0..3, |i: i32| i).window(0).count())
    }));
    let message = describe(caught.expect_err("window(0) panics"));
    assert!(message.contains("at least one item"), "{message}");
    assert_clean(&pool, 1, true);
}

#[test]
fn streams_nest_and_run_from_many_jobs_at_once() {
    watchdog(120, || {
        let pool = pool(4, 3);
        let totals: Vec<u64> = pool.scope(|s| {
            s.map_ordered(0..8u64, |outer| {
                treepool::scope(|inner| {
                    inner
                        .map_ordered(0..50u64, move |i| {
                            work(2);
                            outer * 1_000 + i
                        })
                        .window(3)
                        .sum()
                })
            })
            .collect()
        });
        let expected: Vec<u64> = (0..8u64)
            .map(|o| (0..50u64).map(|i| o * 1_000 + i).sum())
            .collect();
        assert_eq!(totals, expected);
        assert_clean(&pool, 3, true);
    });
}
