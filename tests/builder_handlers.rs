//! The builder's handlers and user-run workers (issue 18; `src/builder.rs`, `src/borrowed.rs`,
//! `docs/design.md` §4.8): start and exit handlers, `spawn_handler` and `ThreadBuilder`,
//! `build_scoped`, `use_current_thread`, `max_num_threads` and the clamping of `num_threads`,
//! and the builder's edge cases of the independent review. Every test that could hang runs
//! under a watchdog; those that could abort the process (a stack overflow, a failed allocation)
//! or that set the environment run in a child process of this binary.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread::JoinHandle;

use common::{
    assert_idle, assert_peak_bounds, child_outcome, spin_until, tail, wait_idle, watchdog,
};
use treepool::{Scope, ThreadPool, ThreadPoolBuilder};

/// Set in the child processes: the test to run there.
const CHILD_ENV: &str = "TREEPOOL_BUILDER_CHILD";

/// Runs `case` in a child process of this binary (test `name`), or, in that child, runs it.
fn in_child(name: &str, case: fn()) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return watchdog(120, case);
    }
    if let Err(report) = child_outcome(name, CHILD_ENV, "1", 150) {
        panic!("{}", tail(&report, 4000));
    }
}

/// The indices a handler was called with, in call order.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<usize>>>);

impl Calls {
    fn record(&self, index: usize) {
        self.0.lock().unwrap().push(index);
    }
    fn sorted(&self) -> Vec<usize> {
        let mut calls = self.0.lock().unwrap().clone();
        calls.sort_unstable();
        calls
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A scope of `n` spawned jobs that each spin a little, on `pool`: work for every worker.
fn fan_out(pool: &ThreadPool, n: usize) -> HashSet<usize> {
    let ran = Mutex::new(HashSet::new());
    let count = AtomicUsize::new(0);
    pool.scope(|s| {
        for _ in 0..n {
            s.spawn(|_| {
                let until = std::time::Instant::now() + std::time::Duration::from_micros(50);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
                count.fetch_add(1, Ordering::Relaxed);
                ran.lock()
                    .unwrap()
                    .insert(treepool::current_thread_index().unwrap());
            });
        }
    });
    assert_eq!(count.into_inner(), n);
    ran.into_inner().unwrap()
}

#[test]
fn start_and_exit_handlers_run_once_per_worker_outside_any_job() {
    watchdog(60, || {
        let (starts, exits) = (Calls::default(), Calls::default());
        let gate = Arc::new(Barrier::new(4));
        let (s, e, g) = (starts.clone(), exits.clone(), gate.clone());
        let pool = ThreadPoolBuilder::new()
            .num_threads(3)
            .max_inflight(2)
            .start_handler(move |index| {
                assert_eq!(treepool::current_thread_index(), Some(index));
                s.record(index);
                g.wait();
            })
            .exit_handler(move |index| {
                assert_eq!(treepool::current_thread_index(), Some(index));
                e.record(index);
            })
            .build()
            .unwrap();
        // Every worker is inside its start handler now: none holds a token or runs a job.
        spin_until(|| starts.len() == 3);
        let stats = pool.stats();
        assert_idle(&stats);
        gate.wait();
        fan_out(&pool, 200);
        assert_eq!(starts.sorted(), [0, 1, 2]);
        assert_eq!(exits.len(), 0, "no exit handler before the pool is dropped");
        wait_idle(&pool);
        let stats = pool.stats();
        assert_idle(&stats);
        assert_peak_bounds(&stats, 2);
        drop(pool);
        spin_until(|| exits.len() == 3);
        assert_eq!(
            exits.sorted(),
            [0, 1, 2],
            "exit ran exactly once per worker"
        );
        assert_eq!(
            starts.sorted(),
            [0, 1, 2],
            "start ran exactly once per worker"
        );
    });
}

#[test]
fn handler_panics_go_to_the_panic_handler_and_leak_no_token() {
    watchdog(60, || {
        let caught = Arc::new(Mutex::new(Vec::new()));
        let c = caught.clone();
        let pool = ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(1)
            .panic_handler(move |payload| c.lock().unwrap().push(common::describe(payload)))
            .start_handler(|index| {
                if index == 1 {
                    panic!("start {index}");
                }
            })
            .exit_handler(|index| panic!("exit {index}"))
            .build()
            .unwrap();
        spin_until(|| caught.lock().unwrap().len() == 1);
        // Both workers survived the start handler's panic and run work.
        for _ in 0..20 {
            fan_out(&pool, 20);
        }
        wait_idle(&pool);
        let stats = pool.stats();
        assert_idle(&stats);
        assert_peak_bounds(&stats, 1);
        drop(pool);
        spin_until(|| caught.lock().unwrap().len() == 3);
        let mut got = caught.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, ["exit 0", "exit 1", "start 1"]);
    });
}

#[test]
fn handler_panic_without_a_panic_handler_is_printed_and_the_pool_works() {
    // rayon aborts here; treepool prints, as for a detached job. A child: an abort must fail
    // this test only.
    in_child(
        "handler_panic_without_a_panic_handler_is_printed_and_the_pool_works",
        || {
            let exits = Calls::default();
            let e = exits.clone();
            let pool = ThreadPoolBuilder::new()
                .num_threads(2)
                .max_inflight(2)
                .start_handler(|index| panic!("start {index}"))
                .exit_handler(move |index| {
                    e.record(index);
                    panic!("exit {index}")
                })
                .build()
                .unwrap();
            fan_out(&pool, 100);
            wait_idle(&pool);
            assert_idle(&pool.stats());
            drop(pool);
            spin_until(|| exits.len() == 2);
        },
    );
}

#[test]
fn handlers_may_call_into_their_pool_on_a_pool_token() {
    watchdog(60, || {
        let spawned = Arc::new(AtomicUsize::new(0));
        let joined = Calls::default();
        let (s, j) = (spawned.clone(), joined.clone());
        let pool = ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(1)
            .start_handler(move |index| {
                // A root job on a pool token: `a` runs here if the token was free at once, else
                // where the other handler's root granted it (one token for two handlers).
                let (a, b) = treepool::join(treepool::current_thread_index, || 7);
                assert!(matches!(a, Some(0 | 1)), "{a:?} on {index}");
                assert_eq!(b, 7);
                j.record(index);
                let s = s.clone();
                treepool::spawn(move || {
                    s.fetch_add(1, Ordering::SeqCst);
                });
            })
            .build()
            .unwrap();
        spin_until(|| spawned.load(Ordering::SeqCst) == 2);
        assert_eq!(joined.sorted(), [0, 1]);
        wait_idle(&pool);
        let stats = pool.stats();
        assert_idle(&stats);
        assert_peak_bounds(&stats, 1);
        assert!(stats.admitted_from_pool >= 4, "{stats:?}");
    });
}

/// A spawn handler on std threads of `stack` bytes named `custom-{i}`, whose handles go to
/// `handles`; fails with `fail_at`'s index.
fn custom_spawn(
    handles: Arc<Mutex<Vec<JoinHandle<()>>>>,
    stack: usize,
    fail_at: Option<usize>,
) -> impl FnMut(treepool::ThreadBuilder) -> std::io::Result<()> {
    move |thread| {
        if Some(thread.index()) == fail_at {
            return Err(std::io::Error::other("refused by the test"));
        }
        let handle = std::thread::Builder::new()
            .name(format!("custom-{}", thread.index()))
            .stack_size(stack)
            .spawn(move || thread.run())?;
        handles.lock().unwrap().push(handle);
        Ok(())
    }
}

fn join_all(handles: &Mutex<Vec<JoinHandle<()>>>) -> usize {
    let handles = std::mem::take(&mut *handles.lock().unwrap());
    let n = handles.len();
    handles
        .into_iter()
        .for_each(|h| h.join().expect("a worker exits"));
    n
}

#[test]
fn spawn_handler_runs_the_workers_on_the_users_threads() {
    watchdog(60, || {
        let handles = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let pool = ThreadPoolBuilder::new()
            .num_threads(3)
            .max_inflight(2)
            .stack_size(1 << 20)
            .thread_name(|i| format!("told-{i}"))
            .spawn_handler({
                let mut spawn = custom_spawn(handles.clone(), 512 << 10, None);
                move |thread| {
                    let told = (thread.index(), thread.name().map(str::to_owned));
                    s.lock().unwrap().push((told, thread.stack_size()));
                    spawn(thread)
                }
            })
            .build()
            .unwrap();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        let told: Vec<_> = (0..3)
            .map(|i| ((i, Some(format!("told-{i}"))), Some(1 << 20)))
            .collect();
        assert_eq!(
            seen, told,
            "each ThreadBuilder says what the builder was told"
        );
        let names = Mutex::new(HashSet::new());
        pool.scope(|s| {
            for _ in 0..300 {
                s.spawn(|_| {
                    let name = std::thread::current().name().map(str::to_owned);
                    names.lock().unwrap().insert(name.unwrap());
                });
            }
        });
        assert!(names
            .into_inner()
            .unwrap()
            .iter()
            .all(|n| n.starts_with("custom-")));
        assert_eq!(pool.current_num_threads(), 3, "B6");
        wait_idle(&pool);
        let stats = pool.stats();
        assert_idle(&stats);
        assert_peak_bounds(&stats, 2);
        drop(pool);
        assert_eq!(
            join_all(&handles),
            3,
            "every user thread exits after the drop"
        );
    });
}

#[test]
fn spawn_handler_error_is_a_build_error_with_no_worker_left() {
    watchdog(60, || {
        let handles = Arc::new(Mutex::new(Vec::new()));
        let exits = Calls::default();
        let e = exits.clone();
        let err = ThreadPoolBuilder::new()
            .num_threads(4)
            .exit_handler(move |i| e.record(i))
            .spawn_handler(custom_spawn(handles.clone(), 256 << 10, Some(2)))
            .build()
            .expect_err("the handler refused worker 2");
        assert!(err.to_string().contains("refused by the test"), "{err}");
        assert_eq!(join_all(&handles), 2, "workers 0 and 1 exit");
        assert_eq!(exits.sorted(), [0, 1]);
    });
}

#[test]
fn spawn_handler_panic_leaves_no_worker_behind() {
    watchdog(60, || {
        let handles = Arc::new(Mutex::new(Vec::new()));
        let mut spawn = custom_spawn(handles.clone(), 256 << 10, None);
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ThreadPoolBuilder::new()
                .num_threads(3)
                .spawn_handler(move |thread| match thread.index() {
                    1 => panic!("spawn handler panics"),
                    _ => spawn(thread),
                })
                .build()
        }));
        assert!(built.is_err(), "the handler's panic reaches the caller");
        assert_eq!(join_all(&handles), 1, "worker 0 exits");
    });
}

#[test]
fn build_scoped_runs_the_workers_in_a_thread_scope() {
    watchdog(60, || {
        let wrapped = AtomicUsize::new(0);
        let local = [1u64, 2, 3];
        let result = ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(3)
            .build_scoped(
                |thread| {
                    // Borrows from the caller's frame: the threads are scoped.
                    wrapped.fetch_add(1, Ordering::SeqCst);
                    thread.run()
                },
                |pool| {
                    let sum = pool.install(|| local.iter().sum::<u64>());
                    fan_out(pool, 200);
                    wait_idle(pool);
                    let stats = pool.stats();
                    assert_idle(&stats);
                    assert_peak_bounds(&stats, 3);
                    sum
                },
            )
            .unwrap();
        assert_eq!(result, 6);
        // `build_scoped` returned: the scope joined every worker.
        assert_eq!(wrapped.into_inner(), 2);
    });
}

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
        wait_idle(&pool);
        let stats = pool.stats();
        assert_idle(&stats);
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

/// A spawn-first chain: every link stays in flight on one token, waiting in its second spawn.
fn link<'s>(s: &Scope<'s>, d: usize, ran: &'s AtomicUsize) {
    ran.fetch_add(1, Ordering::Relaxed);
    if d == 0 {
        return;
    }
    s.spawn(move |s| link(s, d - 1, ran));
    s.spawn(move |_| {
        ran.fetch_add(1, Ordering::Relaxed);
    });
}

fn chain(pool: &ThreadPool, links: usize) {
    let ran = AtomicUsize::new(0);
    pool.scope(|s| link(s, links, &ran));
    assert_eq!(ran.into_inner(), 2 * links + 1);
}

#[test]
fn worker_0_outside_the_pool_is_never_waited_for_at_max_inflight_1() {
    watchdog(60, || {
        let pool = Arc::new(
            ThreadPoolBuilder::new()
                .num_threads(2)
                .max_inflight(1)
                .use_current_thread()
                .build()
                .unwrap(),
        );
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
        wait_idle(&pool);
        let stats = pool.stats();
        assert_idle(&stats);
        assert_peak_bounds(&stats, 1);
        assert_eq!(stats.calls_in, 0);
    });
}

/// Runs a chain of `links` on `pool` from the calling thread and checks that it reached stack
/// segments, with no overflow on the way.
fn deep_chain_on_segments(pool: &ThreadPool, links: usize) {
    chain(pool, links);
    wait_idle(pool);
    let stats = pool.stats();
    assert!(stats.stack_segments > 0, "{stats:?}");
    assert_idle(&stats);
    assert_peak_bounds(&stats, 1);
}

#[test]
fn headroom_reads_the_stack_of_a_spawn_handler_thread() {
    // Told 16 MiB, the thread has 256 KiB: a rule that believed the builder would start every
    // job on the thread's own stack and overflow it.
    in_child("headroom_reads_the_stack_of_a_spawn_handler_thread", || {
        let handles = Arc::new(Mutex::new(Vec::new()));
        let pool = ThreadPoolBuilder::new()
            .num_threads(1)
            .max_inflight(1)
            .stack_size(16 << 20)
            .spawn_handler(custom_spawn(handles.clone(), 256 << 10, None))
            .build()
            .unwrap();
        deep_chain_on_segments(&pool, 3000);
        drop(pool);
        join_all(&handles);
    });
}

#[test]
fn headroom_reads_the_stack_of_the_builders_thread() {
    // The builder's thread has 512 KiB and is about 100 KiB deep in it when it builds and calls
    // in; the builder was told 16 MiB.
    in_child("headroom_reads_the_stack_of_the_builders_thread", || {
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

/// Live threads of this process whose name starts with `prefix` (Linux: /proc/self/task).
fn live_threads(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn interior_nul_in_a_later_name_is_a_build_error_with_no_worker_left() {
    watchdog(60, || {
        let exits = Calls::default();
        let e = exits.clone();
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ThreadPoolBuilder::new()
                .num_threads(3)
                .thread_name(|i| match i {
                    0 => "nulcase-0".to_string(),
                    _ => format!("nulcase\0{i}"),
                })
                .exit_handler(move |i| e.record(i))
                .build()
        }));
        let err = built
            .expect("build must not panic")
            .expect_err("a name with a NUL is a build error");
        assert!(err.to_string().contains("NUL"), "{err}");
        assert_eq!(live_threads("nulcase"), 0, "no worker was started");
        assert_eq!(exits.len(), 0, "no worker was started");
    });
}

#[test]
fn num_threads_env_not_unicode_is_a_build_error() {
    in_child("num_threads_env_not_unicode_is_a_build_error", || {
        use std::os::unix::ffi::OsStrExt;
        let value = std::ffi::OsStr::from_bytes(b"\xff4");
        std::env::set_var(treepool::NUM_THREADS_ENV, value);
        let err = ThreadPoolBuilder::new()
            .build()
            .expect_err("a value that is not UTF-8 is a build error");
        assert!(err.to_string().contains(treepool::NUM_THREADS_ENV), "{err}");
        // An explicit count does not read the variable.
        assert_eq!(
            ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap()
                .current_num_threads(),
            1
        );
    });
}

#[test]
fn num_threads_env_above_the_maximum_is_clamped() {
    in_child("num_threads_env_above_the_maximum_is_clamped", || {
        let too_many = (treepool::max_num_threads() + 1).to_string();
        std::env::set_var(treepool::NUM_THREADS_ENV, too_many);
        let started = AtomicUsize::new(0);
        // Threads that are never run: the count is what matters.
        let pool = ThreadPoolBuilder::new()
            .spawn_handler(|_thread| {
                started.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .build()
            .unwrap();
        assert_eq!(pool.current_num_threads(), treepool::max_num_threads());
        assert_eq!(started.into_inner(), treepool::max_num_threads());
    });
}

/// `num_threads(n)` for a huge `n`: neither a panic nor an abort (the child would die), but a
/// pool of `max_num_threads()` workers, here started by a handler that runs none of them.
fn huge_num_threads(n: usize) {
    let started = AtomicUsize::new(0);
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ThreadPoolBuilder::new()
            .num_threads(n)
            .spawn_handler(|_thread| {
                started.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .build()
    }));
    let pool = built
        .expect("build must not panic")
        .expect("a clamped pool");
    assert_eq!(pool.current_num_threads(), treepool::max_num_threads());
    assert_eq!(pool.max_inflight(), 2 * treepool::max_num_threads());
    assert_eq!(started.into_inner(), treepool::max_num_threads());
}

#[test]
fn num_threads_usize_max_is_clamped() {
    in_child("num_threads_usize_max_is_clamped", || {
        huge_num_threads(usize::MAX)
    });
}

#[test]
fn num_threads_two_to_the_forty_is_clamped() {
    in_child("num_threads_two_to_the_forty_is_clamped", || {
        huge_num_threads(1 << 40)
    });
}

#[test]
fn thread_pool_build_error_is_rayons_name_for_build_error() {
    let err: treepool::ThreadPoolBuildError = ThreadPoolBuilder::new()
        .max_inflight(0)
        .build()
        .unwrap_err();
    let same: treepool::BuildError = err.clone();
    assert_eq!(err, same);
    // The builder is generic now; code that names no spawn type still compiles as before.
    let builder: ThreadPoolBuilder = ThreadPoolBuilder::default();
    let pool = builder.num_threads(1).build().unwrap();
    assert_eq!(pool.current_num_threads(), 1);
    let pool = ThreadPoolBuilder::default().num_threads(1).build().unwrap();
    assert_eq!(pool.install(treepool::current_thread_index), Some(0));
}
