//! The lending token table seen from outside: the invariants B1–B5 over many tree shapes,
//! thread counts and caps, with user-side counters and watchdogs. Tests assert invariants, not
//! timings.

use crate::common;
use crate::common::{assert_bounds, assert_idle, pool, spin_until, watchdog, Rng};

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// User-side counts of started-but-unfinished jobs, and the deepest helping nest on a thread.
#[derive(Default)]
struct Probe {
    alive: AtomicUsize,
    peak_alive: AtomicUsize,
    leaves_running: AtomicUsize,
    peak_leaves: AtomicUsize,
    peak_nest: AtomicUsize,
    jobs: AtomicUsize,
}

thread_local! {
    /// Job frames on this thread's stack right now.
    static NEST: Cell<usize> = const { Cell::new(0) };
}

impl Probe {
    /// Runs `f` as one counted job, checking the pool's bounds on entry.
    fn job<R>(
        &self,
        pool_stats: impl Fn() -> treepool::Stats,
        cap: usize,
        f: impl FnOnce() -> R,
    ) -> R {
        let now = self.alive.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_alive.fetch_max(now, Ordering::SeqCst);
        self.jobs.fetch_add(1, Ordering::SeqCst);
        let nest = NEST.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        self.peak_nest.fetch_max(nest, Ordering::SeqCst);
        assert_bounds(&pool_stats(), cap);
        let r = f();
        NEST.with(|n| n.set(n.get() - 1));
        self.alive.fetch_sub(1, Ordering::SeqCst);
        r
    }

    fn leaf(&self) {
        let now = self.leaves_running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_leaves.fetch_max(now, Ordering::SeqCst);
        std::hint::black_box((0..200).sum::<u64>());
        self.leaves_running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A node of depth `depth` (edges below it) that spawns `fan_out` children in a nested scope
/// and waits for them, like the seed's `node`.
fn node(pool: &treepool::ThreadPool, probe: &Probe, cap: usize, depth: u32, fan_out: usize) {
    probe.job(
        || pool.stats(),
        cap,
        || {
            if depth == 0 {
                probe.leaf();
            } else {
                treepool::scope(|s| {
                    for _ in 0..fan_out {
                        s.spawn(|_| node(pool, probe, cap, depth - 1, fan_out));
                    }
                });
            }
        },
    );
}

/// The seed's table of shapes: (cap, depth, fan-out).
const SHAPES: [(usize, u32, usize); 7] = [
    (2, 3, 2),
    (1, 20, 1),
    (1, 10, 2),
    (2, 10, 2),
    (1, 1, 1000),
    (32, 1, 3000),
    (4, 3, 10),
];

#[test]
fn seed_shapes_keep_b1_to_b4_on_1_2_and_4_threads() {
    watchdog(300, || {
        for threads in [1, 2, 4] {
            for (cap, depth, fan_out) in SHAPES {
                let pool = Arc::new(pool(threads, cap));
                let probe = Probe::default();
                let p = pool.clone();
                pool.install(|| node(&p, &probe, cap, depth, fan_out));
                let stats = pool.stats();
                let levels = depth as usize + 1;
                let what =
                    format!("{threads} threads, cap {cap}, depth {depth}, fan-out {fan_out}");
                let tasks: usize = (0..=depth).map(|d| fan_out.pow(d)).sum();
                assert_eq!(probe.jobs.load(Ordering::SeqCst), tasks, "{what}");
                assert_eq!(stats.peak_depth, levels, "{what}");
                assert!(stats.peak_executing <= cap, "B1 {what}: {stats:?}");
                assert!(stats.peak_inflight <= cap * levels, "B2 {what}: {stats:?}");
                let user_peak = probe.peak_alive.load(Ordering::SeqCst);
                assert!(
                    user_peak <= stats.peak_inflight,
                    "{what}: user saw {user_peak}"
                );
                assert!(probe.peak_leaves.load(Ordering::SeqCst) <= cap, "{what}");
                if (cap, depth, fan_out) == (1, 20, 1) {
                    // The 21-level chain on one token reaches its bound exactly.
                    assert_eq!(stats.peak_inflight, 21, "{what}");
                    assert_eq!(user_peak, 21, "{what}");
                }
                assert_idle(&stats);
            }
        }
    });
}

#[test]
fn a_spawn_loop_never_has_more_than_cap_children_admitted() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 2), (4, 3), (2, 6)] {
            let pool = Arc::new(pool(threads, cap));
            let alive = AtomicUsize::new(0);
            let peak = AtomicUsize::new(0);
            let peak_admitted = AtomicUsize::new(0);
            pool.scope(|s| {
                for _ in 0..200 {
                    s.spawn(|_| {
                        let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::hint::black_box((0..500).sum::<u64>());
                        alive.fetch_sub(1, Ordering::SeqCst);
                    });
                    // Children admitted and unfinished: in flight minus the spawning root.
                    let admitted = pool.stats().inflight - 1;
                    peak_admitted.fetch_max(admitted, Ordering::SeqCst);
                }
            });
            let what = format!("{threads} threads, cap {cap}");
            assert!(peak.load(Ordering::SeqCst) <= cap, "{what}");
            assert!(peak_admitted.load(Ordering::SeqCst) <= cap, "{what}");
            assert!(
                pool.stats().peak_inflight <= cap + 1,
                "{what}: {:?}",
                pool.stats()
            );
            assert_idle(&pool.stats());
        }
    });
}

#[test]
fn the_seed_indexer_holds_at_most_cap_files() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 4), (4, 4)] {
            let pool = pool(threads, cap);
            let files_alive = AtomicUsize::new(0);
            let peak_files = AtomicUsize::new(0);
            let checksum = AtomicUsize::new(0);
            pool.scope(|walk| {
                for i in 0..300usize {
                    let (files_alive, peak_files, checksum) =
                        (&files_alive, &peak_files, &checksum);
                    walk.spawn(move |_| {
                        let contents = vec![(i % 251) as u8; 100_000];
                        let now = files_alive.fetch_add(1, Ordering::SeqCst) + 1;
                        peak_files.fetch_max(now, Ordering::SeqCst);
                        let (left, right) = contents.split_at(50_000);
                        treepool::scope(|chunks| {
                            for half in [left, right] {
                                chunks.spawn(move |_| {
                                    let sum: usize = half.iter().map(|&b| b as usize).sum();
                                    checksum.fetch_add(sum, Ordering::Relaxed);
                                });
                            }
                        });
                        files_alive.fetch_sub(1, Ordering::SeqCst);
                        drop(contents);
                    });
                }
            });
            let expected: usize = (0..300usize).map(|i| (i % 251) * 100_000).sum();
            assert_eq!(checksum.into_inner(), expected);
            let peak = peak_files.into_inner();
            assert!(
                peak <= cap,
                "{threads} threads cap {cap}: {peak} files in flight"
            );
            assert_idle(&pool.stats());
        }
    });
}

#[test]
fn a_parked_token_waits_for_the_detached_child_that_outlives_its_parent() {
    watchdog(60, || {
        let pool = Arc::new(pool(2, 1));
        let release = Arc::new(AtomicBool::new(false));
        let child_running = Arc::new(AtomicBool::new(false));
        let (r, c) = (release.clone(), child_running.clone());
        // The parent lends its only token to a detached child and returns while it runs.
        pool.install(move || {
            treepool::spawn(move || {
                c.store(true, Ordering::SeqCst);
                spin_until(|| r.load(Ordering::SeqCst));
            });
        });
        spin_until(|| child_running.load(Ordering::SeqCst));
        let stats = pool.stats();
        assert_eq!(
            stats.inflight, 1,
            "the parent finished, the child runs: {stats:?}"
        );
        assert_eq!(
            stats.tokens_in_use, 1,
            "the token is parked, not released: {stats:?}"
        );
        // Another root must wait for that token.
        let second_ran = Arc::new(AtomicBool::new(false));
        let (p, s) = (pool.clone(), second_ran.clone());
        let waits_before = pool.stats().admission_waits;
        let other = std::thread::spawn(move || p.install(move || s.store(true, Ordering::SeqCst)));
        spin_until(|| pool.stats().admission_waits > waits_before);
        assert!(
            !second_ran.load(Ordering::SeqCst),
            "admitted while the token was parked"
        );
        release.store(true, Ordering::SeqCst);
        other.join().unwrap();
        assert!(second_ran.load(Ordering::SeqCst));
        common::settle([&pool]);
    });
}

#[test]
fn panics_anywhere_leave_the_pool_idle() {
    watchdog(60, || {
        let quiet = |f: &dyn Fn()| {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        };
        for (threads, cap) in [(1, 1), (2, 2), (4, 3)] {
            let pool = pool(threads, cap);
            quiet(&|| {
                pool.scope(|s| {
                    for i in 0..50 {
                        s.spawn(move |s| {
                            s.spawn(|_| {});
                            if i % 7 == 0 {
                                panic!("scope job");
                            }
                        });
                    }
                })
            });
            assert_idle(&pool.stats());
            quiet(&|| {
                pool.install(|| treepool::join(|| panic!("a"), || treepool::join(|| 1, || 2)));
            });
            quiet(&|| {
                pool.install(|| treepool::join(|| 1, || -> u8 { panic!("b") }));
            });
            quiet(&|| pool.install(|| panic!("install")));
            quiet(&|| pool.scope(|_| panic!("body")));
            assert_idle(&pool.stats());
        }
    });
}

/// One random tree mixing join, nested scopes, rayon-style spawns and detached spawns.
fn random_tree<'s>(
    s: &treepool::Scope<'s>,
    pool: &'s treepool::ThreadPool,
    probe: &'s Probe,
    detached: &'s Arc<AtomicUsize>,
    cap: usize,
    seed: u64,
    depth: u32,
) {
    let mut rng = Rng::new(seed);
    probe.job(
        || pool.stats(),
        cap,
        || {
            if depth == 0 {
                probe.leaf();
                return;
            }
            match rng.range(0, 3) {
                0 => {
                    // join, each half a nested scope with one spawned (counted) job
                    let (a, b) = (rng.next(), rng.next());
                    treepool::join(
                        || {
                            treepool::scope(|s2| {
                                s2.spawn(move |s3| {
                                    random_tree(s3, pool, probe, detached, cap, a, depth - 1)
                                })
                            })
                        },
                        || {
                            treepool::scope(|s2| {
                                s2.spawn(move |s3| {
                                    random_tree(s3, pool, probe, detached, cap, b, depth - 1)
                                })
                            })
                        },
                    );
                }
                1 => {
                    // rayon-style: spawn on the outer scope and return without waiting
                    for _ in 0..rng.range(1, 4) {
                        let child = rng.next();
                        s.spawn(move |s| {
                            random_tree(s, pool, probe, detached, cap, child, depth - 1)
                        });
                    }
                }
                2 => {
                    // nested scope that waits for its children
                    let seeds: Vec<u64> = (0..rng.range(1, 3)).map(|_| rng.next()).collect();
                    treepool::scope(|inner| {
                        for child in seeds {
                            inner.spawn(move |s| {
                                random_tree(s, pool, probe, detached, cap, child, depth - 1)
                            });
                        }
                    });
                }
                _ => {
                    // a detached spawn that outlives this job
                    let d = detached.clone();
                    d.fetch_add(1, Ordering::SeqCst);
                    treepool::spawn(move || {
                        std::hint::black_box((0..1000).sum::<u64>());
                        d.fetch_sub(1, Ordering::SeqCst);
                    });
                    let child = rng.next();
                    s.spawn(move |s| random_tree(s, pool, probe, detached, cap, child, depth - 1));
                }
            }
        },
    );
}

#[test]
fn random_trees_over_random_caps_and_threads() {
    watchdog(300, || {
        let mut rng = Rng::new(2026);
        for round in 0..60 {
            let threads = rng.range(1, 4) as usize;
            let cap = rng.range(1, 6) as usize;
            let seed = rng.next();
            let pool = pool(threads, cap);
            let probe = Probe::default();
            let detached = Arc::new(AtomicUsize::new(0));
            pool.scope(|s| random_tree(s, &pool, &probe, &detached, cap, seed, 6));
            spin_until(|| detached.load(Ordering::SeqCst) == 0);
            common::wait_idle(&pool);
            let stats = pool.stats();
            let what = format!("round {round}: {threads} threads, cap {cap}, seed {seed}");
            assert!(stats.peak_executing <= cap, "B1 {what}: {stats:?}");
            assert!(
                stats.peak_inflight <= cap * stats.peak_depth,
                "B2 {what}: {stats:?}"
            );
            assert!(
                probe.peak_alive.load(Ordering::SeqCst) <= stats.peak_inflight,
                "{what}"
            );
            assert!(probe.peak_leaves.load(Ordering::SeqCst) <= cap, "{what}");
            assert_idle(&stats);
        }
    });
}

#[test]
fn helping_nests_no_deeper_than_the_jobs_in_flight() {
    // Each of 400 siblings waits on a nested scope. A waiting thread that helped with any pending
    // sibling (as rayon's does) could stack every sibling's frame on one thread; here a waiting
    // thread starts only admitted jobs, so its nest stays within the jobs in flight (B5).
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (1, 2), (2, 3)] {
            let pool = Arc::new(pool(threads, cap));
            let probe = Probe::default();
            let p = pool.clone();
            pool.install(|| {
                probe.job(
                    || p.stats(),
                    cap,
                    || {
                        treepool::scope(|s| {
                            for _ in 0..400 {
                                s.spawn(|_| node(&p, &probe, cap, 2, 2));
                            }
                        })
                    },
                )
            });
            let stats = pool.stats();
            let nest = probe.peak_nest.load(Ordering::SeqCst);
            assert!(
                nest <= stats.peak_inflight,
                "nest {nest} > in flight {stats:?}"
            );
            assert!(
                nest <= cap * 4,
                "nest {nest} beyond cap x levels ({threads} threads, cap {cap})"
            );
            assert_idle(&stats);
        }
    });
}

#[test]
fn admission_counters_add_up() {
    watchdog(60, || {
        let pool = pool(2, 3);
        let probe = Probe::default();
        pool.install(|| node(&pool, &probe, 3, 3, 4));
        let stats = pool.stats();
        let jobs = probe.jobs.load(Ordering::SeqCst) as u64;
        // Every node is a job (the root is the install job); stolen join halves are none here.
        assert_eq!(
            stats.admitted_on_loan + stats.admitted_from_pool,
            jobs,
            "{stats:?}"
        );
        assert!(stats.admission_waits <= jobs);
    });
}
