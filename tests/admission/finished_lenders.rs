//! Chains of jobs that finish while lending (rule 4): a token parked by a finished job goes back
//! where it came from (the pool, a call's credit, or the loan of a lender still running), once,
//! however many finished lenders a later link took over (`Lender::take_over_parked`) on the way,
//! and whatever the thread that finishes the chain is doing (a spawn waiting in its help-first
//! loop keeps the token it frees).

use crate::common;
use crate::common::{assert_idle, assert_peak_bounds, pool, spin_until, watchdog, Rng};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// A flag the last link of a chain raises once it runs, and waits on until released.
#[derive(Default)]
struct Gate {
    running: AtomicBool,
    release: AtomicBool,
}

impl Gate {
    fn hold(&self) {
        self.running.store(true, Ordering::SeqCst);
        spin_until(|| self.release.load(Ordering::SeqCst));
    }
}

/// A detached chain: each link spawns the next one (`treepool::spawn`, on its own loan) and
/// returns at once, so every link but the last finishes while lending; the last one holds
/// `gate`, and `done` counts the links that ran.
fn detached_chain(links: usize, gate: Arc<Gate>, done: Arc<AtomicUsize>) {
    done.fetch_add(1, Ordering::SeqCst);
    if links == 1 {
        gate.hold();
        return;
    }
    treepool::spawn(move || detached_chain(links - 1, gate, done));
}

/// Waits until the chain's last link holds its gate, checks what `pool` shows then (`expect`:
/// pool tokens and calls in, the chain's token included), releases it, and waits until every
/// one of `links` ran and the pool is idle.
fn hold_and_release(
    pool: &treepool::ThreadPool,
    gate: &Gate,
    done: &AtomicUsize,
    links: usize,
    expect: (usize, usize),
) {
    spin_until(|| gate.running.load(Ordering::SeqCst));
    let stats = pool.stats();
    assert_eq!(
        (stats.tokens_in_use, stats.calls_in),
        expect,
        "(pool tokens, calls in) while the last link runs: {stats:?}"
    );
    assert_eq!(
        stats.inflight, 1,
        "only the last link is in flight: {stats:?}"
    );
    gate.release.store(true, Ordering::SeqCst);
    spin_until(|| done.load(Ordering::SeqCst) == links);
    common::settle([pool]);
}

#[test]
fn a_pool_token_parked_down_a_chain_of_finished_lenders_is_released_once() {
    watchdog(60, || {
        let pool = Arc::new(pool(2, 1));
        for links in [2, 3, 8] {
            let (gate, done) = (Arc::<Gate>::default(), Arc::new(AtomicUsize::new(0)));
            let (g, d) = (gate.clone(), done.clone());
            // The root lends its only pool token to the first link and returns: every finished
            // link above the running one is parked (or taken over by the link below it).
            pool.install(move || treepool::spawn(move || detached_chain(links, g, d)));
            spin_until(|| gate.running.load(Ordering::SeqCst));
            // The token is still the chain's: a root from outside waits for it.
            let ran = Arc::new(AtomicBool::new(false));
            let waits = pool.stats().admission_waits;
            let (p, r) = (pool.clone(), ran.clone());
            let other =
                std::thread::spawn(move || p.install(move || r.store(true, Ordering::SeqCst)));
            spin_until(|| pool.stats().admission_waits > waits);
            assert!(!ran.load(Ordering::SeqCst), "admitted on a parked token");
            hold_and_release(&pool, &gate, &done, links, (1, 0));
            other.join().unwrap();
            assert!(ran.load(Ordering::SeqCst));
            let stats = pool.stats();
            assert_peak_bounds(&stats, 1);
        }
    });
}

#[test]
fn a_credit_parked_down_a_chain_of_finished_lenders_goes_back_to_the_credit() {
    watchdog(60, || {
        let caller = pool(1, 1);
        let callee = pool(2, 1);
        for links in [2, 3, 8] {
            let (gate, done) = (Arc::<Gate>::default(), Arc::new(AtomicUsize::new(0)));
            let (g, d) = (gate.clone(), done.clone());
            // A call from a job of `caller` runs a root of `callee` on the caller's credit; the
            // chain it starts outlives the call and holds the credit, never a pool token.
            caller.install(|| {
                callee.install(move || treepool::spawn(move || detached_chain(links, g, d)));
            });
            hold_and_release(&callee, &gate, &done, links, (0, 1));
            let stats = callee.stats();
            assert_eq!(stats.peak_executing, 1, "{stats:?}");
            assert_eq!(stats.admitted_from_pool, 0, "{stats:?}");
            common::settle([&caller]);
        }
    });
}

#[test]
fn a_loan_taken_over_from_finished_lenders_passes_to_the_running_lenders_next_child() {
    watchdog(60, || {
        let pool = Arc::new(pool(2, 1));
        let gate = Arc::new(Gate::default());
        let x_ran = Arc::new(AtomicBool::new(false));
        let (p, g, x) = (pool.clone(), gate.clone(), x_ran.clone());
        // R holds the only token. A and B (scope spawns made from inside the spawned job, as
        // rayon's `s.spawn` allows) return while lending, so C takes over their loans: C then
        // holds R's loan directly. R spawns X meanwhile, which waits for R's loan (rule 2);
        // when C's child D returns the loan, it must pass straight to X (rule 3).
        let root = std::thread::spawn(move || {
            p.scope(|s| {
                let g1 = g.clone();
                s.spawn(move |s| {
                    s.spawn(move |s| {
                        s.spawn(move |s| {
                            let g2 = g1.clone();
                            s.spawn(move |_| g2.hold());
                        });
                    });
                });
                spin_until(|| g.running.load(Ordering::SeqCst));
                s.spawn(move |_| x.store(true, Ordering::SeqCst));
            })
        });
        spin_until(|| gate.running.load(Ordering::SeqCst));
        spin_until(|| pool.stats().admission_waits > 0);
        assert!(
            !x_ran.load(Ordering::SeqCst),
            "X admitted while the loan was out"
        );
        gate.release.store(true, Ordering::SeqCst);
        root.join().unwrap();
        assert!(x_ran.load(Ordering::SeqCst));
        let [stats] = common::settle([&*pool]);
        // R from the pool; A, B, C, D and X each on a loan of its parent's token.
        assert_eq!(
            (stats.admitted_from_pool, stats.admitted_on_loan),
            (1, 5),
            "{stats:?}"
        );
        assert_peak_bounds(&stats, 1);
    });
}

/// A link of a spawn-first chain in a scope: spawns the rest of the chain, then a leaf, then
/// returns; `jobs` counts the jobs that ran.
fn spawn_first_link<'s>(s: &treepool::Scope<'s>, links: usize, jobs: &'s AtomicUsize) {
    jobs.fetch_add(1, Ordering::SeqCst);
    if links == 0 {
        return;
    }
    s.spawn(move |s| spawn_first_link(s, links - 1, jobs));
    s.spawn(move |_| {
        jobs.fetch_add(1, Ordering::SeqCst);
    });
}

/// A detached subtree: a link that spawns `width` detached children (each a subtree one level
/// shallower) and returns; `jobs` counts the jobs that ran, `left` the ones still to run.
fn detached_tree(depth: usize, width: usize, jobs: Arc<AtomicUsize>, left: Arc<AtomicUsize>) {
    jobs.fetch_add(1, Ordering::SeqCst);
    if depth > 0 {
        for _ in 0..width {
            left.fetch_add(1, Ordering::SeqCst);
            let (j, l) = (jobs.clone(), left.clone());
            treepool::spawn(move || detached_tree(depth - 1, width, j, l));
        }
    }
    left.fetch_sub(1, Ordering::SeqCst);
}

/// Spawning loops whose help-first loops run links that finish while lending: the tokens those
/// links free (taken over from their finished lenders) are kept for the waiting spawn when they
/// may be, and every admission, token and place in the in-flight count adds up in the end.
#[test]
fn spawning_loops_over_chains_of_finished_lenders_add_up() {
    watchdog(240, || {
        let mut rng = Rng::new(0x7A4E_0F13);
        for round in 0..150 {
            let threads = rng.range(1, 4) as usize;
            let cap = rng.range(1, 3) as usize;
            let chains = rng.range(1, 12) as usize;
            let links = rng.range(1, 120) as usize;
            let (depth, width) = (rng.range(1, 4) as usize, rng.range(1, 3) as usize);
            let what = format!(
                "round {round}: {threads} threads, cap {cap}, {chains} chains of {links} links, \
                 detached trees {depth}x{width}"
            );
            let pool = pool(threads, cap);
            let jobs = AtomicUsize::new(0);
            let detached_jobs = Arc::new(AtomicUsize::new(0));
            let left = Arc::new(AtomicUsize::new(0));
            pool.scope(|s| {
                for i in 0..chains {
                    let jobs = &jobs;
                    if i % 3 == 2 {
                        let (j, l) = (detached_jobs.clone(), left.clone());
                        l.fetch_add(1, Ordering::SeqCst);
                        s.spawn(move |_| {
                            jobs.fetch_add(1, Ordering::SeqCst);
                            treepool::spawn(move || detached_tree(depth, width, j, l));
                        });
                    } else {
                        s.spawn(move |s| spawn_first_link(s, links, jobs));
                    }
                }
            });
            spin_until(|| left.load(Ordering::SeqCst) == 0);
            let [stats] = common::settle([&pool]);
            assert_idle(&stats);
            assert_peak_bounds(&stats, cap);
            // Every job but the scope's root (which the scope call runs from outside, on a pool
            // token) was spawned and admitted once; no join is used, so no join half is admitted.
            let ran = 1 + jobs.load(Ordering::SeqCst) + detached_jobs.load(Ordering::SeqCst);
            assert_eq!(
                stats.admitted_on_loan + stats.admitted_from_pool,
                ran as u64,
                "{what}: {stats:?}"
            );
        }
    });
}
