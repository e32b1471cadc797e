//! rayon-core's `join_context`, `yield_now`/`yield_local`, `current_thread_has_pending_tasks` and
//! `ThreadPool::current_thread_index`, checked against rayon-core's documented behaviour, with
//! the bounds and B4 through `Stats` and a watchdog on every test.

use crate::common;
use crate::common::{assert_idle, assert_peak_bounds, pool, settle, spin_until, watchdog};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use treepool::Yield;

/// `migrated()` is true exactly for a `b` that ran on another thread than its joiner, and
/// never for `a`; a recursive split on two threads migrates some `b`s.
#[test]
fn migrated_only_for_a_half_run_elsewhere() {
    watchdog(60, || {
        let pool = pool(2, 4);
        let wrong = Mutex::new(Vec::new());
        let moved = AtomicUsize::new(0);
        fn split(depth: u32, wrong: &Mutex<Vec<String>>, moved: &AtomicUsize) {
            if depth == 0 {
                return;
            }
            let joiner = treepool::current_thread_index();
            treepool::join_context(
                |a| {
                    if a.migrated() || treepool::current_thread_index() != joiner {
                        wrong.lock().unwrap().push(format!("a at depth {depth}"));
                    }
                    split(depth - 1, wrong, moved)
                },
                |b| {
                    let elsewhere = treepool::current_thread_index() != joiner;
                    if b.migrated() != elsewhere {
                        wrong.lock().unwrap().push(format!(
                            "b at depth {depth}: migrated {} elsewhere {elsewhere}",
                            b.migrated()
                        ));
                    }
                    if elsewhere {
                        moved.fetch_add(1, Ordering::Relaxed);
                    }
                    split(depth - 1, wrong, moved)
                },
            );
        }
        // Until a `b` has moved at least once (an idle worker asks, a join serves it).
        while moved.load(Ordering::Relaxed) == 0 {
            pool.install(|| split(12, &wrong, &moved));
        }
        assert!(
            wrong.lock().unwrap().is_empty(),
            "{:?}",
            wrong.lock().unwrap()
        );
        let stats = pool.stats();
        assert_peak_bounds(&stats, 4);
        settle([&pool]);
    });
}

/// A call from outside every pool is injected: both closures report `migrated`. On one thread
/// inside the pool nothing migrates.
#[test]
fn migrated_for_calls_from_outside() {
    watchdog(30, || {
        let (a, b) = treepool::join_context(|a| a.migrated(), |b| b.migrated());
        assert!(a && b, "an injected call migrates both: {a} {b}");
        let pool = pool(1, 1);
        let (a, b) = pool.install(|| treepool::join_context(|a| a.migrated(), |b| b.migrated()));
        assert!(!a && !b, "one thread: {a} {b}");
        assert_idle(&pool.stats());
    });
}

/// `yield_local` takes only the calling worker's own deque; `yield_now` steals. One job
/// spawns into its own deque and holds its thread; the other, on the second worker, yields.
#[test]
fn yield_local_never_steals_and_yield_now_does() {
    watchdog(60, || {
        let pool = pool(2, 64);
        let role = AtomicUsize::new(0);
        let spawned = AtomicBool::new(false);
        let checked = AtomicBool::new(false);
        let ran = AtomicUsize::new(0);
        let (local, global) = (Mutex::new(None), Mutex::new(None));
        pool.scope(|s| {
            for _ in 0..2 {
                s.spawn(|s| {
                    if role.fetch_add(1, Ordering::SeqCst) == 0 {
                        // The holder: eight jobs in its own deque, then it keeps its thread.
                        for _ in 0..8 {
                            s.spawn(|_| {
                                ran.fetch_add(1, Ordering::Relaxed);
                            });
                        }
                        spawned.store(true, Ordering::SeqCst);
                        spin_until(|| checked.load(Ordering::SeqCst));
                    } else {
                        // The yielder, necessarily on the other worker: the holder keeps its
                        // own, and it started while the holder ran or before.
                        spin_until(|| spawned.load(Ordering::SeqCst));
                        *local.lock().unwrap() = Some(treepool::yield_local());
                        *global.lock().unwrap() = Some(treepool::yield_now());
                        checked.store(true, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(*local.lock().unwrap(), Some(Some(Yield::Idle)));
        assert_eq!(*global.lock().unwrap(), Some(Some(Yield::Executed)));
        assert_eq!(ran.load(Ordering::Relaxed), 8);
        assert_peak_bounds(&pool.stats(), 64);
        assert_idle(&pool.stats());
    });
}

/// Yields inside join halves, scopes and spawned jobs, on one token: nothing waits on a yield,
/// so nothing deadlocks, every job runs once, and the bounds hold.
#[test]
fn yields_in_join_halves_at_one_token() {
    fn node(depth: u32, count: &AtomicUsize) {
        count.fetch_add(1, Ordering::Relaxed);
        if depth == 0 {
            let _ = treepool::yield_now();
            return;
        }
        treepool::scope(|s| {
            s.spawn(move |_| node(depth - 1, count));
            treepool::join(
                || {
                    let _ = treepool::yield_now();
                    node(depth - 1, count);
                },
                || {
                    let _ = treepool::yield_local();
                    node(depth - 1, count);
                },
            );
        });
    }
    for (threads, cap) in [(1, 1), (2, 1), (4, 1), (4, 2)] {
        watchdog(60, move || {
            let pool = pool(threads, cap);
            let count = AtomicUsize::new(0);
            pool.install(|| node(7, &count));
            // 3^0 + 3^1 + … + 3^7 nodes.
            assert_eq!(count.load(Ordering::Relaxed), (3usize.pow(8) - 1) / 2);
            assert_peak_bounds(&pool.stats(), cap);
            assert_idle(&pool.stats());
        });
    }
}

/// A yield runs an admitted job of the thread's own deque (a spawn queued on a loan) and then
/// finds nothing; outside every pool it is `None`, as are the pool methods on a thread that is
/// not one of that pool's workers.
#[test]
fn yield_runs_a_queued_spawn_then_is_idle() {
    watchdog(30, || {
        assert_eq!(treepool::yield_now(), None);
        assert_eq!(treepool::yield_local(), None);
        let pool = pool(1, 1);
        let other = common::pool(1, 1);
        let ran = AtomicBool::new(false);
        pool.scope(|s| {
            s.spawn(|_| ran.store(true, Ordering::SeqCst));
            assert_eq!(treepool::current_thread_has_pending_tasks(), Some(true));
            assert_eq!(pool.current_thread_has_pending_tasks(), Some(true));
            assert_eq!(pool.yield_local(), Some(Yield::Executed));
            assert!(ran.load(Ordering::SeqCst));
            assert_eq!(treepool::current_thread_has_pending_tasks(), Some(false));
            assert_eq!(treepool::yield_now(), Some(Yield::Idle));
            // From this pool's worker, the other pool is another pool.
            assert_eq!(other.yield_now(), None);
            assert_eq!(other.current_thread_has_pending_tasks(), None);
            assert_eq!(other.current_thread_index(), None);
            assert_eq!(pool.current_thread_index(), Some(0));
        });
        assert_eq!(pool.yield_now(), None);
        assert_eq!(pool.current_thread_index(), None);
        assert_eq!(treepool::current_thread_has_pending_tasks(), None);
        let stats = pool.stats();
        assert_eq!(stats.admission_waits, 0, "the spawn was admitted on a loan");
        assert_idle(&stats);
    });
}

/// `current_thread_has_pending_tasks` counts only work a yield can run: a `join` half kept by
/// its joiner is not, so rayon's idiom `while has_pending { yield_local() }` inside a join's
/// `a` ends (it spun for ever when private halves counted: issue 39). A spawn queued in the
/// thread's own deque is pending, and the idiom runs it.
#[test]
fn only_work_a_yield_can_run_is_pending() {
    watchdog(30, || {
        let pool = pool(1, 2);
        let (seen, ()) = pool.install(|| {
            treepool::join(
                || {
                    let before = treepool::current_thread_has_pending_tasks();
                    while treepool::current_thread_has_pending_tasks() == Some(true) {
                        treepool::yield_local();
                    }
                    before
                },
                || (),
            )
        });
        assert_eq!(seen, Some(false));
        let ran = AtomicBool::new(false);
        let seen = pool.install(|| {
            treepool::scope(|s| {
                s.spawn(|_| ran.store(true, Ordering::SeqCst));
                let seen = treepool::current_thread_has_pending_tasks();
                while treepool::current_thread_has_pending_tasks() == Some(true) {
                    treepool::yield_local();
                }
                seen
            })
        });
        assert_eq!(seen, Some(true));
        assert!(ran.load(Ordering::SeqCst));
        assert_idle(&pool.stats());
    });
}

/// `a` may wait for `b` to run on another worker (rayon-core's `join_context_second`): `b` is
/// offered to thieves at once, and then reports `migrated`.
#[test]
fn join_context_offers_b_at_once() {
    watchdog(60, || {
        let pool = pool(2, 4);
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = pool.install(|| crate::context_take_back::migrated_at_a_barrier(&barrier));
        assert!(!a && b, "a {a}, b {b}");
        assert_peak_bounds(&pool.stats(), 4);
        settle([&pool]);
    });
}
