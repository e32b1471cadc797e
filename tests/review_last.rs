//! Adversarial review of 6711699: the stream's consumer wake target set by each wait, and the
//! plain-thread fallback carrier that parks for a pool token (`Scope::spawn_awaited`).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{assert_idle, pool, wait_idle, watchdog, Rng};

fn spin_us(us: u64) {
    let until = std::time::Instant::now() + Duration::from_micros(us);
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// The builder's thread B toggles kind at every `next` (plain, then P's worker 0 inside
/// `P.in_place_scope`), with items whose length is around the linger so waits arm often, and
/// completers race the re-targeting.
#[test]
fn consumer_toggles_kind_at_every_next() {
    let out = watchdog(120, || {
        let mut all = Vec::new();
        for round in 0..30u64 {
            let y = pool(2, 2);
            let threads = 1 + (round % 2) as usize;
            let p = treepool::ThreadPoolBuilder::new()
                .num_threads(threads)
                .max_inflight(1)
                .use_current_thread()
                .build()
                .unwrap();
            let got: Vec<u64> = y.in_place_scope(|s| {
                let mut it = s
                    .map_ordered(0..60u64, move |i| {
                        spin_us((i * 37 + round) % 200);
                        i
                    })
                    .window(1 + (round % 3) as usize);
                let mut got = Vec::new();
                for k in 0.. {
                    let x = if k % 2 == 0 {
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
            });
            drop(p);
            wait_idle(&y);
            assert_idle(&y.stats());
            all.push(got);
        }
        all
    });
    for got in out {
        assert_eq!(got, (0..60).collect::<Vec<_>>());
    }
}

/// Early drop (end's wait) in the other kind than the last `next`, both ways.
#[test]
fn consumer_drops_in_the_other_kind() {
    watchdog(120, || {
        for round in 0..40u64 {
            let y = pool(2, 2);
            let p = treepool::ThreadPoolBuilder::new()
                .num_threads(1)
                .max_inflight(1)
                .use_current_thread()
                .build()
                .unwrap();
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
            wait_idle(&y);
            assert_idle(&y.stats());
        }
    });
}

/// Many plain-thread consumers at max_inflight(1) on one thread, in an in-place scope of a plain
/// thread, with source panics, item panics and early drops while others park in admission.
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
        wait_idle(&p);
        let stats = p.stats();
        assert_idle(&stats);
        assert_eq!(stats.calls_in, 0, "{stats:?}");
        assert_eq!(stats.peak_calls_in, 0, "{stats:?}");
        assert!(stats.peak_executing <= 1, "{stats:?}");
        assert!(stats.peak_inflight <= stats.peak_depth.max(1), "{stats:?}");
    }
}

/// Plain consumers whose items nest: join, spawn into the scope, and a nested stream consumed
/// inline by the carrier; cap 1, 1 and 2 threads.
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
        wait_idle(&p);
        let stats = p.stats();
        assert_idle(&stats);
        assert_eq!(stats.peak_calls_in, 0, "{stats:?}");
        assert!(stats.peak_executing <= 1, "{stats:?}");
    }
}

/// On one scope of Y owned by the builder's thread B of P: a plain thread's stream, a Y job's
/// stream, and B's own stream consumed plain, inside P's in-place scope, and inside one that
/// spawns a P job, in a random rotation, sometimes dropped early: Y back to zero, no credit left.
#[test]
fn random_mix_of_kinds_on_one_scope() {
    watchdog(240, || {
        for seed in 0..60u64 {
            let mut rng = Rng::new(seed);
            let y = pool(rng.range(1, 2) as usize, 1);
            let p = treepool::ThreadPoolBuilder::new()
                .num_threads(rng.range(1, 2) as usize)
                .max_inflight(1)
                .use_current_thread()
                .build()
                .unwrap();
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
            wait_idle(&y);
            let stats = y.stats();
            assert_idle(&stats);
            assert_eq!(stats.calls_in, 0, "seed {seed}: {stats:?}");
        }
    });
}

/// The builder's pool P is dropped between two `next`s: the wake target last set was
/// `Foreign(P, 0)`; the next wait replaces it (dropping P's registry there, maybe the last Arc).
#[test]
fn use_current_thread_pool_dropped_mid_stream() {
    watchdog(120, || {
        for round in 0..30u64 {
            let y = pool(2, 1);
            let p = treepool::ThreadPoolBuilder::new()
                .num_threads(1 + (round % 2) as usize)
                .max_inflight(1)
                .use_current_thread()
                .build()
                .unwrap();
            let got: Vec<u64> = y.in_place_scope(|s| {
                let mut it = s
                    .map_ordered(0..20u64, |i| {
                        spin_us(150);
                        i
                    })
                    .window(2);
                let mut got = Vec::new();
                p.in_place_scope(|_| {
                    got.push(it.next().unwrap());
                    got.push(it.next().unwrap());
                });
                drop(p);
                got.extend(it);
                got
            });
            assert_eq!(got, (0..20).collect::<Vec<_>>());
            wait_idle(&y);
            assert_idle(&y.stats());
        }
    });
}

/// Start handlers consume streams: of their own pool in an in-place scope (a worker that runs
/// no job), and of another pool (a foreign worker with no job: credit).
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
    wait_idle(&y);
    assert_idle(&y.stats());
}

/// Items call into the builder's pool P (`p.install`) while B consumes inside and outside P's
/// in-place scope (P has a second worker for the nexts made outside).
#[test]
fn items_call_into_the_consumers_borrowed_pool() {
    watchdog(120, || {
        for round in 0..20u64 {
            let y = pool(1 + (round % 2) as usize, 1);
            let p = Arc::new(
                treepool::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .max_inflight(1)
                    .use_current_thread()
                    .build()
                    .unwrap(),
            );
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
                let mut got = Vec::new();
                for k in 0.. {
                    let x = if (k + round) % 2 == 0 {
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
            });
            assert_eq!(got, (0..30).collect::<Vec<_>>());
            wait_idle(&y);
            assert_idle(&y.stats());
            wait_idle(&p);
            assert_idle(&p.stats());
        }
    });
}

/// Another pool's worker owns an in-place scope of Y (credit root) and zips many streams while a
/// plain thread started in the body zips others: owner carriers wait on the credit root one at a
/// time, the plain thread's park for Y tokens; Y back to zero, no credit left.
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
    wait_idle(&y);
    let stats = y.stats();
    assert_idle(&stats);
    assert_eq!(stats.calls_in, 0, "{stats:?}");
    wait_idle(&x);
    assert_idle(&x.stats());
}
