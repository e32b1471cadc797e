//! Which pool the free `broadcast`, `spawn_broadcast`, `in_place_scope` and
//! `in_place_scope_fifo` target, and on which worker they run: on a plain thread (the global
//! pool), on a worker of a pool (that pool, also when the thread is the builder's thread of
//! another `use_current_thread` pool), on the builder's thread outside a call (its pool, the
//! thread entered as worker 0), inside a call, and nested in one another; detached broadcast
//! jobs spawned from the builder's thread all run without a further call.

use std::sync::mpsc;
use std::thread::{self, ThreadId};

use crate::common::{borrowed_pool, pool, settle, watchdog};

/// What a broadcast job saw: its context's index and pool size, and the worker running it.
type Seen = (usize, usize, Option<usize>, ThreadId);

fn seen(ctx: treepool::BroadcastContext<'_>) -> Seen {
    (
        ctx.index(),
        ctx.num_threads(),
        treepool::current_thread_index(),
        thread::current().id(),
    )
}

/// A free `spawn_broadcast` whose jobs send what they saw to `tx`.
fn spawn_seen(tx: mpsc::Sender<Seen>) {
    treepool::spawn_broadcast(move |ctx| tx.send(seen(ctx)).unwrap());
}

/// Runs `call` (which spawns a broadcast sending to the sender it gets) and collects what each
/// job saw, sorted by index: until every job ran and dropped its sender, yielding to the calling
/// thread's pool meanwhile (the builder's thread of a one-thread pool runs its job only so).
fn spawned_broadcast(call: impl FnOnce(mpsc::Sender<Seen>)) -> Vec<Seen> {
    let (tx, rx) = mpsc::channel();
    call(tx);
    let mut all = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(s) => all.push(s),
            Err(mpsc::TryRecvError::Disconnected) => break,
            Err(mpsc::TryRecvError::Empty) => {
                treepool::yield_now();
                thread::yield_now();
            }
        }
    }
    all.sort_by_key(|s| s.0);
    all
}

/// What the body of a free in-place scope (plain and fifo) saw: the worker index and thread,
/// and that a spawn in it ran.
fn in_place_bodies() -> [(Option<usize>, ThreadId, bool); 2] {
    let body = || (treepool::current_thread_index(), thread::current().id());
    let mut ran = [false, false];
    let plain = treepool::in_place_scope(|s| {
        s.spawn(|_| ran[0] = true);
        body()
    });
    let fifo = treepool::in_place_scope_fifo(|s| {
        s.spawn_fifo(|_| ran[1] = true);
        body()
    });
    [(plain.0, plain.1, ran[0]), (fifo.0, fifo.1, ran[1])]
}

fn indices(all: &[Seen]) -> Vec<usize> {
    all.iter().map(|s| s.0).collect()
}

#[test]
fn on_a_plain_thread_they_target_the_global_pool() {
    watchdog(60, || {
        let n = treepool::current_num_threads();
        let all = treepool::broadcast(seen);
        assert_eq!(indices(&all), (0..n).collect::<Vec<_>>());
        assert!(all.iter().all(|s| s.1 == n && s.2 == Some(s.0)), "{all:?}");
        let spawned = spawned_broadcast(spawn_seen);
        assert_eq!(indices(&spawned), (0..n).collect::<Vec<_>>());
        let me = thread::current().id();
        for (index, thread, ran) in in_place_bodies() {
            assert_eq!((index, thread, ran), (None, me, true));
        }
    });
}

#[test]
fn on_a_worker_they_target_its_pool_also_on_another_pools_builders_thread() {
    watchdog(60, || {
        let a = pool(3, 2);
        let check = |all: Vec<Seen>| {
            assert_eq!(indices(&all), [0, 1, 2]);
            assert!(all.iter().all(|s| s.1 == 3 && s.2 == Some(s.0)), "{all:?}");
        };
        check(a.install(|| treepool::broadcast(seen)));
        check(spawned_broadcast(|tx| a.install(|| spawn_seen(tx))));
        for (index, _, ran) in a.install(in_place_bodies) {
            assert!(matches!(index, Some(0..=2)) && ran, "{index:?}");
        }
        // This thread becomes worker 0 of a two-thread pool B; A's calls from it still go to A.
        let b = borrowed_pool(2, 1);
        check(a.install(|| treepool::broadcast(seen)));
        check(spawned_broadcast(|tx| a.install(|| spawn_seen(tx))));
        check(b.install(|| a.install(|| treepool::broadcast(seen))));
        check(spawned_broadcast(|tx| {
            treepool::in_place_scope(|_| a.install(|| spawn_seen(tx)))
        }));
        settle([&a, &b]);
    });
}

#[test]
fn on_the_builders_thread_outside_a_call_they_target_its_pool_as_worker_0() {
    watchdog(60, || {
        for threads in 1..=3 {
            let b = borrowed_pool(threads, 1);
            let me = thread::current().id();
            let all = treepool::broadcast(seen);
            assert_eq!(indices(&all), (0..threads).collect::<Vec<_>>());
            assert_eq!((all[0].2, all[0].3), (Some(0), me), "{all:?}");
            assert!(all.iter().all(|s| s.1 == threads), "{all:?}");
            for (index, thread, ran) in in_place_bodies() {
                assert_eq!((index, thread, ran), (Some(0), me, true));
            }
            assert_eq!(treepool::current_thread_index(), Some(0));
            settle([&b]);
        }
    });
}

/// The detached jobs of a `spawn_broadcast` made on the builder's thread outside a call, the
/// other workers asleep: each runs, without a further call of that thread (worker 0's job runs
/// on it inside the call, if a wait there ran it, else on another worker after the hand-over).
#[test]
fn builders_thread_spawn_broadcast_runs_every_job_without_another_call() {
    watchdog(60, || {
        for threads in 2..=3 {
            for cap in 1..=2 {
                let b = borrowed_pool(threads, cap);
                settle([&b]);
                // Blocking here: this thread neither yields to nor calls into the pool.
                let (tx, rx) = mpsc::channel();
                spawn_seen(tx);
                let mut all: Vec<Seen> = rx.iter().collect();
                all.sort_by_key(|s| s.0);
                assert_eq!(indices(&all), (0..threads).collect::<Vec<_>>());
                assert!(all.iter().all(|s| s.1 == threads), "{all:?}");
                settle([&b]);
            }
        }
    });
}

/// One thread: the job pinned to worker 0 runs when the builder's thread yields to its pool.
#[test]
fn one_thread_builders_spawn_broadcast_runs_at_its_next_yield() {
    watchdog(60, || {
        let b = borrowed_pool(1, 1);
        let all = spawned_broadcast(spawn_seen);
        assert_eq!(all, [(0, 1, Some(0), thread::current().id())]);
        settle([&b]);
    });
}

#[test]
fn nested_in_the_builders_in_place_scope_they_target_its_pool() {
    watchdog(60, || {
        for threads in 1..=3 {
            let b = borrowed_pool(threads, 1);
            let me = thread::current().id();
            let want: Vec<usize> = (0..threads).collect();
            let spawned = spawned_broadcast(|tx| {
                treepool::in_place_scope(|s| {
                    let all = treepool::broadcast(seen);
                    assert_eq!(indices(&all), want);
                    assert_eq!((all[0].2, all[0].3), (Some(0), me), "{all:?}");
                    for (index, thread, ran) in in_place_bodies() {
                        assert_eq!((index, thread, ran), (Some(0), me, true));
                    }
                    spawn_seen(tx);
                    let want = &want;
                    s.spawn(move |_| assert_eq!(indices(&treepool::broadcast(seen)), *want));
                })
            });
            assert_eq!(indices(&spawned), want);
            assert!(spawned.iter().all(|s| s.1 == threads), "{spawned:?}");
            treepool::in_place_scope_fifo(|_| {
                let all = b.install(|| treepool::broadcast(seen));
                assert_eq!(indices(&all), want);
                assert_eq!(treepool::current_thread_index(), Some(0));
            });
            settle([&b]);
        }
    });
}
