//! Streams and the consumer's other work: a consumer that joins, spawns and nests scopes between
//! `next`s, streams consumed inside items of another stream, a plain-thread outer consumer of
//! nested streams, a stream started before a nested scope and consumed after. Each test runs
//! under a watchdog.

use crate::common::{assert_peak_bounds, pool, settle, watchdog};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

// streams; mem::forget; zero-sized items; deep nesting.

/// Found by review 19's attacks on the ordered stream.
#[test]
fn consumer_joins_spawns_and_nests_scopes_between_nexts() {
    watchdog(180, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (3, 1), (4, 2)] {
            let p = pool(threads, cap);
            let side = AtomicUsize::new(0);
            let got: Vec<u64> = p.scope(|s| {
                let mut it = s
                    .map_ordered(0..60u64, |i| {
                        if i % 5 == 0 {
                            treepool::scope(|s3| {
                                s3.spawn(|_| {
                                    std::hint::black_box(1);
                                })
                            });
                        }
                        i * i
                    })
                    .window(3);
                let mut out = Vec::new();
                let mut k = 0;
                for v in it.by_ref() {
                    out.push(v);
                    k += 1;
                    match k % 4 {
                        0 => {
                            treepool::join(
                                || side.fetch_add(1, SeqCst),
                                || side.fetch_add(1, SeqCst),
                            );
                        }
                        1 => s.spawn(|_| {
                            side.fetch_add(1, SeqCst);
                        }),
                        2 => treepool::scope(|s2| {
                            s2.spawn(|_| {
                                side.fetch_add(1, SeqCst);
                            });
                            s2.spawn(|_| {
                                side.fetch_add(1, SeqCst);
                            });
                        }),
                        _ => {
                            treepool::spawn(|| ());
                        }
                    }
                }
                out
            });
            assert_eq!(got, (0..60u64).map(|i| i * i).collect::<Vec<_>>());
            settle([&p]);
        }
    });
}

/// Found by review 19's attacks on the ordered stream.
#[test]
fn a_stream_consumed_inside_items_of_another_stream() {
    watchdog(180, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (3, 1), (4, 2)] {
            let p = pool(threads, cap);
            let got: Vec<u64> = p.scope(|s| {
                s.map_ordered(0..12u64, |o| {
                    treepool::scope(|si| {
                        si.map_ordered(0..12u64, |i| {
                            treepool::scope(|sj| sj.map_ordered(0..3u64, |j| j).sum::<u64>()) + i
                        })
                        .window(2)
                        .sum::<u64>()
                            + o
                    })
                })
                .window(2)
                .collect()
            });
            let inner: u64 = (0..12u64).map(|i| 3 + i).sum();
            assert_eq!(got, (0..12u64).map(|o| inner + o).collect::<Vec<_>>());
            assert_peak_bounds(&settle([&p])[0], cap);
        }
    });
}

/// A stream consumed inside items of another stream, both on *plain-thread* scopes (the inner
/// consumer is a carrier on a worker, or the outer plain consumer).
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn nested_streams_with_a_plain_thread_outer_consumer() {
    watchdog(180, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (4, 2)] {
            let p = pool(threads, cap);
            let got: Vec<u64> = p.in_place_scope(|s| {
                s.map_ordered(0..10u64, |o| {
                    treepool::scope(|si| si.map_ordered(0..10u64, |i| i).window(2).sum::<u64>()) + o
                })
                .window(2)
                .collect()
            });
            assert_eq!(got, (0..10u64).map(|o| 45 + o).collect::<Vec<_>>());
            assert_peak_bounds(&settle([&p])[0], cap);
        }
    });
}

/// A stream made in a scope body, started, then a nested `scope` whose wait may run the stream's
/// carriers (they sit in the consumer's deque), then consumed; also with the stream dropped
/// half consumed just before the body returns. HOLDS.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn a_stream_started_then_a_nested_scope_then_consumed() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (4, 3)] {
            let p = pool(threads, cap);
            let side = AtomicUsize::new(0);
            let got: Vec<u32> = p.scope(|s| {
                let mut it = s.map_ordered(0..40u32, |i| i + 1).window(4);
                let first = it.next().unwrap();
                treepool::scope(|s2| {
                    for _ in 0..10 {
                        s2.spawn(|_| {
                            side.fetch_add(1, SeqCst);
                        });
                    }
                });
                let mut half = s.map_ordered(0..40u32, |i| i).window(6);
                half.next();
                half.next();
                drop(half);
                std::iter::once(first).chain(it).collect()
            });
            assert_eq!(got, (1..=40).collect::<Vec<_>>());
            assert_eq!(side.load(SeqCst), 10);
            assert_peak_bounds(&settle([&p])[0], cap);
        }
    });
}
