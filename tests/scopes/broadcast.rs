//! `broadcast`, `spawn_broadcast` and `Scope::spawn_broadcast`: every worker runs the op exactly
//! once, on its own thread, with the jobs admitted through the token table (so fewer tokens than
//! threads, one token included, still reach every thread), from plain threads, from jobs, from
//! other pools' jobs, nested, and while the other workers wait for admission. Meant to run
//! under AddressSanitizer and `--cfg treepool_chaos` too (`.ci/run` does).

use crate::common::{
    assert_idle, assert_peak_bounds, borrowed_pool, describe, pool, settle, spin_until, wait_idle,
    watchdog,
};
use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{mpsc, Arc, Mutex};
use treepool::ThreadPoolBuilder;

/// Pool shapes with fewer, as many and more tokens than threads.
const SHAPES: [(usize, usize); 6] = [(1, 1), (2, 1), (4, 1), (4, 2), (3, 3), (4, 8)];

/// What one broadcast job saw: its context's index and count, and the thread it ran on.
fn seen(ctx: treepool::BroadcastContext<'_>) -> (usize, usize, Option<usize>) {
    (
        ctx.index(),
        ctx.num_threads(),
        treepool::current_thread_index(),
    )
}

/// Asserts that job `i` of a broadcast over `n` threads ran on worker `i`, once each.
fn assert_each_once(results: &[(usize, usize, Option<usize>)], n: usize) {
    assert_eq!(results.len(), n, "one result per thread: {results:?}");
    for (i, &(index, num_threads, thread)) in results.iter().enumerate() {
        assert_eq!((index, num_threads, thread), (i, n, Some(i)), "{results:?}");
    }
}

/// Asserts B1, B2 (peaks) and B4 on a pool no other pool called into.
fn assert_bounded_and_idle(p: &treepool::ThreadPool, cap: usize) {
    let [stats] = settle([p]);
    assert_peak_bounds(&stats, cap);
}

/// Asserts B1, B2 (peaks, with the credit of the calls that jobs of other pools made into it,
/// one at least) and B4 on `p`.
fn assert_bounded_with_calls_in_and_idle(p: &treepool::ThreadPool, cap: usize) {
    wait_idle(p);
    let stats = p.stats();
    assert!(
        stats.peak_calls_in >= 1,
        "the calls ran on credit: {stats:?}"
    );
    assert!(
        stats.peak_executing <= cap + stats.peak_calls_in,
        "{stats:?}"
    );
    assert!(
        stats.peak_inflight <= (cap + stats.peak_calls_in) * stats.peak_depth,
        "{stats:?}"
    );
    assert_idle(&stats);
    assert_eq!(stats.calls_in, 0, "{stats:?}");
}

#[test]
fn broadcast_from_a_plain_thread_reaches_every_thread_exactly_once() {
    watchdog(60, || {
        for (threads, cap) in SHAPES {
            let p = pool(threads, cap);
            for _ in 0..20 {
                assert_each_once(&p.broadcast(seen), threads);
            }
            let count = AtomicUsize::new(0); // borrowed from the stack
            p.broadcast(|_| count.fetch_add(1, Relaxed));
            assert_eq!(count.into_inner(), threads);
            assert_bounded_and_idle(&p, cap);
        }
    });
}

#[test]
fn broadcast_from_inside_a_job_reaches_every_thread_exactly_once() {
    watchdog(60, || {
        for (threads, cap) in SHAPES {
            let p = pool(threads, cap);
            // Inline in the calling job (free function and method), and from a scope's spawn.
            assert_each_once(&p.install(|| treepool::broadcast(seen)), threads);
            assert_each_once(&p.install(|| p.broadcast(seen)), threads);
            let from_spawn = Mutex::new(Vec::new());
            p.scope(|s| {
                for _ in 0..3 {
                    s.spawn(|_| {
                        // Not under the lock: the broadcast's waits run other jobs here.
                        let results = treepool::broadcast(seen);
                        from_spawn.lock().unwrap().push(results);
                    });
                }
            });
            for results in from_spawn.into_inner().unwrap() {
                assert_each_once(&results, threads);
            }
            assert_bounded_and_idle(&p, cap);
        }
    });
}

#[test]
fn nested_broadcasts_reach_every_thread_from_every_thread() {
    watchdog(60, || {
        for (threads, cap) in [(4, 1), (3, 2), (2, 1)] {
            let p = pool(threads, cap);
            let all = p.broadcast(|outer| {
                let inner = treepool::broadcast(seen);
                (seen(outer), inner)
            });
            assert_eq!(all.len(), threads);
            for (i, (outer, inner)) in all.iter().enumerate() {
                assert_eq!(*outer, (i, threads, Some(i)));
                assert_each_once(inner, threads);
            }
            assert_bounded_and_idle(&p, cap);
        }
    });
}

#[test]
fn broadcast_from_another_pools_job_runs_on_credit_and_back() {
    watchdog(60, || {
        let a = pool(2, 1);
        let b = pool(3, 1);
        // A job of A broadcasts into B; each of B's jobs broadcasts back into A (A -> B -> A).
        let all = a.install(|| b.broadcast(|ctx| (seen(ctx), a.broadcast(seen))));
        assert_eq!(all.len(), 3);
        for (i, (outer, inner)) in all.iter().enumerate() {
            assert_eq!(*outer, (i, 3, Some(i)));
            assert_each_once(inner, 2);
        }
        for p in [&a, &b] {
            assert_bounded_with_calls_in_and_idle(p, 1);
        }
    });
}

#[test]
fn broadcast_raises_one_panic_after_every_thread_ran() {
    watchdog(60, || {
        for (threads, cap) in [(4, 1), (4, 4), (1, 1)] {
            let p = pool(threads, cap);
            let count = AtomicUsize::new(0);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                p.broadcast(|ctx| {
                    count.fetch_add(1, Relaxed);
                    if ctx.index() % 2 == 0 {
                        std::panic::panic_any(format!("broadcast boom {}", ctx.index()));
                    }
                })
            }));
            let payload = result.expect_err("the panic propagates");
            assert_eq!(
                count.load(Relaxed),
                threads,
                "every thread ran before the raise"
            );
            let message = describe(payload);
            assert!(
                message.starts_with("broadcast boom "),
                "payload kept: {message}"
            );
            // The pool is fine afterwards.
            assert_each_once(&p.broadcast(seen), threads);
            assert_bounded_and_idle(&p, cap);
        }
    });
}

#[test]
fn a_broadcast_job_runs_after_its_workers_own_deque() {
    watchdog(30, || {
        // One thread: deterministic. The spawn is in the worker's deque when the broadcast
        // starts; the broadcast's job waits for the deque to run dry (as in rayon).
        let p = pool(1, 2);
        let (tx, rx) = mpsc::channel();
        p.install(move || {
            treepool::spawn(move || tx.send(22).unwrap());
            treepool::broadcast(|_| {});
            assert_eq!(
                rx.try_recv(),
                Ok(22),
                "the spawn ran before the broadcast job"
            );
        });
        assert_bounded_and_idle(&p, 2);
    });
}

/// Receives one `seen` tuple per thread from a `spawn_broadcast` and checks them.
fn assert_spawned_each_once(rx: &mpsc::Receiver<(usize, usize, Option<usize>)>, n: usize) {
    let mut results: Vec<_> = (0..n).map(|_| rx.recv().unwrap()).collect();
    results.sort();
    assert_each_once(&results, n);
}

#[test]
fn spawn_broadcast_runs_once_on_every_thread_from_anywhere() {
    watchdog(60, || {
        for (threads, cap) in SHAPES {
            let p = pool(threads, cap);
            let other = pool(2, 1);
            let (tx, rx) = mpsc::channel();
            // From a plain thread.
            let sender = tx.clone();
            p.spawn_broadcast(move |ctx| sender.send(seen(ctx)).unwrap());
            assert_spawned_each_once(&rx, threads);
            // From inside a job of the pool (its children, waiting for admission in turn).
            let sender = tx.clone();
            p.install(|| treepool::spawn_broadcast(move |ctx| sender.send(seen(ctx)).unwrap()));
            assert_spawned_each_once(&rx, threads);
            // From a job of another pool (one root on its credit, which makes the spawns).
            let sender = tx.clone();
            other.install(|| p.spawn_broadcast(move |ctx| sender.send(seen(ctx)).unwrap()));
            assert_spawned_each_once(&rx, threads);
            assert_bounded_with_calls_in_and_idle(&p, cap);
            settle([&other]);
        }
    });
}

#[test]
fn spawn_broadcast_panics_go_to_the_handler_once_per_thread() {
    watchdog(60, || {
        let (panic_tx, panic_rx) = mpsc::channel();
        let panic_tx = Mutex::new(panic_tx);
        let p = treepool::ThreadPoolBuilder::new()
            .num_threads(4)
            .max_inflight(1)
            .panic_handler(move |payload| panic_tx.lock().unwrap().send(describe(payload)).unwrap())
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        p.spawn_broadcast(move |ctx| {
            tx.send(ctx.index()).unwrap();
            if ctx.index() % 2 == 0 {
                std::panic::panic_any(format!("spawned boom {}", ctx.index()));
            }
        });
        // Every sender dropped: every job ran (and handed its panic over before it finished).
        let mut ran: Vec<usize> = rx.iter().collect();
        ran.sort();
        assert_eq!(ran, [0, 1, 2, 3]);
        assert_bounded_and_idle(&p, 1);
        let mut panics: Vec<String> = panic_rx.try_iter().collect();
        panics.sort();
        assert_eq!(panics, ["spawned boom 0", "spawned boom 2"]);
    });
}

#[test]
fn spawn_broadcast_then_drop_runs_every_job() {
    watchdog(60, || {
        for _ in 0..20 {
            let p = pool(4, 1);
            let (tx, rx) = mpsc::channel();
            p.spawn_broadcast(move |ctx| {
                std::hint::black_box((0..1000u64).sum::<u64>());
                tx.send(ctx.index()).unwrap();
            });
            drop(p);
            let mut ran: Vec<usize> = rx.iter().collect();
            ran.sort();
            assert_eq!(ran, [0, 1, 2, 3]);
        }
    });
}

/// A `Scope::spawn_broadcast` body that borrows from the test's stack: counts its thread in
/// `hits`, notes whether it ran on its own worker, and spawns a child that counts itself.
fn tally<'s>(
    hits: &'s [AtomicUsize],
    children: &'s AtomicUsize,
    on_own_thread: &'s AtomicBool,
) -> impl Fn(&treepool::Scope<'s>, treepool::BroadcastContext<'_>) + Send + Sync + Copy + 's {
    move |s, ctx| {
        if treepool::current_thread_index() != Some(ctx.index()) {
            on_own_thread.store(false, Relaxed);
        }
        hits[ctx.index()].fetch_add(1, Relaxed);
        s.spawn(|_| {
            children.fetch_add(1, Relaxed);
        });
    }
}

#[test]
fn scope_spawn_broadcast_borrows_from_the_stack_from_anywhere() {
    watchdog(60, || {
        for (threads, cap) in SHAPES {
            let p = pool(threads, cap);
            let other = pool(2, 1);
            let hits: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
            let children = AtomicUsize::new(0);
            let on_own_thread = AtomicBool::new(true);
            let body = tally(&hits, &children, &on_own_thread);
            p.scope(|s| {
                // From the scope's own job, from a plain thread inside the scope, and from a
                // job of another pool.
                s.spawn_broadcast(body);
                std::thread::scope(|t| {
                    t.spawn(|| s.spawn_broadcast(body));
                });
                other.install(|| s.spawn_broadcast(body));
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == 3), "{hits:?}");
            assert_eq!(children.load(Relaxed), 3 * threads);
            assert!(
                on_own_thread.load(Relaxed),
                "each job ran on its own worker"
            );
            assert_bounded_and_idle(&p, cap);
            settle([&other]);
        }
    });
}

#[test]
fn scope_spawn_broadcast_panics_are_raised_by_the_scope() {
    watchdog(30, || {
        let p = pool(4, 1);
        let ran = AtomicUsize::new(0);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.scope(|s| {
                s.spawn_broadcast(|_, ctx| {
                    ran.fetch_add(1, Relaxed);
                    if ctx.index() == 3 {
                        panic!("scope broadcast boom");
                    }
                })
            })
        }));
        assert_eq!(
            describe(result.expect_err("raised")),
            "scope broadcast boom"
        );
        assert_eq!(ran.load(Relaxed), 4);
        assert_bounded_and_idle(&p, 1);
    });
}

/// A job of a chain on one token: lends the token to the next link, waits until another
/// thread has started it (spinning, so this thread cannot run it), then spawns again and waits
/// for admission (the token is lent) until the chain below returns it. The last link
/// broadcasts once every link above it waits.
fn link<'s>(
    s: &treepool::Scope<'s>,
    p: &'s treepool::ThreadPool,
    depth: usize,
    out: &'s Mutex<Vec<(usize, usize, Option<usize>)>>,
) {
    if depth == 0 {
        spin_until(|| p.stats().admission_waits >= 3);
        *out.lock().unwrap() = treepool::broadcast(seen);
        return;
    }
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    s.spawn(move |s| {
        flag.store(true, SeqCst);
        link(s, p, depth - 1, out);
    });
    spin_until(|| started.load(SeqCst));
    s.spawn(|_| {});
}

#[test]
fn broadcast_from_a_job_while_the_other_workers_wait_for_admission() {
    watchdog(60, || {
        for _ in 0..10 {
            let p = pool(4, 1);
            let out = Mutex::new(Vec::new());
            // Three links wait in admission (their token lent down the chain) on the other
            // workers or under each other; the fourth holds the only token and broadcasts.
            p.scope(|s| link(s, &p, 3, &out));
            assert_each_once(&out.into_inner().unwrap(), 4);
            assert_bounded_and_idle(&p, 1);
            assert!(p.stats().admission_waits >= 3);
        }
    });
}

#[test]
fn broadcast_while_a_scope_saturates_the_pool() {
    watchdog(60, || {
        for (threads, cap) in [(4, 1), (4, 2), (2, 2)] {
            let p = pool(threads, cap);
            let results = Mutex::new(Vec::new());
            let leaves = AtomicUsize::new(0);
            p.scope(|s| {
                for i in 0..200 {
                    s.spawn(|s| {
                        for _ in 0..3 {
                            s.spawn(|_| {
                                leaves.fetch_add(1, Relaxed);
                            });
                        }
                    });
                    if i % 50 == 25 {
                        s.spawn(|_| {
                            let seen_here = treepool::broadcast(seen);
                            results.lock().unwrap().push(seen_here);
                        });
                    }
                }
            });
            assert_eq!(leaves.load(Relaxed), 600);
            let results = results.into_inner().unwrap();
            assert_eq!(results.len(), 4);
            for r in &results {
                assert_each_once(r, threads);
            }
            assert_bounded_and_idle(&p, cap);
        }
    });
}

#[test]
fn broadcasts_between_two_pools_both_ways() {
    watchdog(60, || {
        // rayon's `broadcast_mutual`, and its detached twin, on one token each.
        let p1 = Arc::new(pool(3, 1));
        let p2 = Arc::new(pool(7, 1));
        let count = AtomicUsize::new(0);
        p1.install(|| {
            p2.broadcast(|_| {
                p1.broadcast(|_| count.fetch_add(1, Relaxed));
            })
        });
        assert_eq!(count.into_inner(), 3 * 7);
        let (tx, rx) = mpsc::channel::<()>();
        let (q1, q2) = (p1.clone(), p2.clone());
        p1.spawn(move || {
            q2.spawn_broadcast(move |_| {
                let tx = tx.clone();
                q1.spawn_broadcast(move |_| tx.send(()).unwrap());
            })
        });
        // Every sender dropped: all 21 inner jobs ran.
        assert_eq!(rx.iter().count(), 3 * 7);
        for p in [&p1, &p2] {
            settle([p]);
        }
    });
}

#[test]
fn broadcasts_race_workers_into_sleep() {
    watchdog(60, || {
        // rayon's `broadcast_sleep_race`: a spread of short sleeps sends the workers to sleep
        // at different moments, so a push to a worker's inbox meets it settling into sleep.
        let p = pool(4, 2);
        let start = std::time::Instant::now();
        let mut rounds = 0;
        while start.elapsed() < std::time::Duration::from_millis(500) {
            p.broadcast(|ctx| {
                std::thread::sleep(std::time::Duration::from_micros(ctx.index() as u64 * 50));
            });
            rounds += 1;
        }
        assert!(rounds > 0);
        assert_bounded_and_idle(&p, 2);
    });
}

/// Makes a call of a test round: runs the round on this thread or inside a job.
type Caller<'a> = &'a (dyn Fn(&(dyn Fn() + Sync)) + Sync);

/// `SPAWNED` detached broadcasts then one blocking broadcast on `p`, made by `call` (on this
/// thread, or inside a job): each spawned job sends `(call, index)`. When the blocking broadcast
/// returns, every spawned job must have run, each thread's in call order; if not, returns the
/// calls whose jobs each thread ran, in the order it ran them.
fn round_out_of_order(p: &treepool::ThreadPool, call: Caller<'_>) -> Option<Vec<Vec<usize>>> {
    const SPAWNED: usize = 3;
    let n = p.current_num_threads();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    call(&|| {
        for k in 0..SPAWNED {
            let tx = tx.lock().unwrap().clone();
            // A job that runs after the round's check has no receiver: it is counted missing.
            p.spawn_broadcast(move |ctx| {
                let _ = tx.send((k, ctx.index()));
            });
        }
        p.broadcast(|_| {});
    });
    // By thread: the calls whose jobs it ran, in the order it ran them.
    let mut by_thread = vec![Vec::new(); n];
    for (k, index) in rx.try_iter() {
        by_thread[index].push(k);
    }
    let in_order = by_thread.iter().all(|ks| ks.iter().copied().eq(0..SPAWNED));
    (!in_order).then_some(by_thread)
}

#[test]
fn broadcast_after_spawn_broadcast_runs_after_them_on_every_thread() {
    watchdog(240, || {
        // rayon's `broadcast_after_spawn_broadcast` (and three detached broadcasts in a row):
        // from a plain thread, from a job of the pool and from a job of another pool; with as
        // many tokens as threads, fewer, and one.
        const ROUNDS: usize = 200;
        let other = pool(2, 1);
        let mut report = Vec::new();
        for (threads, cap) in [(4, 4), (4, 2), (3, 1), (2, 8)] {
            let p = pool(threads, cap);
            let callers: [(&str, Caller<'_>); 3] = [
                ("plain thread", &|f| f()),
                ("job of the pool", &|f| p.install(f)),
                ("job of another pool", &|f| other.install(f)),
            ];
            for (from, call) in callers {
                let bad: Vec<_> = (0..ROUNDS)
                    .filter_map(|_| round_out_of_order(&p, call))
                    .collect();
                if !bad.is_empty() {
                    let first = &bad[0];
                    report.push(format!(
                        "({threads} threads, {cap} tokens) from a {from}: {} of {ROUNDS} rounds out of order, first {first:?}",
                        bad.len()
                    ));
                }
            }
            assert_bounded_with_calls_in_and_idle(&p, cap);
        }
        assert!(report.is_empty(), "{report:#?}");
        settle([&other]);
    });
}

/// On a pool whose worker 0 is the builder's thread (`use_current_thread`), a broadcast made
/// while that thread is outside the pool (here: waiting for the broadcast itself) runs worker
/// 0's job on another worker instead of holding a token until the thread comes back; inside a
/// call of that thread, worker 0's job runs on it.
#[test]
fn broadcast_while_the_builders_thread_is_outside_its_pool() {
    watchdog(60, || {
        for cap in [1, 2] {
            let pool = Arc::new(borrowed_pool(2, cap));
            let builder = std::thread::current().id();
            let remote = Arc::clone(&pool);
            let seen = std::thread::spawn(move || {
                remote.broadcast(|ctx| (ctx.index(), std::thread::current().id()))
            })
            .join()
            .expect("the broadcast returns");
            assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1]);
            assert!(
                seen.iter().all(|s| s.1 != builder),
                "the builder's thread ran pool work outside a call"
            );
            let inside =
                pool.install(|| pool.broadcast(|ctx| (ctx.index(), std::thread::current().id())));
            assert_eq!(
                inside[0],
                (0, builder),
                "worker 0's job runs on it inside a call"
            );
            assert_peak_bounds(&pool.stats(), cap);
            settle([&pool]);
        }
    });
}

/// `BroadcastContext::index` rustdoc: the index of the worker the job is pinned to, which runs
/// it, but for worker 0 of a `use_current_thread` pool while the builder's thread is outside
/// every call: that job runs on another worker. Each index goes to exactly one job.
///
/// Found by the adversarial review of issue 18 (the rayon-core API additions): it failed on
/// d282453.
#[test]
fn broadcast_context_index_names_the_worker_that_runs_it() {
    let seen = watchdog(30, || {
        let pool = Arc::new(
            ThreadPoolBuilder::new()
                .num_threads(3)
                .use_current_thread()
                .build()
                .unwrap(),
        );
        let remote = Arc::clone(&pool);
        let seen = std::thread::spawn(move || {
            remote.broadcast(|ctx| (ctx.index(), treepool::current_thread_index()))
        })
        .join()
        .unwrap();
        drop(pool);
        seen
    });
    let indices: Vec<usize> = seen.iter().map(|&(index, _)| index).collect();
    assert_eq!(indices, [0, 1, 2]);
    for (index, runner) in seen {
        match index {
            // The builder's thread is blocked in `join` above, outside the pool.
            0 => assert!(matches!(runner, Some(1 | 2)), "job 0 ran on {runner:?}"),
            _ => assert_eq!(Some(index), runner, "job {index} ran on worker {runner:?}"),
        }
    }
}
