//! The executor's behaviour: join, scope, spawn, install, panics, threads, builder, drop.
//! Every test runs under a watchdog, so a hang fails instead of stalling CI.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use common::{join_until, pool, spin_until, watchdog};

fn fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn sum_tree(lo: u64, hi: u64) -> u64 {
    if hi - lo <= 1 {
        return lo;
    }
    let mid = (lo + hi) / 2;
    let (a, b) = treepool::join(|| sum_tree(lo, mid), || sum_tree(mid, hi));
    a + b
}

#[test]
fn join_results_on_1_2_and_4_threads() {
    watchdog(60, || {
        for threads in [1, 2, 4] {
            for cap in [1, 3, 16] {
                let pool = pool(threads, cap);
                assert_eq!(
                    pool.install(|| fib(20)),
                    6765,
                    "{threads} threads cap {cap}"
                );
                assert_eq!(pool.install(|| sum_tree(0, 10_000)), 49_995_000);
                assert_eq!(pool.join(|| "a", || 7), ("a", 7));
                common::assert_idle(&pool.stats());
            }
        }
    });
}

#[test]
fn join_from_outside_uses_the_global_pool() {
    watchdog(30, || {
        let (a, b) = treepool::join(|| fib(15), || treepool::current_thread_index().is_some());
        assert_eq!(a, 610);
        assert!(b, "the join ran on a worker of the global pool");
    });
}

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

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<&str>() {
        Ok(s) => s.to_string(),
        Err(payload) => *payload.downcast::<String>().expect("a string panic"),
    }
}

fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(panic_message)
}

#[test]
fn panics_in_a_in_b_and_in_both() {
    watchdog(30, || {
        let pool = pool(2, 2);
        let b_ran = AtomicBool::new(false);
        let err = catch(|| pool.join(|| panic!("in a"), || b_ran.store(true, Ordering::SeqCst)));
        assert_eq!(err.unwrap_err(), "in a");
        assert!(b_ran.load(Ordering::SeqCst), "b still ran");
        let err = catch(|| pool.join(|| 1, || -> u32 { panic!("in b") }));
        assert_eq!(err.unwrap_err(), "in b");
        let err = catch(|| pool.join(|| -> u32 { panic!("a wins") }, || -> u32 { panic!("b") }));
        assert_eq!(err.unwrap_err(), "a wins");
        // The pool still works and is idle.
        assert_eq!(pool.install(|| fib(10)), 55);
        common::assert_idle(&pool.stats());
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
fn panic_in_a_detached_job_goes_to_the_handler_and_the_pool_survives() {
    watchdog(30, || {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let pool = treepool::ThreadPoolBuilder::new()
            .num_threads(1)
            .max_inflight(1)
            .panic_handler(move |p| tx.lock().unwrap().send(panic_message(p)).unwrap())
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
fn cross_pool_a_b_a_does_not_deadlock_with_one_token_each() {
    watchdog(60, || {
        for threads in [1, 2] {
            let a = Arc::new(pool(threads, 1));
            let b = Arc::new(pool(threads, 1));
            let (a2, b2) = (a.clone(), b.clone());
            let result = a.install(move || {
                let a3 = a2.clone();
                b2.install(move || {
                    let inner = a3.install(|| fib(12));
                    let again = a3.scope(|s| {
                        s.spawn(|_| {});
                        7
                    });
                    inner + again
                })
            });
            assert_eq!(result, 151);
            common::assert_idle(&a.stats());
            common::assert_idle(&b.stats());
        }
    });
}

#[test]
fn cross_pool_calls_from_many_jobs_of_the_other_pool() {
    // Several jobs of B, all below one job of A that holds A's only token, call back into A at
    // once: each runs on its caller's credit, none waits for A's token.
    watchdog(60, || {
        let a = Arc::new(pool(2, 1));
        let b = Arc::new(pool(3, 4));
        let total = AtomicUsize::new(0);
        let (a2, b2) = (a.clone(), b.clone());
        a.install(|| {
            b2.scope(|s| {
                for _ in 0..12 {
                    let a3 = a2.clone();
                    let total = &total;
                    s.spawn(move |_| {
                        let v = a3.install(|| fib(10));
                        total.fetch_add(v as usize, Ordering::Relaxed);
                    });
                }
            })
        });
        assert_eq!(total.into_inner(), 12 * 55);
        common::assert_idle(&a.stats());
    });
}

#[test]
fn a_call_from_another_pools_job_runs_on_credit_and_is_counted() {
    watchdog(60, || {
        let a = pool(1, 1);
        let b = pool(1, 1);
        // From outside, a root of B takes B's only token; its call into A takes none of A's
        // tokens; that call's call back into B takes none of B's.
        let (in_a, in_b) = b.install(|| {
            a.install(|| {
                let in_a = a.stats();
                let in_b = b.install(|| b.stats());
                (in_a, in_b)
            })
        });
        assert_eq!(
            (in_a.tokens_in_use, in_a.calls_in, in_a.executing),
            (0, 1, 1)
        );
        assert_eq!(
            (in_b.tokens_in_use, in_b.calls_in, in_b.executing),
            (1, 1, 2)
        );
        for p in [&a, &b] {
            let stats = p.stats();
            assert_eq!((stats.peak_calls_in, stats.admitted_on_credit), (1, 1));
            common::assert_idle(&stats);
            assert_eq!(stats.calls_in, 0);
        }
        assert_eq!(b.stats().peak_executing, 2);
    });
}

#[test]
fn a_spawn_from_another_pools_job_does_not_wait_for_a_token() {
    // A job of A holds nothing of B, but waiting in B for a token while it holds A's could close
    // a cycle (B's token holder may be waiting for A). So the spawn is queued and returns.
    watchdog(60, || {
        let a = pool(1, 1);
        let b = Arc::new(pool(1, 1));
        let release = Arc::new(AtomicBool::new(false));
        let ran = Arc::new(AtomicBool::new(false));
        let r = release.clone();
        b.spawn(move || spin_until(|| r.load(Ordering::SeqCst))); // holds B's only token
        let (b2, ran2) = (b.clone(), ran.clone());
        a.install(move || b2.spawn(move || ran2.store(true, Ordering::SeqCst)));
        assert!(!ran.load(Ordering::SeqCst), "queued behind B's only token");
        release.store(true, Ordering::SeqCst);
        spin_until(|| ran.load(Ordering::SeqCst));
        common::wait_idle(&b);
        common::assert_idle(&b.stats());
    });
}

#[test]
fn a_scope_spawn_from_another_pools_job_is_left_to_the_scope_owner() {
    // The scope's owner holds B's only token and waits for the scope's end; a job it waits for
    // is spawned from A. Queued for a pool token it would wait for the owner's token forever;
    // the owner admits it as its own child instead.
    watchdog(60, || {
        for (a_threads, b_threads) in [(1, 1), (2, 2)] {
            let a = pool(a_threads, 1);
            let b = pool(b_threads, 1);
            let ran = AtomicUsize::new(0);
            b.scope(|s| {
                a.install(|| {
                    for _ in 0..3 {
                        s.spawn(|s| {
                            ran.fetch_add(1, Ordering::SeqCst);
                            // From inside: a child of the deferred job, as usual.
                            s.spawn(|_| {
                                ran.fetch_add(1, Ordering::SeqCst);
                            });
                        });
                    }
                });
                // From a job of B on the owner's loan, too.
                s.spawn(|s| {
                    a.install(|| {
                        s.spawn(|_| {
                            ran.fetch_add(1, Ordering::SeqCst);
                        })
                    })
                });
            });
            assert_eq!(ran.load(Ordering::SeqCst), 7);
            common::wait_idle(&a);
            common::wait_idle(&b);
            common::assert_idle(&a.stats());
            common::assert_idle(&b.stats());
        }
    });
}

#[test]
fn a_waiting_thread_hands_back_its_own_join_half_instead_of_burying_a_lender() {
    // Pool A (1 thread, 1 token): job J runs join(a, b); `a` spawns a detached D on J's loan,
    // then waits in pool C, so A's thread helps and runs D above J's frame. D calls into pool B
    // and, while it waits, A's thread finds no other work and takes J's private `b` itself.
    // Run inline there, `b` would spawn a child of J needing J's loan, held by D, buried under
    // `b`: a deadlock. Instead `b` is handed back (it cannot be admitted) and J runs it once D
    // has returned.
    watchdog(60, || {
        let a = Arc::new(pool(1, 1));
        let b_pool = Arc::new(pool(1, 1));
        let c_pool = pool(1, 1);
        let ran_b_child = Arc::new(AtomicBool::new(false));
        let d_done = Arc::new(AtomicBool::new(false));
        let (a2, ran) = (a.clone(), ran_b_child.clone());
        a.install(|| {
            treepool::join(
                || {
                    let (a3, b_pool, done) = (a2.clone(), b_pool.clone(), d_done.clone());
                    treepool::spawn(move || {
                        // Wait in B until A's thread has met `b` and handed it back.
                        b_pool.install(|| spin_until(|| a3.stats().handed_back >= 1));
                        done.store(true, Ordering::SeqCst);
                    });
                    c_pool.install(|| spin_until(|| d_done.load(Ordering::SeqCst)));
                },
                || treepool::scope(|s| s.spawn(|_| ran.store(true, Ordering::SeqCst))),
            )
        });
        assert!(ran_b_child.load(Ordering::SeqCst));
        common::wait_idle(&a);
        common::assert_idle(&a.stats());
    });
}

#[test]
fn a_join_half_met_while_its_job_waits_to_admit_a_spawn_is_not_run_as_that_job() {
    // Pool of 2 threads, 1 token. The scope job J lends its token to D, which the other worker
    // runs for 300 ms. Then J joins: `a` spawns, and waits for a token (J's is lent, none is
    // free); meanwhile the thread takes J's private `b`. Run as part of J there, `b`'s own
    // spawn would be a second child of J waiting for its token, which the token table does not
    // allow (debug builds assert it). So `b` is handed back, and J runs it after `a`.
    watchdog(60, || {
        let pool = pool(2, 1);
        let d_started = AtomicBool::new(false);
        let children = AtomicUsize::new(0);
        pool.scope(|s| {
            s.spawn(|_| {
                d_started.store(true, Ordering::SeqCst);
                let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
            });
            // Until the other worker took D, so that J's token is out when `a` spawns. (If it
            // has not in 2 s, this thread runs D itself and the case is not covered; it cannot
            // fail for it.)
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            spin_until(|| d_started.load(Ordering::SeqCst) || std::time::Instant::now() > deadline);
            let child = |_: &treepool::Scope<'_>| {
                children.fetch_add(1, Ordering::SeqCst);
            };
            treepool::join(|| s.spawn(child), || s.spawn(child));
        });
        assert_eq!(children.load(Ordering::SeqCst), 2);
        common::wait_idle(&pool);
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

#[test]
fn steals_are_counted() {
    watchdog(30, || {
        let pool = pool(2, 2);
        let b_started = AtomicBool::new(false);
        pool.join(
            // `a` waits until `b` runs, which only another worker can make happen: by stealing
            // it once this thread, at one of `join_until`'s joins, has promoted `b` (its oldest
            // private half) for the idle worker that asked for work.
            || join_until(|| b_started.load(Ordering::SeqCst)),
            || b_started.store(true, Ordering::SeqCst),
        );
        let stats = pool.stats();
        assert!(stats.steals >= 1 && stats.promotions >= 1, "{stats:?}");
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
