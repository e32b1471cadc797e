//! Who consumes a stream: a worker of another pool, a start or exit handler, a consumer whose kind
//! (worker of the scope's pool, plain thread, other pool's worker) changes between `next`s or at
//! its drop, random mixes of kinds on one scope, items that call into the consumer's pool, items
//! that broadcast while the consumer waits. Each test runs under a watchdog.

use crate::common;
use crate::common::{assert_peak_bounds, borrowed_pool, pool, settle, spin_us, watchdog, Rng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// The scope comes from `ThreadPool::scope` on pool B; the stream is consumed on a worker of
/// pool A (the scope's body called `a.install`). B has one token, held by the scope's root job,
/// so `try_spawn` finds no token. A plain `Scope::spawn` from another pool's worker would leave
/// the carrier to the scope's owner, which is waiting in `a.install` for the consumer (it hung
/// so before): the carrier is admitted on the consumer's credit instead, one more than B's cap
/// while it runs (`calls_in`), as a call from A into B would be.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn a_stream_of_another_pools_scope_consumed_on_a_worker_of_this_pool() {
    let a = Arc::new(pool(2, 2));
    let b = Arc::new(pool(2, 1));
    let (a2, b2) = (a.clone(), b.clone());
    let out = watchdog(20, move || {
        b2.scope(|s| a2.install(|| s.map_ordered(0..4u32, |i| i * 10).collect::<Vec<_>>()))
    });
    assert_eq!(out, [0, 10, 20, 30]);
    let [stats] = settle([&b]);
    assert!(
        stats.peak_executing <= 1 + 1,
        "B1 with one credit: {stats:?}"
    );
}

/// Found by review 19's attacks on the ordered stream.
#[test]
fn broadcasts_from_items_while_the_consumer_waits() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (3, 1), (4, 2), (4, 4)] {
            let p = pool(threads, cap);
            let out: Vec<usize> = p.scope(|s| {
                s.map_ordered(0..40usize, |i| {
                    let v = treepool::broadcast(|ctx| ctx.index());
                    assert_eq!(v.len(), threads);
                    i + v.len()
                })
                .window(3)
                .collect()
            });
            assert_eq!(out, (0..40).map(|i| i + threads).collect::<Vec<_>>());
            assert_peak_bounds(&settle([&p])[0], cap);
            // The same with the consumer on a plain thread.
            let out: Vec<usize> = p.in_place_scope(|s| {
                s.map_ordered(0..20usize, |i| {
                    let v = treepool::broadcast(|ctx| ctx.index());
                    i + v.len()
                })
                .collect()
            });
            assert_eq!(out, (0..20).map(|i| i + threads).collect::<Vec<_>>());
            assert_peak_bounds(&settle([&p])[0], cap);
        }
    });
}

/// `a.install(|| b.scope(..))`: the scope's body runs on a worker of B (a root on credit), the
/// consumer is that worker, inside a job: the ordinary case. HOLDS.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn a_scope_of_another_pool_entered_through_install_holds() {
    watchdog(60, || {
        let a = pool(2, 1);
        let b = pool(2, 1);
        let out: Vec<u32> =
            a.install(|| b.scope(|s| s.map_ordered(0..100u32, |i| i + 1).window(3).collect()));
        assert_eq!(out, (1..=100).collect::<Vec<_>>());
        settle([&a, &b]);
    });
}

/// Streams consumed in start and exit handlers (a worker of the pool with no current job: not
/// inline, it waits as `wait_until`), with one and two tokens. HOLDS.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn streams_in_start_and_exit_handlers() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 1), (3, 2)] {
            let sums = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (s1, s2) = (sums.clone(), sums.clone());
            let p = treepool::ThreadPoolBuilder::new()
                .num_threads(threads)
                .max_inflight(cap)
                .start_handler(move |i| {
                    let n: u64 = treepool::in_place_scope(|s| {
                        s.map_ordered(0..30u64, |k| k * 2).window(3).sum()
                    });
                    s1.lock().unwrap().push((i, n));
                })
                .exit_handler(move |i| {
                    let n: u64 = treepool::in_place_scope(|s| {
                        s.map_ordered(0..30u64, |k| k).window(2).sum()
                    });
                    s2.lock().unwrap().push((100 + i, n));
                })
                .build()
                .unwrap();
            let out: u64 = p.install(|| treepool::scope(|s| s.map_ordered(0..10u64, |k| k).sum()));
            assert_eq!(out, 45);
            // Every start handler's stream is in flight until it is consumed: the pool is idle
            // only once all have run (a worker may start after the `install` above returned).
            common::spin_until(|| sums.lock().unwrap().len() == threads);
            settle([&p]);
            drop(p);
            // The exit handlers run as the workers leave, after `drop` returns (it does not join
            // them): wait for them, under the watchdog.
            common::spin_until(|| sums.lock().unwrap().len() == 2 * threads);
            let mut v = sums.lock().unwrap().clone();
            v.sort();
            assert_eq!(v.len(), 2 * threads, "{v:?}");
            for (i, n) in v {
                assert_eq!(n, if i >= 100 { 435 } else { 870 });
            }
        }
    });
}

/// One consumption of a stream of `s` with random failures, panics and an early stop.
fn consume(s: &treepool::Scope<'_>, rng_seed: u64) -> u64 {
    let mut rng = common::Rng::new(rng_seed);
    let n = rng.range(0, 40);
    let panic_at = if rng.range(0, 3) == 0 {
        rng.range(0, 40)
    } else {
        u64::MAX
    };
    let err_at = if rng.range(0, 3) == 0 {
        rng.range(0, 40)
    } else {
        u64::MAX
    };
    let stop_at = if rng.range(0, 3) == 0 {
        rng.range(0, 40)
    } else {
        u64::MAX
    };
    let window = rng.range(1, 5) as usize;
    let nested = rng.range(0, 3) == 0;
    let r = catch_unwind(AssertUnwindSafe(|| {
        let it = s
            .try_map_ordered(0..n, move |i| {
                if i == panic_at {
                    panic!("item {i}");
                }
                if nested {
                    let (a, b) = treepool::join(|| i, || i);
                    assert_eq!(a, b);
                }
                if i % 5 == 0 {
                    thread::sleep(Duration::from_micros(100));
                }
                if i == err_at {
                    Err(i)
                } else {
                    Ok(i)
                }
            })
            .window(window);
        let mut sum = 0;
        for (k, x) in it.enumerate() {
            match x {
                Ok(x) => sum += x,
                Err(_) => break,
            }
            if k as u64 == stop_at {
                break;
            }
        }
        sum
    }));
    r.unwrap_or(0)
}

/// Random consumers of every kind at once on small pools: no hang, Stats back to zero, no
/// credit left, the pool bound with credits counted as the docs count them.
///
/// Found by the final review of 6be5505 (plain-thread consumers' carriers, aside sleep, try_scope
/// marks, consumers that change kind).
#[test]
fn random_consumers_of_every_kind() {
    watchdog(300, || {
        for seed in 0..seeds() {
            let mut rng = common::Rng::new(seed);
            let threads = rng.range(1, 3) as usize;
            let cap = rng.range(1, 2) as usize;
            let p = pool(threads.max(2), cap);
            let x = pool(1, 1);
            let kinds = rng.range(0, 15);
            p.scope(|s| {
                if kinds & 1 != 0 {
                    s.spawn(move |s| {
                        consume(s, seed * 7 + 1);
                    });
                }
                if kinds & 2 != 0 {
                    x.install(|| consume(s, seed * 7 + 2));
                }
                consume(s, seed * 7 + 5);
            });
            p.in_place_scope(|s| {
                consume(s, seed * 7 + 6);
                if kinds & 4 != 0 {
                    thread::scope(|t| {
                        t.spawn(|| consume(s, seed * 7 + 3));
                        t.spawn(|| consume(s, seed * 7 + 4));
                    });
                }
                if kinds & 8 != 0 {
                    thread::scope(|t| {
                        t.spawn(|| consume(s, seed * 7 + 7));
                    });
                }
            });
            let [stats] = settle([&p]);
            assert_eq!(stats.calls_in, 0, "seed {seed}: {stats:?}");
            settle([&x]);
        }
    });
}

fn seeds() -> u64 {
    std::env::var("REVIEW_FINAL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150)
}

/// Drains `it`, taking the `k`-th item on this thread as it is when `(k + offset)` is even and
/// inside a call into `p` (whose worker 0 this thread is) when it is odd.
fn next_toggling(
    it: &mut impl Iterator<Item = u64>,
    p: &treepool::ThreadPool,
    offset: u64,
) -> Vec<u64> {
    let mut got = Vec::new();
    for k in 0.. {
        let x = if (k + offset) % 2 == 0 {
            it.next()
        } else {
            p.in_place_scope(|_| it.next())
        };
        match x {
            Some(x) => got.push(x),
            None => break,
        }
    }
    got
}

/// The builder's thread B toggles kind at every `next` (plain, then P's worker 0 inside
/// `P.in_place_scope`), with items whose length is around the linger so waits arm often, and
/// completers race the re-targeting.
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn consumer_toggles_kind_at_every_next() {
    let out = watchdog(120, || {
        let mut all = Vec::new();
        for round in 0..30u64 {
            let y = pool(2, 2);
            let threads = 1 + (round % 2) as usize;
            let p = borrowed_pool(threads, 1);
            let got: Vec<u64> = y.in_place_scope(|s| {
                let mut it = s
                    .map_ordered(0..60u64, move |i| {
                        spin_us((i * 37 + round) % 200);
                        i
                    })
                    .window(1 + (round % 3) as usize);
                next_toggling(&mut it, &p, 0)
            });
            drop(p);
            settle([&y]);
            all.push(got);
        }
        all
    });
    for got in out {
        assert_eq!(got, (0..60).collect::<Vec<_>>());
    }
}

/// Early drop (end's wait) in the other kind than the last `next`, both ways.
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn consumer_drops_in_the_other_kind() {
    watchdog(120, || {
        for round in 0..40u64 {
            let y = pool(2, 2);
            let p = borrowed_pool(1, 1);
            y.in_place_scope(|s| {
                let mut it = s
                    .map_ordered(0..40u64, |i| {
                        thread::sleep(Duration::from_micros(300));
                        i
                    })
                    .window(4);
                if round % 2 == 0 {
                    assert_eq!(it.next(), Some(0));
                    p.in_place_scope(|_| drop(it));
                } else {
                    p.in_place_scope(|_| assert_eq!(it.next(), Some(0)));
                    drop(it);
                }
            });
            drop(p);
            settle([&y]);
        }
    });
}

/// On one scope of Y owned by the builder's thread B of P: a plain thread's stream, a Y job's
/// stream, and B's own stream consumed plain, inside P's in-place scope, and inside one that
/// spawns a P job, in a random rotation, sometimes dropped early: Y back to zero, no credit left.
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn random_mix_of_kinds_on_one_scope() {
    watchdog(240, || {
        for seed in 0..60u64 {
            let mut rng = Rng::new(seed);
            let y = pool(rng.range(1, 2) as usize, 1);
            let p = borrowed_pool(rng.range(1, 2) as usize, 1);
            let mode = rng.range(0, 7);
            y.in_place_scope(|s| {
                thread::scope(|t| {
                    if mode & 1 != 0 {
                        t.spawn(|| {
                            let v: u64 = s
                                .map_ordered(0..30u64, |i| {
                                    spin_us(100);
                                    i
                                })
                                .sum();
                            assert_eq!(v, 435);
                        });
                    }
                    if mode & 2 != 0 {
                        s.spawn(|s| {
                            let v: u64 = s
                                .map_ordered(0..30u64, |i| {
                                    spin_us(80);
                                    i
                                })
                                .sum();
                            assert_eq!(v, 435);
                        });
                    }
                    let mut it = s
                        .map_ordered(0..30u64, |i| {
                            spin_us(120);
                            i
                        })
                        .window(2);
                    let mut got = Vec::new();
                    let mut k = 0;
                    loop {
                        let x = match (k + seed) % 3 {
                            0 => it.next(),
                            1 => p.in_place_scope(|_| it.next()),
                            _ => p.in_place_scope(|ps| {
                                ps.spawn(|_| spin_us(50));
                                it.next()
                            }),
                        };
                        k += 1;
                        match x {
                            Some(x) => got.push(x),
                            None => break,
                        }
                        if mode & 4 != 0 && x == Some(20) {
                            break;
                        }
                    }
                    drop(it);
                    let want: Vec<u64> = if mode & 4 != 0 {
                        (0..21).collect()
                    } else {
                        (0..30).collect()
                    };
                    assert_eq!(got, want, "seed {seed}");
                });
            });
            drop(p);
            let [stats] = settle([&y]);
            assert_eq!(stats.calls_in, 0, "seed {seed}: {stats:?}");
        }
    });
}

/// Start handlers consume streams: of their own pool in an in-place scope (a worker that runs
/// no job), and of another pool (a foreign worker with no job: credit).
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn start_handlers_consume_streams() {
    let y = Arc::new(pool(2, 1));
    let y2 = y.clone();
    let sums = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sums2 = sums.clone();
    watchdog(120, move || {
        for _ in 0..10 {
            let (y3, sums3) = (y2.clone(), sums2.clone());
            let p = treepool::ThreadPoolBuilder::new()
                .num_threads(2)
                .max_inflight(1)
                .start_handler(move |index| {
                    let a: u64 = treepool::in_place_scope(|s| {
                        s.map_ordered(0..15u64, |i| {
                            spin_us(100);
                            i
                        })
                        .window(2)
                        .sum()
                    });
                    let b: u64 = y3.in_place_scope(|s| {
                        s.map_ordered(0..15u64, |i| {
                            spin_us(100);
                            i
                        })
                        .sum()
                    });
                    sums3.lock().unwrap().push((index, a, b));
                })
                .build()
                .unwrap();
            let _ = p.install(|| treepool::join(|| 1, || 2));
            drop(p);
        }
        common::spin_until(|| sums2.lock().unwrap().len() == 20);
    });
    for (_, a, b) in sums.lock().unwrap().iter() {
        assert_eq!((*a, *b), (105, 105));
    }
    settle([&y]);
}

/// Items call into the builder's pool P (`p.install`) while B consumes inside and outside P's
/// in-place scope (P has a second worker for the nexts made outside).
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn items_call_into_the_consumers_borrowed_pool() {
    watchdog(120, || {
        for round in 0..20u64 {
            let y = pool(1 + (round % 2) as usize, 1);
            let p = Arc::new(borrowed_pool(2, 1));
            let p2 = p.clone();
            let got: Vec<u64> = y.in_place_scope(|s| {
                let mut it = s
                    .map_ordered(0..30u64, move |i| {
                        p2.install(|| {
                            spin_us(60);
                            treepool::join(|| i, || ()).0
                        })
                    })
                    .window(1 + (round % 3) as usize);
                next_toggling(&mut it, &p, round)
            });
            assert_eq!(got, (0..30).collect::<Vec<_>>());
            settle([&y]);
            settle([&p]);
        }
    });
}
