//! The adversarial review of issue 18 (the rayon-core API additions since d237d55): each test
//! here failed on the commit under review (d282453), and passes since the fixes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{assert_idle, wait_idle, watchdog};
use treepool::ThreadPoolBuilder;

/// An in-place scope of pool Y owned by a worker W of pool X: the body's spawn D3 waits for the
/// credit root's loan (held by D1; Y's only token held by D2), and W's wait runs an X job E that
/// spawns D4 into the same scope from W: a second waiting child of the credit root.
fn two_waiting_children_of_the_credit_root() {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;
    let x = common::pool(1, 2);
    let y = common::pool(1, 1);
    let ran = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    x.install(|| {
        y.in_place_scope(|s| {
            let (ran, go) = (&ran, &go);
            let hold = move |_: &treepool::Scope<'_>| {
                common::spin_until(|| go.load(Ordering::SeqCst));
                std::thread::sleep(Duration::from_millis(100));
                ran.fetch_add(1, Ordering::SeqCst);
            };
            s.spawn(hold); // D1: the credit root's loan
            s.spawn(hold); // D2: Y's pool token
            treepool::scope(|xs| {
                xs.spawn(move |_| {
                    // E, run by W inside D3's admission wait.
                    go.store(true, Ordering::SeqCst);
                    s.spawn(move |_| {
                        ran.fetch_add(1, Ordering::SeqCst);
                    }); // D4
                });
                s.spawn(move |_| {
                    ran.fetch_add(1, Ordering::SeqCst);
                }); // D3
                go.store(true, Ordering::SeqCst);
            });
        });
    });
    assert_eq!(ran.load(Ordering::SeqCst), 4);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn in_place_scope_from_another_pool_two_waiting_children() {
    // Before the fix this shape failed a debug assertion and hung, or aborted.
    common::isolated(
        "in_place_scope_from_another_pool_two_waiting_children",
        "REVIEW_CHILD",
        20,
        two_waiting_children_of_the_credit_root,
    );
}

/// The builder's thread of `use_current_thread` is worker 0 (`treepool::current_thread_index()`
/// says `Some(0)`), but the pool's own `current_thread_index` says it is none of its workers.
#[test]
fn use_current_thread_pool_current_thread_index_disagrees() {
    let (free, method) = watchdog(30, || {
        std::thread::spawn(|| {
            let pool = ThreadPoolBuilder::new()
                .num_threads(2)
                .use_current_thread()
                .build()
                .unwrap();
            let v = (
                treepool::current_thread_index(),
                pool.current_thread_index(),
            );
            drop(pool);
            v
        })
        .join()
        .unwrap()
    });
    assert_eq!(free, Some(0));
    assert_eq!(
        method,
        Some(0),
        "pool.current_thread_index() on its worker 0"
    );
}

/// rayon-core's `use_current_thread` doc: jobs spawned into the pool are picked up by the
/// builder's thread "unless you yield to rayon in some way, like via yield_now(), yield_local(),
/// or scope()". Here, with one thread, a yield on worker 0 neither runs the queued spawn nor
/// even reports being in a pool.
#[test]
fn use_current_thread_yield_runs_the_queued_spawn() {
    let (yielded, ran) = watchdog(30, || {
        std::thread::spawn(|| {
            let pool = ThreadPoolBuilder::new()
                .num_threads(1)
                .use_current_thread()
                .build()
                .unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            let r = ran.clone();
            pool.spawn(move || {
                r.fetch_add(1, Ordering::SeqCst);
            });
            let yielded = treepool::yield_now();
            let out = (yielded, ran.load(Ordering::SeqCst));
            pool.install(|| {}); // let it run before the pool goes
            drop(pool);
            out
        })
        .join()
        .unwrap()
    });
    assert_eq!(yielded, Some(treepool::Yield::Executed));
    assert_eq!(ran, 1);
}

/// `BroadcastContext::index` rustdoc: the index of the worker the job is pinned to, which runs
/// it, but for worker 0 of a `use_current_thread` pool while the builder's thread is outside
/// every call: that job runs on another worker. Each index goes to exactly one job.
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
