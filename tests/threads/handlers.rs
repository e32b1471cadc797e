//! The builder's handlers (`src/api/builder.rs`, `docs/design.md` §4.9): start and exit handlers,
//! their panics, `spawn_handler` and `ThreadBuilder`, `build_scoped`, and the stack headroom of a
//! spawn handler's thread. Every test that could hang runs under a watchdog; those that could
//! abort the process run in a child process of this binary.

use crate::common;
use crate::common::{assert_idle, assert_peak_bounds, settle, spin_until, watchdog};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use treepool::{Scope, ThreadPool, ThreadPoolBuilder};

/// The indices a handler was called with, in call order.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<Vec<usize>>>);

impl Calls {
    pub(crate) fn record(&self, index: usize) {
        self.0.lock().unwrap().push(index);
    }
    pub(crate) fn sorted(&self) -> Vec<usize> {
        let mut calls = self.0.lock().unwrap().clone();
        calls.sort_unstable();
        calls
    }
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A scope of `n` spawned jobs that each spin a little, on `pool`: work for every worker.
pub(crate) fn fan_out(pool: &ThreadPool, n: usize) -> HashSet<usize> {
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
        let [stats] = settle([&pool]);
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
        let [stats] = settle([&pool]);
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
    common::isolated!(150, || {
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
        settle([&pool]);
        drop(pool);
        spin_until(|| exits.len() == 2);
    });
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
        let [stats] = settle([&pool]);
        assert_peak_bounds(&stats, 1);
        assert!(stats.admitted_from_pool >= 4, "{stats:?}");
    });
}

/// A spawn handler on std threads of `stack` bytes named `custom-{i}`, whose handles go to
/// `handles`; fails with `fail_at`'s index.
pub(crate) fn custom_spawn(
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

pub(crate) fn join_all(handles: &Mutex<Vec<JoinHandle<()>>>) -> usize {
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
        let [stats] = settle([&pool]);
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
                    let [stats] = settle([pool]);
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

/// A spawn-first chain: every link stays in flight on one token, waiting in its second spawn.
pub(crate) fn link<'s>(s: &Scope<'s>, d: usize, ran: &'s AtomicUsize) {
    ran.fetch_add(1, Ordering::Relaxed);
    if d == 0 {
        return;
    }
    s.spawn(move |s| link(s, d - 1, ran));
    s.spawn(move |_| {
        ran.fetch_add(1, Ordering::Relaxed);
    });
}

pub(crate) fn chain(pool: &ThreadPool, links: usize) {
    let ran = AtomicUsize::new(0);
    pool.scope(|s| link(s, links, &ran));
    assert_eq!(ran.into_inner(), 2 * links + 1);
}

/// Runs a chain of `links` on `pool` from the calling thread and checks that it reached stack
/// segments, with no overflow on the way.
pub(crate) fn deep_chain_on_segments(pool: &ThreadPool, links: usize) {
    chain(pool, links);
    let [stats] = settle([pool]);
    assert!(stats.stack_segments > 0, "{stats:?}");
    assert_peak_bounds(&stats, 1);
}

#[test]
fn headroom_reads_the_stack_of_a_spawn_handler_thread() {
    // Told 16 MiB, the thread has 256 KiB: a rule that believed the builder would start every
    // job on the thread's own stack and overflow it.
    common::isolated!(150, || {
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
