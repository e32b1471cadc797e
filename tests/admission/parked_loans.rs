//! Jobs that finish while their token is out on loan (rule 4), with every kind of lender and
//! loan holder: detached and scope spawns that return before their spawns finish, stolen `join`
//! halves that spawn detached jobs, fifo and broadcast spawns, fallible scopes that cancel, and
//! calls from another pool (a root on credit, an in-place scope's credit root) whose detached
//! descendants outlive the call. The loan's holder takes over a finished lender's parked token
//! when it starts (`Lender::take_over_parked`), or when it returns the loan; either way every
//! job runs, no token is lost or made (B1 at every admission, B4 after), and the in-flight count
//! stays within B2.
//!
//! `TREEPOOL_PARKED_TREES` (default 60 per configuration) and `TREEPOOL_PARKED_SEED` pick the
//! trees.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use treepool::ThreadPool;

use crate::common::{self, Rng};

/// Two pools: jobs of each call into the other.
struct Cx {
    pools: [ThreadPool; 2],
    /// Closures made (counted before they can run) and closures that ran to their end.
    made: AtomicUsize,
    done: AtomicUsize,
    /// Nodes left to make in this tree.
    budget: AtomicUsize,
}

impl Cx {
    fn new(rng: &mut Rng) -> Arc<Cx> {
        let pool = |rng: &mut Rng| common::pool(rng.range(1, 3) as usize, rng.range(1, 3) as usize);
        Arc::new(Cx {
            pools: [pool(rng), pool(rng)],
            made: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            budget: AtomicUsize::new(0),
        })
    }

    /// Takes one node from the budget; false once it is spent.
    fn take(&self) -> bool {
        // Relaxed: a counter; the tree's size only needs a bound.
        self.budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
            .is_ok()
    }

    /// Counts a closure made, and returns the guard that counts it done when it is dropped
    /// (at its end, or unrun: a cancelled fallible scope drops its spawns' closures).
    fn made(self: &Arc<Self>) -> Done {
        // Relaxed: read after the pools are idle, which their stats order.
        self.made.fetch_add(1, Ordering::Relaxed);
        Done(self.clone())
    }
}

/// Counts one closure done when dropped.
struct Done(Arc<Cx>);

impl Drop for Done {
    fn drop(&mut self) {
        // Release: pairs with the acquire load of the final check.
        self.0.done.fetch_add(1, Ordering::Release);
    }
}

/// A node of pool `p`: a shape picked by `seed`, each child a node of the same tree.
fn node(cx: &Arc<Cx>, p: usize, seed: u64, depth: u32) {
    let mut rng = Rng::new(seed);
    if depth == 0 || !cx.take() {
        common::spin_us(rng.range(0, 20));
        return;
    }
    let kid = |rng: &mut Rng| rng.next();
    let q = 1 - p;
    match rng.range(0, 9) {
        // Detached spawn-first chain: spawn, then return at once (the child holds the loan).
        0 | 1 => {
            for _ in 0..rng.range(1, 3) {
                let (cx2, s, done) = (cx.clone(), kid(&mut rng), cx.made());
                treepool::spawn(move || {
                    node(&cx2, p, s, depth - 1);
                    drop(done);
                });
            }
        }
        // Scope bodies that spawn, then return before their spawns finish.
        2 => {
            let kids: Vec<u64> = (0..rng.range(1, 3)).map(|_| kid(&mut rng)).collect();
            treepool::scope(|s| {
                for k in kids {
                    let cx = cx.clone();
                    s.spawn(move |s| {
                        let mut rng = Rng::new(k);
                        let (a, b) = (rng.next(), rng.next());
                        let cx2 = cx.clone();
                        s.spawn(move |_| node(&cx2, p, a, depth - 1));
                        let (cx3, done) = (cx.clone(), cx.made());
                        treepool::spawn(move || {
                            node(&cx3, p, b, depth - 1);
                            drop(done);
                        });
                    });
                }
            });
        }
        // A join whose `b` (stolen or not) spawns detached jobs and returns.
        3 => {
            let (a, b) = (kid(&mut rng), kid(&mut rng));
            let spin = rng.range(0, 50);
            treepool::join(
                || {
                    common::spin_us(spin);
                    node(cx, p, a, depth - 1)
                },
                || {
                    let (cx2, done) = (cx.clone(), cx.made());
                    treepool::spawn(move || {
                        node(&cx2, p, b, depth - 1);
                        drop(done);
                    });
                    common::spin_us(spin / 2);
                },
            );
        }
        // Fifo spawns, detached and in a scope body that returns first.
        4 => {
            for _ in 0..rng.range(1, 3) {
                let (cx2, s, done) = (cx.clone(), kid(&mut rng), cx.made());
                treepool::spawn_fifo(move || {
                    node(&cx2, p, s, depth - 1);
                    drop(done);
                });
            }
            let k = kid(&mut rng);
            treepool::scope_fifo(|s| {
                let cx = cx.clone();
                s.spawn_fifo(move |_| {
                    let (cx2, done) = (cx.clone(), cx.made());
                    treepool::spawn_fifo(move || {
                        node(&cx2, p, k, depth - 1);
                        drop(done);
                    });
                });
            });
        }
        // A broadcast spawn whose runs spawn detached jobs and return.
        5 => {
            let (cx2, s) = (cx.clone(), kid(&mut rng));
            let done = Arc::new(cx.made());
            cx.pools[p].spawn_broadcast(move |ctx| {
                let _keep = done.clone();
                if ctx.index() == 0 {
                    let (cx3, done) = (cx2.clone(), cx2.made());
                    treepool::spawn(move || {
                        node(&cx3, p, s, depth - 1);
                        drop(done);
                    });
                }
            });
        }
        // A fallible scope that may cancel: its spawns spawn detached jobs and return.
        6 => {
            let kids: Vec<(u64, bool)> = (0..rng.range(1, 3))
                .map(|_| (kid(&mut rng), rng.range(0, 2) == 0))
                .collect();
            let _ = treepool::try_scope(|s| {
                for (k, fails) in kids {
                    let (cx2, done) = (cx.clone(), cx.made());
                    s.spawn(move |_| {
                        let (cx3, inner) = (cx2.clone(), cx2.made());
                        treepool::spawn(move || {
                            node(&cx3, p, k, depth - 1);
                            drop(inner);
                        });
                        drop(done);
                        if fails {
                            Err(k)
                        } else {
                            Ok(())
                        }
                    });
                }
                Ok::<(), u64>(())
            });
        }
        // A call into the other pool (a root on this job's credit) that spawns detached jobs
        // there and returns before they finish.
        7 => {
            let (cx2, s) = (cx.clone(), kid(&mut rng));
            cx.pools[q].install(move || {
                let (cx3, done) = (cx2.clone(), cx2.made());
                treepool::spawn(move || {
                    node(&cx3, q, s, depth - 1);
                    drop(done);
                });
            });
        }
        // An in-place scope of the other pool (its credit root is this call's) whose jobs spawn
        // detached jobs that outlive the scope.
        _ => {
            let kids: Vec<u64> = (0..rng.range(1, 3)).map(|_| kid(&mut rng)).collect();
            cx.pools[q].in_place_scope(|s| {
                for k in kids {
                    let cx = cx.clone();
                    s.spawn(move |_| {
                        let (cx2, done) = (cx.clone(), cx.made());
                        treepool::spawn(move || {
                            node(&cx2, q, k, depth - 1);
                            drop(done);
                        });
                    });
                }
            });
        }
    }
}

/// Runs one tree from a thread outside both pools, waits for its last detached job, and checks
/// B4 on both pools and B1 on their peaks (with the calls from the other pool's jobs).
fn run_tree(seed: u64) {
    let mut rng = Rng::new(seed);
    let cx = Cx::new(&mut rng);
    cx.budget
        .store(rng.range(20, 300) as usize, Ordering::Relaxed);
    let depth = rng.range(3, 12) as u32;
    let p = rng.range(0, 1) as usize;
    let root = rng.next();
    {
        let cx2 = cx.clone();
        cx.pools[p].install(move || node(&cx2, p, root, depth));
    }
    // Acquire: pairs with `Done`'s release.
    common::spin_until(|| {
        cx.done.load(Ordering::Acquire) == cx.made.load(Ordering::Relaxed)
            && Arc::strong_count(&cx) == 1
    });
    let stats = common::settle([&cx.pools[0], &cx.pools[1]]);
    for (i, st) in stats.iter().enumerate() {
        let cap = cx.pools[i].max_inflight();
        assert!(
            st.peak_executing <= cap + st.peak_calls_in,
            "tree {seed:#x} pool {i}: B1 peak {st:?}"
        );
        assert_eq!(st.calls_in, 0, "tree {seed:#x} pool {i}: {st:?}");
        assert!(
            st.peak_inflight <= (cap + st.peak_calls_in) * st.peak_depth.max(1),
            "tree {seed:#x} pool {i}: B2 peak {st:?}"
        );
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

/// See the module doc. A hang is reported by the watchdog; a failure names its tree's seed.
#[test]
fn finished_lenders_of_every_kind_release_their_parked_tokens() {
    let trees = env_u64("TREEPOOL_PARKED_TREES", 60);
    let base = env_u64("TREEPOOL_PARKED_SEED", 0x9A2C_0000);
    common::watchdog(60 + trees / 2, move || {
        for seed in base..base + trees {
            run_tree(seed);
        }
    });
}
