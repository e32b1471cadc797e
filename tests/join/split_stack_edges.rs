//! Adversarial review of the split-stack join core (issue 39's successor: every `b` lives in its
//! thread's split stack, `HalfStack`/`HalfOwner`; takers run, admit, credit or decline it; the
//! waits of its thread run it in place). Each test pushes one edge: panics in either half with
//! `b` private, public, claimed or declined; deep nesting; shape 2 (an `a` that waits, through
//! another pool, for its own `b`) with the joiner buried under jobs that admit or call out;
//! exactly-once of every `b` under contention; the bounds B1/B2 with halves on credit.

use crate::common::{
    assert_peak_bounds, catch, isolated, pool, quiet_panics_starting_with, settle, spin_until,
    spin_us, watchdog, Rng,
};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Shape 2 with the joiner J buried under K, a job J's call-out wait runs, while K waits to
/// admit a spawn (AdmittingKeepsHalves) and K's token is lent to K2, which runs on the pool's
/// other worker and waits (through Y) for J's `b`. Below J's halves lies a private half of the
/// job I that J's thread runs J above (I does not call out). CalledOutHalfOnCredit promises that
/// a wait on J's thread that finds no other work runs J's kept halves, on credit if no token
/// is free; K's admission wait only claims the thread's *oldest* unclaimed half if it lies
/// below a call, which I's does not, and promotes nothing while K admits, so `b` is never run
/// and never made public for K2's worker: a hang.
#[test]
fn shape_2_under_an_admitting_job_above_an_unrelated_buried_half() {
    isolated!(60, || watchdog(30, || {
        let x = Arc::new(pool(2, 1));
        let y = pool(3, 1);
        let occ_started = Arc::new(AtomicBool::new(false));
        let release_occ = Arc::new(AtomicBool::new(false));
        // Keeps one worker of X busy (a root on the credit of a call from Y) while I and J
        // join, so that neither join finds an idle worker and both halves stay private.
        {
            let (x, started, release) = (x.clone(), occ_started.clone(), release_occ.clone());
            y.spawn(move || {
                x.install(|| {
                    started.store(true, SeqCst);
                    spin_until(|| release.load(SeqCst));
                });
            });
        }
        spin_until(|| occ_started.load(SeqCst));
        let b_j_started = AtomicBool::new(false);
        let k2_started = AtomicBool::new(false);
        let k3_ran = AtomicBool::new(false);
        // I: a root of X on the other worker.
        let (_, b_i) = x.install(|| {
            treepool::join(
                || {
                    treepool::scope(|s| {
                        // J, on I's loan, run above I by the scope's end wait.
                        s.spawn(|_| {
                            let (_, b_j) = treepool::join(
                                || {
                                    treepool::scope(|s2| {
                                        // K, on J's loan, run above J by J's call-out wait.
                                        s2.spawn(|s2| {
                                            // K2, on K's loan: taken by the other worker once
                                            // the occupier ends.
                                            s2.spawn(|_| {
                                                k2_started.store(true, SeqCst);
                                                y.install(|| {
                                                    spin_until(|| b_j_started.load(SeqCst))
                                                });
                                            });
                                            release_occ.store(true, SeqCst);
                                            spin_until(|| k2_started.load(SeqCst));
                                            // K3: K's token is lent to K2, none is free.
                                            s2.spawn(|_| k3_ran.store(true, SeqCst));
                                        });
                                        y.install(|| spin_until(|| b_j_started.load(SeqCst)));
                                    })
                                },
                                || b_j_started.store(true, SeqCst),
                            );
                            b_j
                        });
                    })
                },
                || 7,
            )
        });
        assert_eq!(b_i, 7);
        assert!(k3_ran.load(SeqCst));
        settle([&*x, &y]);
    }));
}

/// A random binary tree of joins: node `id` joins its two children; a leaf sleeps or spins a
/// little. Each node counts its `b` in `runs[id]`. Returns the number of leaves.
fn random_tree(rng_seed: u64, id: usize, depth: u32, runs: &[AtomicUsize]) -> usize {
    let mut rng = Rng::new(rng_seed ^ (id as u64).wrapping_mul(0x9E37));
    if depth == 0 || rng.range(0, 7) == 0 {
        match rng.range(0, 3) {
            0 => std::thread::sleep(Duration::from_micros(rng.range(10, 200))),
            1 => spin_us(rng.range(0, 50)),
            _ => {}
        }
        return 1;
    }
    let (l, r) = treepool::join(
        || random_tree(rng_seed, 2 * id + 1, depth - 1, runs),
        || {
            runs[id].fetch_add(1, SeqCst);
            random_tree(rng_seed, 2 * id + 2, depth - 1, runs)
        },
    );
    l + r
}

/// The same tree, sequentially: the expected leaf count and which nodes join.
fn random_tree_seq(rng_seed: u64, id: usize, depth: u32, joins: &mut Vec<usize>) -> usize {
    let mut rng = Rng::new(rng_seed ^ (id as u64).wrapping_mul(0x9E37));
    if depth == 0 || rng.range(0, 7) == 0 {
        let _ = rng.range(0, 3);
        return 1;
    }
    joins.push(id);
    random_tree_seq(rng_seed, 2 * id + 1, depth - 1, joins)
        + random_tree_seq(rng_seed, 2 * id + 2, depth - 1, joins)
}

/// Exactly once under contention: random trees with sleeping and spinning leaves on 2 to 8
/// threads and 1 to 3 tokens; every `b` runs once (counted per node), the results add up, and
/// B1/B2 hold on the peaks.
#[test]
fn every_b_runs_once_in_random_trees_on_2_to_8_threads() {
    watchdog(120, || {
        const DEPTH: u32 = 11;
        let runs: Vec<AtomicUsize> = (0..(1usize << (DEPTH + 1)))
            .map(|_| AtomicUsize::new(0))
            .collect();
        for (round, (threads, cap)) in [(2, 1), (3, 2), (4, 1), (8, 3), (8, 1), (5, 5)]
            .into_iter()
            .enumerate()
        {
            let x = pool(threads, cap);
            for seed in 0..3u64 {
                let seed = seed * 131 + round as u64;
                let mut joins = Vec::new();
                let expect = random_tree_seq(seed, 0, DEPTH, &mut joins);
                for r in &runs {
                    r.store(0, SeqCst);
                }
                let got = x.install(|| random_tree(seed, 0, DEPTH, &runs));
                assert_eq!(got, expect, "{threads} threads cap {cap} seed {seed}");
                for &id in &joins {
                    assert_eq!(
                        runs[id].load(SeqCst),
                        1,
                        "b of node {id} ran {} times ({threads}/{cap}/{seed})",
                        runs[id].load(SeqCst)
                    );
                }
                let total: usize = runs.iter().map(|r| r.load(SeqCst)).sum();
                assert_eq!(total, joins.len());
            }
            let [s] = settle([&x]);
            assert_peak_bounds(&s, cap);
        }
    });
}

/// What a node of a panicking tree does.
#[derive(Clone, Copy)]
enum Fate {
    Fine,
    Panics,
}

fn fate(seed: u64, id: usize) -> Fate {
    let mut rng = Rng::new(seed.wrapping_mul(7) ^ id as u64);
    if rng.range(0, 5) == 0 {
        Fate::Panics
    } else {
        Fate::Fine
    }
}

/// A tree of joins where some leaves panic (with their node's id): `a`'s panic wins over
/// `b`'s. Every leaf runs once, even below a panicking `a` (its `b` still runs).
fn panicking_tree(seed: u64, id: usize, depth: u32, leaves: &[AtomicUsize]) -> usize {
    if depth == 0 {
        leaves[id].fetch_add(1, SeqCst);
        if id % 3 == 0 {
            std::thread::sleep(Duration::from_micros(30));
        }
        return match fate(seed, id) {
            Fate::Fine => 1,
            Fate::Panics => panic!("split-stack-edges: leaf {id}"),
        };
    }
    let (l, r) = treepool::join(
        || panicking_tree(seed, 2 * id + 1, depth - 1, leaves),
        || panicking_tree(seed, 2 * id + 2, depth - 1, leaves),
    );
    l + r
}

/// The panic a sequential run raises first in `a`-before-`b` order: the leftmost panicking leaf.
fn first_panic(seed: u64, id: usize, depth: u32) -> Option<usize> {
    if depth == 0 {
        return match fate(seed, id) {
            Fate::Fine => None,
            Fate::Panics => Some(id),
        };
    }
    first_panic(seed, 2 * id + 1, depth - 1).or_else(|| first_panic(seed, 2 * id + 2, depth - 1))
}

/// Panics in `a`, in `b` and in both at every level of random trees, with `b` private, public,
/// claimed or declined (1 to 4 threads, 1 or 2 tokens): the join raises the leftmost panic (a
/// wins over b, recursively), every leaf runs exactly once, and the pool is idle after (B4).
#[test]
fn panics_in_random_trees_raise_the_leftmost_and_run_every_leaf_once() {
    quiet_panics_starting_with("split-stack-edges:");
    watchdog(120, || {
        const DEPTH: u32 = 8;
        let leaves: Vec<AtomicUsize> = (0..(1usize << (DEPTH + 1)))
            .map(|_| AtomicUsize::new(0))
            .collect();
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (4, 1), (4, 2)] {
            let x = pool(threads, cap);
            for seed in 0..12u64 {
                for l in &leaves {
                    l.store(0, SeqCst);
                }
                let r = catch(|| x.install(|| panicking_tree(seed, 0, DEPTH, &leaves)));
                match first_panic(seed, 0, DEPTH) {
                    None => assert_eq!(r, Ok(1 << DEPTH)),
                    Some(id) => assert_eq!(
                        r,
                        Err(format!("split-stack-edges: leaf {id}")),
                        "{threads}/{cap} seed {seed}"
                    ),
                }
                let first_leaf = (1usize << DEPTH) - 1;
                for (id, leaf) in leaves
                    .iter()
                    .enumerate()
                    .skip(first_leaf)
                    .take(first_leaf + 1)
                {
                    let runs = leaf.load(SeqCst);
                    assert_eq!(
                        runs, 1,
                        "leaf {id} ran {runs} times ({threads}/{cap} seed {seed})"
                    );
                }
            }
            let [s] = settle([&x]);
            assert_peak_bounds(&s, cap);
        }
    });
}

/// `n` nested joins, each `b` counted; the innermost `a` returns 0.
fn nested(n: usize, runs: &AtomicUsize) -> usize {
    if n == 0 {
        return 0;
    }
    let (a, b) = treepool::join(
        || nested(n - 1, runs),
        || {
            runs.fetch_add(1, SeqCst);
            1
        },
    );
    a + b
}

/// Joins nested thousands deep on one thread, on 1 and 2 threads (the second promotes halves
/// to the idle other worker, which claims the oldest): every `b` runs once.
#[test]
fn joins_nested_thousands_deep_on_1_and_2_threads() {
    isolated!(120, || watchdog(100, || {
        for threads in [1, 2] {
            let x = treepool::ThreadPoolBuilder::new()
                .num_threads(threads)
                .max_inflight(1)
                .stack_size(256 << 20)
                .build()
                .unwrap();
            for n in [1_000, 20_000] {
                let runs = AtomicUsize::new(0);
                assert_eq!(x.install(|| nested(n, &runs)), n);
                assert_eq!(runs.load(SeqCst), n);
            }
            settle([&x]);
        }
    }));
}

/// `n` nested joins whose innermost `a` waits (through `y`) until every `b` ran: every `b` is
/// run by a wait of the thread (in place), or by a thief; each exactly once. With 2 and 4
/// threads and one token, thieves find no token and decline them.
fn chain_waits(y: &treepool::ThreadPool, k: usize, n: usize, runs: &[AtomicUsize]) -> usize {
    if k == n {
        y.install(|| spin_until(|| runs.iter().all(|r| r.load(SeqCst) > 0)));
        return 0;
    }
    let (a, b) = treepool::join(
        || chain_waits(y, k + 1, n, runs),
        || {
            runs[k].fetch_add(1, SeqCst);
            if k % 4 == 0 {
                spin_us(100);
            }
            k
        },
    );
    a + b
}

/// Shape 2 for a whole chain: the innermost `a` waits for every `b` of the chain, on 1 to 4
/// threads with 1 or 2 tokens: the `b`s are run in place, claimed, declined and run on
/// credit; each exactly once, and B1 holds counting halves on credit as calls in.
#[test]
fn a_chain_whose_innermost_a_waits_for_every_b_on_1_to_4_threads() {
    watchdog(120, || {
        let y = pool(1, 1);
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (4, 1), (4, 3)] {
            let x = pool(threads, cap);
            for n in [1, 3, 17, 200] {
                let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                let sum = x.install(|| chain_waits(&y, 0, n, &runs));
                assert_eq!(sum, n * (n - 1) / 2);
                for (k, r) in runs.iter().enumerate() {
                    assert_eq!(
                        r.load(SeqCst),
                        1,
                        "{threads}/{cap} n {n}: b {k} ran {} times",
                        r.load(SeqCst)
                    );
                }
            }
            let [s, _] = settle([&x, &y]);
            assert!(
                s.peak_executing <= cap + s.peak_calls_in,
                "B1: peak executing {} > cap {cap} + peak calls in {}",
                s.peak_executing,
                s.peak_calls_in
            );
        }
    });
}

/// B1 counting calls in: a half run on credit is counted in `calls_in`.
fn assert_b1_with_credit(s: &treepool::Stats, cap: usize) {
    assert!(
        s.peak_executing <= cap + s.peak_calls_in,
        "B1: peak executing {} > cap {cap} + peak calls in {} ({s:?})",
        s.peak_executing,
        s.peak_calls_in
    );
    assert!(
        s.tokens_in_use <= cap,
        "B1: tokens {} > cap {cap}",
        s.tokens_in_use
    );
}

/// Shape 2 where a thief finds no token: the joiner J lends its token to a spawned child C
/// (one token), then joins with every other worker idle, so `b` is made public at the join and
/// claimed by a thief with no token to admit it (declined); `a` waits through Y for `b`. C
/// either spins, or itself waits (through Y) for `b`, on the joiner's thread above J (where J's
/// declined `b` must run on credit) or on the thief's. `b` runs once each round; B1 holds with
/// halves on credit counted in `calls_in`.
#[test]
fn shape_2_b_claimed_by_a_thief_with_no_token_while_the_joiners_token_is_lent() {
    watchdog(120, || {
        let y = pool(3, 1);
        let (mut declined, mut on_credit) = (0, 0);
        for round in 0..40u32 {
            let threads = [2, 3, 4][round as usize % 3];
            let x = pool(threads, 1);
            let b_runs = AtomicUsize::new(0);
            let c_waits = round % 2 == 0;
            x.install(|| {
                treepool::scope(|s| {
                    s.spawn(|_| {
                        if c_waits {
                            y.install(|| spin_until(|| b_runs.load(SeqCst) > 0));
                        } else {
                            spin_us(200);
                        }
                    });
                    // Let the other workers go idle (counted), so the join gives out `b`.
                    std::thread::sleep(Duration::from_millis(2));
                    treepool::join(
                        || y.install(|| spin_until(|| b_runs.load(SeqCst) > 0)),
                        || {
                            b_runs.fetch_add(1, SeqCst);
                        },
                    );
                })
            });
            assert_eq!(b_runs.load(SeqCst), 1, "round {round}");
            let [s, _] = settle([&x, &y]);
            assert_b1_with_credit(&s, 1);
            declined += s.handed_back;
            on_credit += s.halves_on_credit;
        }
        eprintln!("shape 2 with a tokenless thief: {declined} declined, {on_credit} on credit");
    });
}

/// An ordered stream whose items each join with an `a` that waits (through Y) for its own
/// `b`: items run inline by the consumer (OwnItems) or in carriers, on 1 to 3 threads with 1
/// or 2 tokens. Every item's `b` runs once and the stream yields every item in order.
#[test]
fn ordered_stream_items_whose_a_waits_for_their_own_b() {
    watchdog(120, || {
        let y = pool(2, 1);
        for (threads, cap) in [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2)] {
            let x = pool(threads, cap);
            for _ in 0..4 {
                let runs: Vec<AtomicUsize> = (0..24).map(|_| AtomicUsize::new(0)).collect();
                let out: Vec<usize> = x.install(|| {
                    treepool::scope(|s| {
                        s.map_ordered(0..24usize, |i| {
                            let started = AtomicBool::new(false);
                            let (a, b) = treepool::join(
                                || {
                                    y.install(|| spin_until(|| started.load(SeqCst)));
                                    i
                                },
                                || {
                                    started.store(true, SeqCst);
                                    runs[i].fetch_add(1, SeqCst);
                                    treepool::join(|| i, || 0).0
                                },
                            );
                            a + b
                        })
                        .window(3)
                        .collect()
                    })
                });
                assert_eq!(out, (0..24).map(|i| 2 * i).collect::<Vec<_>>());
                for (i, r) in runs.iter().enumerate() {
                    assert_eq!(
                        r.load(SeqCst),
                        1,
                        "{threads}/{cap}: item {i}'s b ran {} times",
                        r.load(SeqCst)
                    );
                }
            }
            let [s, _] = settle([&x, &y]);
            assert_b1_with_credit(&s, cap);
        }
    });
}

/// Broadcasts whose bodies join (random trees, and shape 2 through Y), on ordinary pools and on
/// `use_current_thread` pools (the builder's thread is worker 0 inside calls only): every `b`
/// runs once on every worker.
#[test]
fn broadcasts_that_join_on_plain_and_use_current_thread_pools() {
    watchdog(120, || {
        let y = pool(4, 1);
        for borrowed in [false, true] {
            for (threads, cap) in [(1, 1), (2, 1), (3, 2), (4, 4)] {
                let mut b = treepool::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .max_inflight(cap);
                if borrowed {
                    b = b.use_current_thread();
                }
                let x = b.build().unwrap();
                const DEPTH: u32 = 7;
                let per: Vec<Vec<AtomicUsize>> = (0..threads)
                    .map(|_| {
                        (0..(1usize << (DEPTH + 1)))
                            .map(|_| AtomicUsize::new(0))
                            .collect()
                    })
                    .collect();
                let shape2 = AtomicUsize::new(0);
                let leaves = x.broadcast(|ctx| {
                    let i = ctx.index();
                    let started = AtomicBool::new(false);
                    let (n, ()) = treepool::join(
                        || {
                            let n = random_tree(i as u64 + 99, 0, DEPTH, &per[i]);
                            y.install(|| spin_until(|| started.load(SeqCst)));
                            n
                        },
                        || {
                            started.store(true, SeqCst);
                            shape2.fetch_add(1, SeqCst);
                        },
                    );
                    n
                });
                assert_eq!(shape2.load(SeqCst), threads);
                for i in 0..threads {
                    let mut joins = Vec::new();
                    let expect = random_tree_seq(i as u64 + 99, 0, DEPTH, &mut joins);
                    assert_eq!(leaves[i], expect);
                    for &id in &joins {
                        assert_eq!(per[i][id].load(SeqCst), 1, "worker {i} node {id}");
                    }
                }
                // Joins inside a plain call of a borrowed pool too.
                let runs: Vec<AtomicUsize> =
                    (0..(1usize << 10)).map(|_| AtomicUsize::new(0)).collect();
                let mut joins = Vec::new();
                let expect = random_tree_seq(5, 0, 9, &mut joins);
                assert_eq!(x.install(|| random_tree(5, 0, 9, &runs)), expect);
                for &id in &joins {
                    assert_eq!(runs[id].load(SeqCst), 1);
                }
                let [s, _] = settle([&x, &y]);
                assert_b1_with_credit(&s, cap);
            }
        }
    });
}

/// A pool dropped while detached jobs are deep in joins (halves public, claimed, sleeping
/// leaves): every `b` still runs once, and the jobs finish.
#[test]
fn a_dropped_pool_finishes_every_half_of_its_detached_joins() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (4, 2), (4, 4)] {
            const DEPTH: u32 = 10;
            let runs: Arc<Vec<AtomicUsize>> = Arc::new(
                (0..(1usize << (DEPTH + 1)))
                    .map(|_| AtomicUsize::new(0))
                    .collect(),
            );
            let done = Arc::new(AtomicUsize::new(0));
            let x = pool(threads, cap);
            for k in 0..3u64 {
                let (runs, done) = (runs.clone(), done.clone());
                x.spawn(move || {
                    // Each job its own tree, offset so they do not share nodes.
                    let _ =
                        random_tree(k + 1000, 0, DEPTH - 2, &runs[(k as usize) << (DEPTH - 1)..]);
                    done.fetch_add(1, SeqCst);
                });
            }
            drop(x);
            spin_until(|| done.load(SeqCst) == 3);
            for k in 0..3u64 {
                let mut joins = Vec::new();
                random_tree_seq(k + 1000, 0, DEPTH - 2, &mut joins);
                for &id in &joins {
                    let r = runs[((k as usize) << (DEPTH - 1)) + id].load(SeqCst);
                    assert_eq!(r, 1, "{threads}/{cap}: job {k} node {id} ran {r} times");
                }
            }
        }
    });
}

/// `join_context` trees whose `a`s yield (`yield_now`, `yield_local`) and whose `a` waits by
/// yielding for its own `b` to run elsewhere (join_context makes `b` public at once): every `b`
/// runs once, on 2 to 4 threads.
fn ctx_tree(depth: u32, runs: &AtomicUsize) -> usize {
    if depth == 0 {
        let _ = treepool::yield_now();
        return 1;
    }
    let (l, r) = treepool::join_context(
        |_| {
            let _ = treepool::yield_local();
            ctx_tree(depth - 1, runs)
        },
        |_| {
            runs.fetch_add(1, SeqCst);
            let _ = treepool::yield_now();
            ctx_tree(depth - 1, runs)
        },
    );
    l + r
}

#[test]
fn join_context_with_yields_runs_every_b_once() {
    watchdog(120, || {
        for (threads, cap) in [(2, 1), (3, 2), (4, 1)] {
            let x = pool(threads, cap);
            let runs = AtomicUsize::new(0);
            assert_eq!(x.install(|| ctx_tree(10, &runs)), 1 << 10);
            assert_eq!(runs.load(SeqCst), (1 << 10) - 1);
            // `a` yields until `b` ran on another thread.
            for _ in 0..50 {
                let b_done = AtomicBool::new(false);
                let (spins, migrated) = x.install(|| {
                    treepool::join_context(
                        |_| {
                            let mut n = 0u64;
                            while !b_done.load(SeqCst) {
                                let _ = treepool::yield_now();
                                n += 1;
                            }
                            n
                        },
                        |c| {
                            b_done.store(true, SeqCst);
                            c.migrated()
                        },
                    )
                });
                let _ = spins;
                assert!(
                    migrated,
                    "b ran on the joiner's thread while a waited for it"
                );
            }
            let [s] = settle([&x]);
            assert_peak_bounds(&s, cap);
        }
    });
}

/// More joins nested on one thread than its split stack has slots (`HALF_SLOTS`, 2^18): past
/// that a join keeps its `b` nowhere and runs it after `a` (`join_unkept`); every `b` runs
/// once, on 1 and 2 threads.
#[test]
fn joins_nested_deeper_than_the_split_stack() {
    isolated!(300, || watchdog(280, || {
        for threads in [1, 2] {
            let x = treepool::ThreadPoolBuilder::new()
                .num_threads(threads)
                .max_inflight(1)
                .stack_size(1 << 30)
                .build()
                .unwrap();
            let n = (1 << 18) + 5_000;
            let runs = AtomicUsize::new(0);
            assert_eq!(x.install(|| nested(n, &runs)), n);
            assert_eq!(runs.load(SeqCst), n);
            settle([&x]);
        }
    }));
}
