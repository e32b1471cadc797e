//! The builder's options and errors: thread names with an interior NUL, `TREEPOOL_NUM_THREADS`
//! that is not Unicode or above the maximum, `num_threads` clamped to `max_num_threads`, build
//! errors that name the problem, big and pinned stacks, names and indices. Tests that set the
//! environment or could abort run in a child process of this binary.

use super::handlers::Calls;
use crate::common;
use crate::common::{catch, fib, pool, spin_until, watchdog};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use treepool::ThreadPoolBuilder;

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
    common::isolated!(150, || {
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

/// Above the limit, `TREEPOOL_NUM_THREADS` is refused, not reduced as `num_threads(n)` is
/// (issue 36: treepool's own variables stop with a message naming the variable and the value),
/// and no worker is started first.
#[test]
fn num_threads_env_above_the_maximum_is_an_error_before_any_worker() {
    common::isolated!(150, || {
        let too_many = (treepool::max_num_threads() + 1).to_string();
        std::env::set_var(treepool::NUM_THREADS_ENV, &too_many);
        let started = AtomicUsize::new(0);
        let err = ThreadPoolBuilder::new()
            .spawn_handler(|_thread| {
                started.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .build()
            .unwrap_err();
        let named = format!("{}={too_many:?}", treepool::NUM_THREADS_ENV);
        assert!(err.to_string().starts_with(&named), "{err}");
        assert_eq!(started.into_inner(), 0);
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
    assert_eq!(
        pool.max_inflight(),
        treepool::DEFAULT_TOKENS_PER_THREAD * treepool::max_num_threads()
    );
    assert_eq!(started.into_inner(), treepool::max_num_threads());
}

#[test]
fn num_threads_usize_max_is_clamped() {
    common::isolated!(150, || { huge_num_threads(usize::MAX) });
}

#[test]
fn num_threads_two_to_the_forty_is_clamped() {
    common::isolated!(150, || { huge_num_threads(1 << 40) });
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

#[test]
fn panic_in_install_is_raised_to_the_caller() {
    watchdog(30, || {
        let pool = pool(2, 1);
        let err = catch(|| pool.install(|| -> u8 { panic!("installed") }));
        assert_eq!(err.unwrap_err(), "installed");
        assert_eq!(pool.install(|| 5), 5);
        common::assert_idle(&pool.stats());
    });
}

#[test]
fn eight_outside_threads_share_one_pool() {
    watchdog(60, || {
        let pool = Arc::new(pool(2, 3));
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut total = 0;
                    for _ in 0..20 {
                        total += pool.install(|| fib(12));
                        let scoped = AtomicUsize::new(0);
                        pool.scope(|s| {
                            for _ in 0..5 {
                                s.spawn(|_| {
                                    scoped.fetch_add(1, Ordering::Relaxed);
                                });
                            }
                        });
                        assert_eq!(scoped.into_inner(), 5);
                    }
                    (i, total)
                })
            })
            .collect();
        for h in handles {
            let (_, total) = h.join().unwrap();
            assert_eq!(total, 20 * 144);
        }
        common::assert_idle(&pool.stats());
    });
}

#[test]
fn thread_names_and_indices() {
    watchdog(30, || {
        let pool = treepool::ThreadPoolBuilder::new()
            .num_threads(3)
            .thread_name(|i| format!("tp-worker-{i}"))
            .build()
            .unwrap();
        assert_eq!(pool.current_num_threads(), 3);
        assert_eq!(treepool::current_thread_index(), None);
        let seen = Mutex::new(Vec::new());
        let started = AtomicUsize::new(0);
        pool.scope(|s| {
            for _ in 0..3 {
                s.spawn(|_| {
                    // Hold each job until all three run at once, so every worker takes one.
                    started.fetch_add(1, Ordering::SeqCst);
                    spin_until(|| started.load(Ordering::SeqCst) == 3);
                    let name = std::thread::current().name().map(str::to_owned);
                    let index = treepool::current_thread_index();
                    assert_eq!(treepool::current_num_threads(), 3);
                    seen.lock().unwrap().push((index, name));
                });
            }
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        let expected: Vec<_> = (0..3)
            .map(|i| (Some(i), Some(format!("tp-worker-{i}"))))
            .collect();
        assert_eq!(seen, expected);
    });
}

fn depth(n: u64) -> u64 {
    let pad = [n as u8; 1024];
    if n == 0 {
        return pad[0] as u64;
    }
    depth(std::hint::black_box(n - 1)) + std::hint::black_box(pad)[1] as u64 / 256
}

#[test]
fn a_big_stack_allows_deep_recursion() {
    watchdog(60, || {
        let pool = treepool::ThreadPoolBuilder::new()
            .num_threads(1)
            .stack_size(256 << 20)
            .build()
            .unwrap();
        // Over 20 MB of frames: far more than a default 2 MB worker stack holds.
        assert_eq!(pool.install(|| depth(20_000)), 0);
    });
}

#[test]
fn a_pinned_pool_runs() {
    watchdog(30, || {
        match treepool::ThreadPoolBuilder::new()
            .num_threads(2)
            .pin_threads(true)
            .build()
        {
            Ok(pool) => assert_eq!(pool.install(|| fib(15)), 610),
            // Allowed by the contract where the machine does not report its cores.
            Err(e) => assert!(e.to_string().contains("pin_threads"), "{e}"),
        }
    });
}

#[test]
fn build_errors_name_the_problem() {
    let err = treepool::ThreadPoolBuilder::new()
        .max_inflight(0)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("max_inflight"), "{err}");
    if let Ok(too_many) = usize::try_from(1u64 << 32) {
        let err = treepool::ThreadPoolBuilder::new()
            .max_inflight(too_many)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
    }
    let err = treepool::ThreadPoolBuilder::new()
        .num_threads(2)
        .stack_size(usize::MAX / 2)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("stack size"), "{err}");
    fn assert_error<E: std::error::Error + Send + Sync + 'static>(_: &E) {}
    assert_error(&err);
}

#[test]
fn pool_and_scope_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<treepool::ThreadPool>();
    assert_send_sync::<treepool::Scope<'static>>();
    assert_send_sync::<treepool::BuildError>();
}
