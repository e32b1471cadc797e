//! Work given to a pool that is shutting down or gone (its `ThreadPool` dropped): nothing it
//! accepts is dropped unrun (issue 36, "nothing accepted and then dropped"; `docs/design.md`
//! §4.11, "A dropped pool"). Each path by where the work comes from:
//!
//! * a job of the terminated pool itself, run in its workers' drain after the drop, calling the
//!   free functions (`spawn`, `spawn_fifo`, `scope`, `join`, `in_place_scope`, `broadcast`,
//!   `spawn_broadcast`), which use the calling worker's pool, after every other worker exited;
//! * a worker of another pool and a plain thread, spawning into a scope of such a job (the only
//!   handle on a terminated pool another thread can hold: a `ThreadPool` cannot be borrowed
//!   while it is dropped);
//! * the builder's thread of a one-thread `use_current_thread` pool, whose queued work (its own
//!   spawns and broadcasts, and those of other pools' workers and plain threads) only it can
//!   run: the last round's notes ("other pools can queue into a terminated pool", "spawn_broadcast
//!   from an entered builder's thread may run worker 0's job on the caller"). Before the fix the
//!   thread dropped the pool's state at its first look after the drop and the queued jobs never
//!   ran;
//! * exit handlers, which run on a worker of the terminated pool after its drain: a detached
//!   spawn there went to the exiting worker's own deque and never ran.
//!
//! Every test runs under a watchdog; the builder's-thread ones in a child process (they make
//! the thread a borrowed worker and use the global pool afterwards).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::common;
use crate::common::{borrowed_pool, spin_until, watchdog};

/// How long a test waits for work that must run before it calls it lost.
const RUNS_WITHIN: Duration = Duration::from_secs(10);

/// Runs `body` in a detached job of a pool of `threads` workers and `cap` tokens, once the pool
/// was dropped and every other worker exited: `body` runs in the drain of a terminated pool, on
/// its last worker. Returns what `body` returns.
fn on_the_last_worker_of_a_dropped_pool<T: Send + 'static>(
    threads: usize,
    cap: usize,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let exited = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let e = exited.clone();
    let pool = treepool::ThreadPoolBuilder::new()
        .num_threads(threads)
        .max_inflight(cap)
        .exit_handler(move |_| {
            e.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let d = dropped.clone();
    pool.spawn(move || {
        spin_until(|| d.load(Ordering::SeqCst));
        // The others drained and exited: only this worker is left.
        spin_until(|| exited.load(Ordering::SeqCst) == threads - 1);
        tx.send(body()).unwrap();
    });
    drop(pool);
    dropped.store(true, Ordering::SeqCst);
    rx.recv_timeout(RUNS_WITHIN)
        .expect("the terminated pool's job finished")
}

/// A sender whose every clone must be dropped (by a job that ran) for `all_ran` to return.
fn ran_channel() -> (mpsc::Sender<usize>, mpsc::Receiver<usize>) {
    mpsc::channel()
}

/// Collects what the jobs holding clones of the receiver's sender sent, until every sender is
/// gone (every job ran, or was dropped unrun: then its sender is dropped too, and `expected`
/// tells the difference). Fails if a sender is still alive after `RUNS_WITHIN`.
fn all_ran(rx: mpsc::Receiver<usize>, expected: usize) -> Vec<usize> {
    let mut got = Vec::new();
    loop {
        match rx.recv_timeout(RUNS_WITHIN) {
            Ok(v) => got.push(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("after {got:?}: a job accepted by the terminated pool never ran")
            }
        }
    }
    got.sort_unstable();
    assert_eq!(
        got.len(),
        expected,
        "{got:?}: accepted jobs were dropped unrun"
    );
    got
}

/// A job of a terminated pool, its other workers gone, spawns with the free functions (the
/// calling worker's pool: the terminated one): each spawn runs (on this last worker). Passing
/// probe: the worker drains what its own jobs spawn.
#[test]
fn a_terminated_pools_job_spawns_and_its_spawns_run() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 1), (3, 2)] {
            let got = on_the_last_worker_of_a_dropped_pool(threads, cap, || {
                let (tx, rx) = ran_channel();
                for i in 0..20 {
                    let tx = tx.clone();
                    if i % 2 == 0 {
                        treepool::spawn(move || tx.send(i).unwrap());
                    } else {
                        treepool::spawn_fifo(move || tx.send(i).unwrap());
                    }
                }
                rx
            });
            assert_eq!(all_ran(got, 20), (0..20).collect::<Vec<_>>());
        }
    });
}

/// A job of a terminated pool, its other workers gone, calls `scope`, `join` and
/// `in_place_scope` with spawns: each finishes with every spawn run. Passing probe.
#[test]
fn a_terminated_pools_job_calls_scope_join_and_in_place_scope() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 1), (3, 2)] {
            let (hits, pair, fib) = on_the_last_worker_of_a_dropped_pool(threads, cap, || {
                let hits = AtomicUsize::new(0);
                treepool::scope(|s| {
                    for _ in 0..10 {
                        s.spawn(|s| {
                            s.spawn(|_| {
                                hits.fetch_add(1, Ordering::Relaxed);
                            });
                        });
                    }
                });
                treepool::in_place_scope(|s| {
                    s.spawn(|_| {
                        hits.fetch_add(1, Ordering::Relaxed);
                    });
                });
                let pair = treepool::join(|| 1, || 2);
                (hits.into_inner(), pair, common::fib(12))
            });
            assert_eq!((hits, pair, fib), (11, (1, 2), 144));
        }
    });
}

/// A job of a terminated pool, its other workers gone, broadcasts and spawns a broadcast: the
/// jobs pinned to the exited workers run where they land (their inboxes are closed), so every
/// index runs once. Passing probe.
#[test]
fn a_terminated_pools_job_broadcasts_to_its_exited_workers() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 1), (3, 2)] {
            let (indices, spawned) =
                on_the_last_worker_of_a_dropped_pool(threads, cap, move || {
                    let indices = treepool::broadcast(|ctx| ctx.index());
                    let (tx, rx) = ran_channel();
                    treepool::spawn_broadcast(move |ctx| tx.send(ctx.index()).unwrap());
                    (indices, rx)
                });
            let all: Vec<usize> = (0..threads).collect();
            assert_eq!(indices, all);
            assert_eq!(all_ran(spawned, threads), all);
        }
    });
}

/// A worker of another pool and a plain thread spawn (plain and broadcast) into a scope of a
/// job of a terminated pool, its other workers gone: offered a token, else deferred to the
/// scope's owner, every spawn runs before the scope ends. Passing probe.
#[test]
fn other_pools_and_plain_threads_spawn_into_a_terminated_pools_scope() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 1), (3, 2)] {
            let other = Arc::new(common::pool(2, 1));
            let x = other.clone();
            let (plain, broadcast) =
                on_the_last_worker_of_a_dropped_pool(threads, cap, move || {
                    let plain = AtomicUsize::new(0);
                    let broadcast = Mutex::new(Vec::new());
                    treepool::scope(|s| {
                        let spawn_all = || {
                            for _ in 0..5 {
                                s.spawn(|_| {
                                    plain.fetch_add(1, Ordering::Relaxed);
                                });
                            }
                            s.spawn_broadcast(|_, ctx| broadcast.lock().unwrap().push(ctx.index()));
                        };
                        // From a worker of the other pool (a job holding its only token).
                        x.install(spawn_all);
                        // From a plain thread.
                        std::thread::scope(|t| {
                            t.spawn(spawn_all);
                        });
                    });
                    let mut broadcast = broadcast.into_inner().unwrap();
                    broadcast.sort_unstable();
                    (plain.into_inner(), broadcast)
                });
            assert_eq!(plain, 10);
            let twice: Vec<usize> = (0..threads).flat_map(|i| [i, i]).collect();
            assert_eq!(broadcast, twice);
            common::settle([&other]);
        }
    });
}

/// What queues work into a one-thread `use_current_thread` pool while its builder's thread is
/// outside every call (so that only that thread, at its next call, can run it), before the pool
/// is dropped. Each job sends its number on the channel.
#[derive(Clone, Copy, Debug)]
enum Queuer {
    /// `treepool::spawn` on the builder's thread (entered as worker 0 for the call).
    FreeSpawn,
    /// `ThreadPool::spawn` on the builder's thread.
    PoolSpawn,
    /// `treepool::spawn_fifo` on the builder's thread.
    FreeSpawnFifo,
    /// `treepool::spawn_broadcast` on the builder's thread: worker 0's job is handed over as
    /// the call returns.
    SpawnBroadcast,
    /// `ThreadPool::spawn` from a job of another pool (a root on a pool token, or queued for one
    /// if none is free: `CrossingSpawnQueued`).
    OtherPoolsWorker,
    /// `ThreadPool::spawn` from a plain thread.
    PlainThread,
}

const QUEUERS: [Queuer; 6] = [
    Queuer::FreeSpawn,
    Queuer::PoolSpawn,
    Queuer::FreeSpawnFifo,
    Queuer::SpawnBroadcast,
    Queuer::OtherPoolsWorker,
    Queuer::PlainThread,
];

/// The tokens of the pool `queuer` queues into: one where the second job of [`queue_two`] is to
/// be queued for the first one's token (`CrossingSpawnQueued`); two elsewhere, where a second
/// job waiting for a token would run the first (the builder's thread, entered as worker 0) or
/// wait for the builder's thread (a plain thread).
fn cap_for(queuer: Queuer) -> usize {
    match queuer {
        Queuer::OtherPoolsWorker => 1,
        _ => 2,
    }
}

/// Queues two jobs into `pool` (one-thread, the calling thread's, outside every call) by
/// `queuer`, sending 0 and 1 on `tx`.
fn queue_two(
    pool: &treepool::ThreadPool,
    other: &treepool::ThreadPool,
    queuer: Queuer,
    tx: mpsc::Sender<usize>,
) {
    for i in 0..2 {
        let tx = tx.clone();
        let job = move || tx.send(i).unwrap();
        match queuer {
            Queuer::FreeSpawn => treepool::spawn(job),
            Queuer::PoolSpawn => pool.spawn(job),
            Queuer::FreeSpawnFifo => treepool::spawn_fifo(job),
            Queuer::SpawnBroadcast => treepool::spawn_broadcast(move |_| job()),
            Queuer::OtherPoolsWorker => other.install(|| pool.spawn(job)),
            Queuer::PlainThread => std::thread::scope(|t| {
                t.spawn(|| pool.spawn(job));
            }),
        }
    }
}

/// For each [`Queuer`]: builds a one-thread `use_current_thread` pool on the calling thread,
/// queues two jobs into it ([`queue_two`]) while the thread is outside every call, checks that
/// neither has run, and hands the pool and the jobs' receiver to `then`, which drops the pool
/// and returns what ran. Fails, naming every queuer whose jobs did not both run.
fn after_queueing(then: impl Fn(treepool::ThreadPool, mpsc::Receiver<usize>) -> Vec<usize>) {
    let other = common::pool(2, 1);
    let mut lost = Vec::new();
    for queuer in QUEUERS {
        let pool = borrowed_pool(1, cap_for(queuer));
        let (tx, rx) = ran_channel();
        queue_two(&pool, &other, queuer, tx);
        assert_eq!(rx.try_iter().count(), 0, "{queuer:?}: ran outside a call");
        let ran = then(pool, rx);
        if ran != [0, 1] {
            lost.push(format!("{queuer:?} ran {ran:?}"));
        }
        assert_eq!(treepool::current_thread_index(), None, "{queuer:?}");
    }
    assert!(lost.is_empty(), "accepted jobs dropped unrun: {lost:?}");
    common::settle([&other]);
}

/// The builder's thread of a one-thread `use_current_thread` pool leaves jobs queued for its
/// next call (its own spawns, a `spawn_broadcast`'s job for worker 0, spawns from another
/// pool's worker and from a plain thread), then the pool is dropped on another thread. The
/// thread's next look at the pool (here `current_thread_index`) runs them, as a worker of a
/// dropped pool drains it before it leaves; it then is a plain thread. They were lost (every
/// queuer): the look dropped the pool's state with the jobs still in its injector.
#[test]
fn one_thread_builders_queued_work_runs_after_a_drop_elsewhere() {
    common::isolated!(60, || {
        after_queueing(|pool, rx| {
            std::thread::spawn(move || drop(pool)).join().unwrap();
            assert_eq!(treepool::current_thread_index(), None);
            rx.try_iter().collect()
        });
    });
}

/// The same, the pool dropped on its builder's thread: the drop runs what is queued. They were
/// lost (every queuer).
#[test]
fn one_thread_builders_queued_work_runs_when_it_drops_the_pool() {
    common::isolated!(60, || {
        after_queueing(|pool, rx| {
            drop(pool);
            rx.try_iter().collect()
        });
    });
}

/// The same, the builder's thread's next act a free call: the queued jobs run first, in the
/// terminated pool, then the call goes to the global pool as a plain thread's does. They were
/// lost (every queuer).
#[test]
fn one_thread_builders_queued_work_runs_before_its_next_call() {
    common::isolated!(60, || {
        after_queueing(|pool, rx| {
            std::thread::spawn(move || drop(pool)).join().unwrap();
            let (ran, index) = treepool::join(
                move || rx.try_iter().collect(),
                treepool::current_thread_index,
            );
            assert_ne!(index, None, "the call ran in the global pool");
            ran
        });
    });
}

/// A pool of `threads` workers whose exit handler runs `handler(index)`.
fn with_exit_handler(
    threads: usize,
    cap: usize,
    handler: impl Fn(usize) + Send + Sync + 'static,
) -> treepool::ThreadPool {
    treepool::ThreadPoolBuilder::new()
        .num_threads(threads)
        .max_inflight(cap)
        .exit_handler(handler)
        .build()
        .unwrap()
}

/// An exit handler (a worker of the terminated pool, after its drain, outside any job) spawns
/// detached jobs: each runs before the thread exits (the worker drains again after the
/// handler). They went to the exiting worker's own deque and were dropped with it.
#[test]
fn an_exit_handlers_spawns_run() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 1), (3, 2)] {
            let (tx, rx) = ran_channel();
            let tx = Mutex::new(tx);
            let pool = with_exit_handler(threads, cap, move |index| {
                let tx = tx.lock().unwrap().clone();
                let tx2 = tx.clone();
                treepool::spawn(move || tx.send(index).unwrap());
                treepool::spawn_fifo(move || tx2.send(index).unwrap());
            });
            drop(pool);
            let twice: Vec<usize> = (0..threads).flat_map(|i| [i, i]).collect();
            assert_eq!(all_ran(rx, 2 * threads), twice, "{threads} threads");
        }
    });
}

/// Exit handlers call into their terminated pool (`scope` with spawns, `join`, `broadcast`,
/// `spawn_broadcast`), one token for all: each call finishes and every job runs, also a root
/// whose token another handler's root frees (granted onto that handler's worker).
#[test]
fn exit_handlers_call_and_broadcast_into_their_terminated_pool() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 1), (3, 1)] {
            let (tx, rx) = ran_channel();
            let tx = Mutex::new(tx);
            let done = Arc::new(AtomicUsize::new(0));
            let d = done.clone();
            let pool = with_exit_handler(threads, cap, move |index| {
                let tx = tx.lock().unwrap().clone();
                let hits = AtomicUsize::new(0);
                treepool::scope(|s| {
                    for _ in 0..4 {
                        s.spawn(|_| {
                            hits.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
                assert_eq!(hits.into_inner(), 4);
                assert_eq!(treepool::join(|| 1, || 2), (1, 2));
                let all = treepool::broadcast(|ctx| ctx.index());
                assert_eq!(all, (0..threads).collect::<Vec<_>>());
                treepool::spawn_broadcast(move |ctx| tx.send(index * 10 + ctx.index()).unwrap());
                d.fetch_add(1, Ordering::SeqCst);
            });
            drop(pool);
            let got = all_ran(rx, threads * threads);
            let want: Vec<usize> = (0..threads)
                .flat_map(|h| (0..threads).map(move |i| h * 10 + i))
                .collect();
            assert_eq!(got, want);
            assert_eq!(done.load(Ordering::SeqCst), threads);
        }
    });
}

/// The builder's thread of a two-thread `use_current_thread` pool, inside a call, after the
/// pool was dropped on another thread and its other worker exited, spawns a broadcast and a
/// detached job: every job runs on the calling thread (worker 1's inbox is closed, so its job
/// runs where it lands; worker 0's and the spawn run in the drain as the call returns), as the
/// last round's notes said ("spawn_broadcast from an entered builder's thread may run worker
/// 0's job on the caller": here it must). Passing probe.
#[test]
fn builders_thread_in_a_call_spawns_into_its_dropped_pool() {
    common::isolated!(60, || {
        let exited = Arc::new(AtomicUsize::new(0));
        let e = exited.clone();
        let pool = treepool::ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(1)
            .use_current_thread()
            .exit_handler(move |_| {
                e.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap();
        let me = std::thread::current().id();
        let (tx, rx) = mpsc::channel();
        treepool::scope(move |_| {
            std::thread::spawn(move || drop(pool)).join().unwrap();
            spin_until(|| exited.load(Ordering::SeqCst) == 1);
            let t = tx.clone();
            treepool::spawn_broadcast(move |ctx| {
                t.send((ctx.index(), std::thread::current().id())).unwrap()
            });
            treepool::spawn(move || tx.send((9, std::thread::current().id())).unwrap());
        });
        let mut got: Vec<_> = rx.iter().collect();
        got.sort_by_key(|g| g.0);
        assert_eq!(got, [(0, me), (1, me), (9, me)]);
        assert_eq!(treepool::current_thread_index(), None);
    });
}

/// Start handlers of a pool dropped right after it was built (a handler may run before or after
/// the drop) spawn, call and broadcast into it: every spawned job runs and every call returns.
/// Passing probe: a worker that starts after the drop still drains what its handler gave it.
#[test]
fn start_handlers_of_a_pool_dropped_at_once_spawn_and_broadcast() {
    watchdog(60, || {
        for threads in 1..=3 {
            let (tx, rx) = ran_channel();
            let tx = Mutex::new(tx);
            let done = Arc::new(AtomicUsize::new(0));
            let d = done.clone();
            let pool = treepool::ThreadPoolBuilder::new()
                .num_threads(threads)
                .max_inflight(1)
                .start_handler(move |index| {
                    let tx = tx.lock().unwrap().clone();
                    let t = tx.clone();
                    treepool::spawn(move || t.send(index * 10).unwrap());
                    assert_eq!(treepool::join(|| 1, || 2), (1, 2));
                    assert_eq!(treepool::broadcast(|ctx| ctx.index()).len(), threads);
                    treepool::spawn_broadcast(move |ctx| {
                        tx.send(index * 10 + 1 + ctx.index()).unwrap()
                    });
                    d.fetch_add(1, Ordering::SeqCst);
                })
                .build()
                .unwrap();
            drop(pool);
            let got = all_ran(rx, threads * (1 + threads));
            let want: Vec<usize> = (0..threads)
                .flat_map(|h| (0..=threads).map(move |i| h * 10 + i))
                .collect();
            assert_eq!(got, want);
            assert_eq!(done.load(Ordering::SeqCst), threads);
        }
    });
}
