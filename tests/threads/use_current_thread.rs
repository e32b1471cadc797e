//! `use_current_thread`: the builder's thread is worker 0 while it is inside its pool and a plain
//! thread outside it; it is never waited for, its stack is read for the headroom rule, yields on
//! it run queued spawns, in-place scopes and ordered streams on it (in and out of its pool, one
//! thread, pools dropped mid-body or mid-stream) finish and leave the pool idle. Every test that
//! may hang or abort runs in a child process or under a watchdog.

use super::handlers::{chain, custom_spawn, deep_chain_on_segments, fan_out, join_all, Calls};
use crate::common;
use crate::common::{
    assert_idle, assert_peak_bounds, borrowed_pool, pool, settle, spin_until, spin_us, watchdog,
};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;
use treepool::ThreadPoolBuilder;

#[test]
fn use_current_thread_makes_the_builder_worker_0() {
    watchdog(60, || {
        let handles = Arc::new(Mutex::new(Vec::new()));
        let starts = Calls::default();
        let s = starts.clone();
        let pool = ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(2)
            .use_current_thread()
            .start_handler(move |i| s.record(i))
            .spawn_handler(custom_spawn(handles.clone(), 256 << 10, None))
            .build()
            .unwrap();
        assert_eq!(treepool::current_thread_index(), Some(0));
        assert_eq!(treepool::current_num_threads(), 2);
        assert_eq!(handles.lock().unwrap().len(), 1, "one thread started");
        let again = ThreadPoolBuilder::new()
            .num_threads(2)
            .use_current_thread()
            .build();
        assert!(again.is_err(), "the thread is worker 0 already");

        let me = std::thread::current().id();
        let (index, thread) = pool.install(|| {
            (
                treepool::current_thread_index(),
                std::thread::current().id(),
            )
        });
        assert_eq!(
            (index, thread),
            (Some(0), me),
            "install runs on the builder's thread"
        );
        assert_eq!(treepool::join(|| std::thread::current().id(), || 1).0, me);
        // Inside a call the builder's thread runs pool work (its help-first loop runs its own
        // spawns while no token is free) and the other worker steals from it.
        let ran = pool.install(|| fan_out(&pool, 300));
        assert!(ran.contains(&0), "{ran:?}");
        // Joins inside the call: the idle worker asks worker 0 for a half, and it answers at
        // its joins; after the call nothing of it is left private.
        fn fib(n: u32) -> u64 {
            if n < 2 {
                return n as u64;
            }
            let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
            a + b
        }
        assert_eq!(pool.install(|| fib(22)), 17711);
        // A spawn from outside any call: this thread leaves the pool at once; worker 1 runs it.
        let (tx, rx) = mpsc::channel();
        pool.spawn(move || tx.send(treepool::current_thread_index()).unwrap());
        assert_eq!(rx.recv().unwrap(), Some(1));
        let [stats] = settle([&pool]);
        assert_peak_bounds(&stats, 2);
        assert_eq!(
            starts.sorted(),
            [1],
            "no start handler on the builder's thread"
        );
        drop(pool);
        assert_eq!(join_all(&handles), 1);
        // Dropped on this thread outside a call: the thread is free again.
        assert_eq!(treepool::current_thread_index(), None);
        let next = ThreadPoolBuilder::new()
            .num_threads(1)
            .use_current_thread()
            .build();
        assert_eq!(
            next.unwrap().install(treepool::current_thread_index),
            Some(0)
        );
    });
}

#[test]
fn worker_0_outside_the_pool_is_never_waited_for_at_max_inflight_1() {
    watchdog(60, || {
        let pool = Arc::new(borrowed_pool(2, 1));
        for round in 0..50 {
            // Detached trees spawned from outside any call: their jobs were on this thread's
            // deque, which it handed over as it left the call; it now blocks outside the pool.
            let (tx, rx) = mpsc::channel();
            for _ in 0..3 {
                let (p, tx) = (pool.clone(), tx.clone());
                pool.spawn(move || {
                    chain(&p, 50);
                    let (a, b) = treepool::join(|| chain(&p, 5), || chain(&p, 5));
                    let _ = (a, b);
                    tx.send(()).unwrap();
                });
            }
            (0..3).for_each(|_| rx.recv().unwrap());
            // A plain thread's call waits for the token worker 0 holds inside `install`; the
            // grant happens as worker 0 finishes, after which it leaves: worker 1 runs it.
            let (started_tx, started_rx) = mpsc::channel();
            let p = pool.clone();
            let plain = std::thread::spawn(move || {
                started_rx.recv().unwrap();
                p.install(|| chain(&p, 20));
            });
            pool.install(|| {
                let waits = pool.stats().admission_waits;
                started_tx.send(()).unwrap();
                // Odd rounds: until the plain thread waits for the token this call holds.
                spin_until(|| pool.stats().admission_waits > waits || round % 2 == 0);
                chain(&pool, 10);
            });
            plain.join().unwrap();
        }
        let [stats] = settle([&pool]);
        assert_peak_bounds(&stats, 1);
        assert_eq!(stats.calls_in, 0);
    });
}

#[test]
fn headroom_reads_the_stack_of_the_builders_thread() {
    // The builder's thread has 512 KiB and is about 100 KiB deep in it when it builds and calls
    // in; the builder was told 16 MiB.
    common::isolated!(150, || {
        fn deep(d: usize) {
            let pad = std::hint::black_box([0u8; 1024]);
            if d > 0 {
                return deep(d - 1 + pad[0] as usize);
            }
            let pool = ThreadPoolBuilder::new()
                .num_threads(1)
                .max_inflight(1)
                .stack_size(16 << 20)
                .use_current_thread()
                .build()
                .unwrap();
            deep_chain_on_segments(&pool, 3000);
        }
        let thread = std::thread::Builder::new().stack_size(512 << 10);
        thread.spawn(|| deep(96)).unwrap().join().unwrap();
    });
}

/// The builder's thread of `use_current_thread` is worker 0 (`treepool::current_thread_index()`
/// says `Some(0)`), but the pool's own `current_thread_index` says it is none of its workers.
///
/// Found by the adversarial review of issue 18 (the rayon-core API additions): it failed on
/// d282453.
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
///
/// Found by the adversarial review of issue 18 (the rayon-core API additions): it failed on
/// d282453.
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

/// The builder's thread T of a one-thread `use_current_thread` pool P, outside a call, opens
/// `P.in_place_scope` and spawns into it. rayon-core: T is worker 0 of P, its scope helps and
/// returns. Here `in_place_scope` does not enter T as worker 0 (unlike `install`, `scope`,
/// `join`, `spawn` and, since 93d4ff7, the yields and `current_thread_index`): T is a plain
/// owner, the spawn is a root queued in P's injector, and the scope's end parks T, the only
/// thread that could run it.
fn use_current_thread_in_place_scope_runs_its_spawn() {
    let pool = treepool::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
        .unwrap();
    assert_eq!(pool.current_thread_index(), Some(0));
    let ran = AtomicUsize::new(0);
    pool.in_place_scope(|s| {
        s.spawn(|_| {
            ran.fetch_add(1, Ordering::SeqCst);
        });
    });
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    settle([&pool]);
}

/// Found by the adversarial review of 93d4ff7 (the issue 18 fixes: `Scope::owner_admits`,
/// `credit_admits`, `pool::on_worker`).
#[test]
fn use_current_thread_in_place_scope_on_the_builders_thread() {
    common::isolated!(20, use_current_thread_in_place_scope_runs_its_spawn);
}

/// The builder's thread B of a `use_current_thread` pool opens the free `in_place_scope`
/// (entered as worker 0) while another thread, which owns the pool, drops it mid-body; the
/// body goes on spawning after the other workers stopped: B runs them at its waits.
///
/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn use_current_thread_in_place_scope_while_another_thread_drops_the_pool() {
    common::isolated!(30, || {
        for threads in 1..=3 {
            for cap in 1..=2 {
                // A fresh builder's thread each time: a pool dropped on another thread
                // leaves its builder's thread its worker 0 (`borrowed::release`).
                std::thread::spawn(move || one_drop_mid_body(threads, cap))
                    .join()
                    .unwrap();
            }
        }
    });
}

fn one_drop_mid_body(threads: usize, cap: usize) {
    {
        {
            {
                {
                    let pool = borrowed_pool(threads, cap);
                    let (tx, rx) = std::sync::mpsc::channel::<()>();
                    let dropper = std::thread::spawn(move || {
                        rx.recv().unwrap();
                        drop(pool);
                    });
                    let ran = AtomicUsize::new(0);
                    treepool::in_place_scope(|s| {
                        for i in 0..40 {
                            if i == 10 {
                                tx.send(()).unwrap();
                            }
                            let ran = &ran;
                            s.spawn(move |s| {
                                ran.fetch_add(1, Ordering::SeqCst);
                                s.spawn(move |_| {
                                    ran.fetch_add(1, Ordering::SeqCst);
                                });
                            });
                        }
                    });
                    dropper.join().unwrap();
                    assert_eq!(ran.load(Ordering::SeqCst), 80);
                    // Once more on the dropped pool (still this thread's borrowed pool).
                    let again = AtomicUsize::new(0);
                    treepool::in_place_scope(|s| {
                        for _ in 0..5 {
                            s.spawn(|_| {
                                again.fetch_add(1, Ordering::SeqCst);
                            });
                        }
                    });
                    assert_eq!(again.load(Ordering::SeqCst), 5);
                }
            }
        }
    }
}

/// B's in-place scope (worker 0) with a panicking body, panicking jobs, a nested `install` and
/// a nested in-place scope of the same pool, at one token on one and two threads: the panic is
/// raised after every job ran, and the pool is idle (B4).
///
/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn use_current_thread_in_place_scope_panics_and_nested_calls_leave_the_pool_idle() {
    common::isolated!(30, || {
        std::panic::set_hook(Box::new(|_| {}));
        for threads in 1..=2 {
            let pool = borrowed_pool(threads, 1);
            for which in 0..4u32 {
                let ran = AtomicUsize::new(0);
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pool.in_place_scope(|s| {
                        let ran = &ran;
                        s.spawn(move |_| {
                            ran.fetch_add(1, Ordering::SeqCst);
                            if which & 1 != 0 {
                                panic!("job");
                            }
                        });
                        pool.install(|| {
                            s.spawn(move |_| {
                                ran.fetch_add(1, Ordering::SeqCst);
                            });
                        });
                        pool.in_place_scope(|inner| {
                            inner.spawn(move |_| {
                                ran.fetch_add(1, Ordering::SeqCst);
                            });
                            s.spawn(move |_| {
                                ran.fetch_add(1, Ordering::SeqCst);
                            });
                        });
                        let v: Vec<u32> = s.map_ordered(0..3u32, |i| i + 1).collect();
                        assert_eq!(v, [1, 2, 3]);
                        if which & 2 != 0 {
                            panic!("body");
                        }
                    })
                }));
                assert_eq!(result.is_err(), which != 0);
                assert_eq!(ran.load(Ordering::SeqCst), 4);
                settle([&pool]);
            }
        }
    });
}

/// A pool of one thread that is the builder's own: the stream is consumed in an in-place scope
/// on that thread, outside a call. Every carrier is a job that only worker 0 can run, and worker
/// 0 is this thread, parked as a plain consumer.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn use_current_thread_one_thread_in_place_stream() {
    let out = watchdog(20, || {
        let p = treepool::ThreadPoolBuilder::new()
            .num_threads(1)
            .use_current_thread()
            .build()
            .unwrap();
        let out: Vec<u32> = p.in_place_scope(|s| s.map_ordered(0..5u32, |i| i * 2).collect());
        let stats = p.stats();
        assert_idle(&stats);
        out
    });
    assert_eq!(out, [0, 2, 4, 6, 8]);
}

/// Found by review 19's attacks on the ordered stream.
#[test]
fn use_current_thread_pools_stream_in_scope_and_in_place() {
    watchdog(60, || {
        for threads in [2, 3] {
            for cap in [1, 2] {
                let p = borrowed_pool(threads, cap);
                let out: Vec<u32> =
                    p.scope(|s| s.map_ordered(0..50u32, |i| i * 2).window(4).collect());
                assert_eq!(out, (0..50).map(|i| i * 2).collect::<Vec<_>>());
                let out: Vec<u32> =
                    p.in_place_scope(|s| s.map_ordered(0..50u32, |i| i * 3).window(4).collect());
                assert_eq!(out, (0..50).map(|i| i * 3).collect::<Vec<_>>());
                assert_peak_bounds(&settle([&p])[0], cap);
            }
        }
    });
}

/// Control for `use_current_thread_one_thread_in_place_stream`: the same pool and in-place scope
/// with a plain `Scope::spawn` instead of a stream.
///
/// Found by review 19's attacks on the ordered stream.
#[test]
fn use_current_thread_one_thread_in_place_plain_spawn() {
    watchdog(20, || {
        let p = treepool::ThreadPoolBuilder::new()
            .num_threads(1)
            .use_current_thread()
            .build()
            .unwrap();
        let hit = AtomicBool::new(false);
        p.in_place_scope(|s| s.spawn(|_| hit.store(true, SeqCst)));
        assert!(hit.load(SeqCst));
        assert_idle(&p.stats());
    });
}

/// The builder's pool P is dropped between two `next`s: the wake target last set was
/// `Foreign(P, 0)`; the next wait replaces it (dropping P's registry there, maybe the last Arc).
///
/// Found by the adversarial review of 6711699 (the consumer's wake target, the plain-thread
/// fallback carrier).
#[test]
fn use_current_thread_pool_dropped_mid_stream() {
    watchdog(120, || {
        for round in 0..30u64 {
            let y = pool(2, 1);
            let p = borrowed_pool(1 + (round % 2) as usize, 1);
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
            settle([&y]);
        }
    });
}

/// The stream's consumer waker is fixed at the first `next` (`waker_for(here)`), but the same
/// thread can change what it is between two `next`s without the iterator crossing a `Send`
/// bound: the builder's thread B of a `use_current_thread` pool P is a plain thread outside
/// calls, and P's worker 0 inside `P.in_place_scope` (whose op is not `Send`). A stream of
/// another pool Y's scope, started inside `P.in_place_scope` (waker: `Foreign(P, 0)`), consumed
/// outside it: B parks as a plain thread, and the completer wakes P's worker 0 in P's `Sleep`,
/// not B's park. Then the reverse: started as a plain thread (waker: `Thread(B)`, unpark),
/// consumed inside `P.in_place_scope` (B sleeps in P's `Sleep`).
///
/// Seen in gdb at the hang: (1) B in `wait_on` -> `thread::park` (src/worker/registry.rs:491), Y's two
/// workers asleep in `main_loop`; (2) B in `wait_on` -> `WorkerThread::wait_until` ->
/// `Sleep::sleep` of P, Y's workers asleep. The 10-round tests failed in each of 4 runs here
/// (debug); the 1-round versions hung 3 of 4 and 4 of 4 alone, and under ASan.
///
/// Found by the final review of 6be5505 (plain-thread consumers' carriers, aside sleep, try_scope
/// marks, consumers that change kind).
#[test]
fn a_stream_started_inside_a_borrowed_workers_call_consumed_outside() {
    let out = watchdog(60, || {
        (0..10)
            .map(|_| {
                let y = pool(2, 2);
                let p = borrowed_pool(1, 1);
                let got: Vec<u64> = y.in_place_scope(|s| {
                    let mut kept = None;
                    let mut got = Vec::new();
                    p.in_place_scope(|_| {
                        let mut it = s
                            .map_ordered(0..20u64, |i| {
                                thread::sleep(Duration::from_millis(20));
                                i
                            })
                            .window(2);
                        got.push(it.next().unwrap());
                        kept = Some(it);
                    });
                    got.extend(kept.unwrap());
                    got
                });
                drop(p);
                got
            })
            .collect::<Vec<_>>()
    });
    for got in out {
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    }
}

/// Found by the final review of 6be5505 (plain-thread consumers' carriers, aside sleep, try_scope
/// marks, consumers that change kind).
#[test]
fn a_stream_started_outside_a_borrowed_workers_call_consumed_inside() {
    let out = watchdog(60, || {
        (0..10)
            .map(|_| {
                let y = pool(2, 2);
                let p = borrowed_pool(1, 1);
                let got: Vec<u64> = y.in_place_scope(|s| {
                    let mut it = s
                        .map_ordered(0..20u64, |i| {
                            thread::sleep(Duration::from_millis(20));
                            i
                        })
                        .window(2);
                    let mut got = vec![it.next().unwrap()];
                    p.in_place_scope(|_| got.extend(it.by_ref()));
                    got
                });
                drop(p);
                got
            })
            .collect::<Vec<_>>()
    });
    for got in out {
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    }
}
