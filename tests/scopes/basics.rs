//! `scope` and `spawn`: borrowing from the stack, nesting, rayon-style recursion, panics of scope
//! jobs and detached jobs, and a pool dropped with detached work queued. Every test runs under a
//! watchdog.

use crate::common;
use crate::common::{catch, pool, spin_until, watchdog};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

#[test]
fn scopes_borrow_from_the_stack() {
    watchdog(30, || {
        let pool = pool(2, 4);
        let mut data: Vec<u64> = (0..1000).collect();
        let total = AtomicUsize::new(0);
        pool.scope(|s| {
            for chunk in data.chunks_mut(10) {
                let total = &total;
                s.spawn(move |_| {
                    for x in chunk.iter_mut() {
                        *x *= 2;
                    }
                    total.fetch_add(chunk.len(), Ordering::Relaxed);
                });
            }
        });
        assert_eq!(total.into_inner(), 1000);
        assert!(data.iter().enumerate().all(|(i, &x)| x == 2 * i as u64));
    });
}

#[test]
fn nested_scopes_and_rayon_style_recursion() {
    watchdog(30, || {
        let pool = pool(2, 2);
        let count = AtomicUsize::new(0);
        pool.scope(|s| {
            s.spawn(|s| {
                count.fetch_add(1, Ordering::Relaxed);
                // A nested scope inside a scoped job, and a spawn on the outer scope.
                treepool::scope(|inner| {
                    for _ in 0..10 {
                        inner.spawn(|_| {
                            count.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
                s.spawn(|_| {
                    count.fetch_add(1, Ordering::Relaxed);
                });
            });
        });
        assert_eq!(count.into_inner(), 12);
    });
}

fn spawn_ternary<'a>(s: &treepool::Scope<'a>, depth: u32, leaves: &'a AtomicUsize) {
    if depth == 0 {
        leaves.fetch_add(1, Ordering::Relaxed);
        return;
    }
    for _ in 0..3 {
        s.spawn(move |s| spawn_ternary(s, depth - 1, leaves));
    }
}

#[test]
fn three_to_the_k_recursive_spawns_all_run() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 2), (4, 3)] {
            let pool = pool(threads, cap);
            let leaves = AtomicUsize::new(0);
            pool.scope(|s| spawn_ternary(s, 7, &leaves));
            assert_eq!(
                leaves.into_inner(),
                3usize.pow(7),
                "{threads} threads cap {cap}"
            );
            common::assert_idle(&pool.stats());
        }
    });
}

#[test]
fn panic_in_a_scope_job_lets_siblings_run() {
    watchdog(30, || {
        let pool = pool(2, 2);
        let ran = AtomicUsize::new(0);
        let err = catch(|| {
            pool.scope(|s| {
                for i in 0..20 {
                    let ran = &ran;
                    s.spawn(move |_| {
                        ran.fetch_add(1, Ordering::SeqCst);
                        if i == 3 {
                            panic!("job 3");
                        }
                    });
                }
            })
        });
        assert_eq!(err.unwrap_err(), "job 3");
        assert_eq!(ran.load(Ordering::SeqCst), 20, "every sibling ran");
        let err = catch(|| {
            pool.scope(|s| {
                s.spawn(|_| {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
                panic!("scope body");
            })
        });
        assert_eq!(err.unwrap_err(), "scope body");
        assert_eq!(ran.load(Ordering::SeqCst), 21, "the body's spawn still ran");
        common::assert_idle(&pool.stats());
    });
}

#[test]
fn panic_in_a_detached_job_goes_to_the_handler_and_the_pool_survives() {
    watchdog(30, || {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let pool = treepool::ThreadPoolBuilder::new()
            .num_threads(1)
            .max_inflight(1)
            .panic_handler(move |p| tx.lock().unwrap().send(common::describe(p)).unwrap())
            .build()
            .unwrap();
        pool.spawn(|| panic!("detached"));
        assert_eq!(rx.recv().unwrap(), "detached");
        // The only worker survived.
        assert_eq!(pool.install(treepool::current_thread_index), Some(0));
        // Without a handler the message is printed and the worker survives too.
        let plain = pool_without_handler();
        plain.spawn(|| panic!("printed, not fatal"));
        assert_eq!(plain.install(|| 3), 3);
    });
}

fn pool_without_handler() -> treepool::ThreadPool {
    pool(1, 1)
}

#[test]
fn dropping_a_pool_with_queued_detached_work_returns_and_the_work_runs() {
    watchdog(60, || {
        let pool = pool(1, 64);
        let (tx, rx) = mpsc::channel();
        let gate = Arc::new(AtomicBool::new(false));
        // The first job holds the only worker until the pool is dropped; the others queue.
        let g = gate.clone();
        pool.spawn(move || spin_until(|| g.load(Ordering::SeqCst)));
        for i in 0..20 {
            let tx = tx.clone();
            pool.spawn(move || tx.send(i).unwrap());
        }
        drop(tx);
        drop(pool); // must not wait for the running job
        gate.store(true, Ordering::SeqCst);
        let mut got: Vec<i32> = rx.iter().collect();
        got.sort();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    });
}
