//! Adversarial review of 95b27a7 (review 18b fixes): attacks on `Scope::owner_job`, on
//! `Scope::credit_admits` and on `scope_fifo::on_caller`. Every test that may hang runs in a
//! child process with a timeout.
//!
//! The shape that breaks: a consumer of `Scope::map_ordered` that is not taken for the scope's
//! owner (design §4.13: "any other consumer spawns one carrier with `Scope::spawn`'s rules ...
//! offer, else defer to the scope's owner") waits for its carrier; a deferred carrier is admitted
//! only by the owner's `admit_deferred`, at the scope's end (`run_scope`), which the consumer's
//! wait keeps the owner from reaching. Since 95b27a7 the code that runs on the owner's thread
//! with another job current (an X job of a scope inside the body) is no longer the owner.

mod common;

use std::time::Duration;

use common::{assert_idle, wait_idle};

/// Prints `y`'s stats after 2 s (to stderr, which `in_child` reports on a hang): what Y holds
/// while the consumer waits.
fn watch<'a>(ts: &'a std::thread::Scope<'a, '_>, y: &'a treepool::ThreadPool) {
    ts.spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        eprintln!("after 2 s, Y: {:?}", y.stats());
    });
}

/// Two jobs of the in-place scope that hold what an owner spawn could get for a while: the
/// first owner spawn takes the credit root's loan, the second Y's only pool token.
fn hold_both<'scope>(s: &treepool::Scope<'scope>) {
    for _ in 0..2 {
        s.spawn(|_| std::thread::sleep(Duration::from_millis(300)));
    }
}

/// The body opens an X scope (`treepool::scope` on W, X's only worker) whose job K consumes an
/// ordered stream of the in-place scope of Y. K runs on W, the owner's thread, when the X
/// scope's end pops it; since 95b27a7 K is not the owner (K, not J, is current), so its carrier
/// is offered (Y's only token is held for 300 ms) and then deferred to the owner, which admits
/// deferred jobs only at the scope's end: below K on W's stack, behind the X scope's end, which
/// waits for K, which waits for the carrier. On 93d4ff7 K's carrier was an owner spawn (a child
/// of the credit root that waits for its loan or a Y token): it ran after 300 ms.
fn x_job_on_the_owners_thread_consumes_an_ordered_stream(y_threads: usize) {
    let x = common::pool(1, 1);
    let y = common::pool(y_threads, 1);
    let got = std::thread::scope(|ts| {
        watch(ts, &y);
        x.install(|| {
            y.in_place_scope(|s| {
                hold_both(s);
                let mut got = Vec::new();
                treepool::scope(|xs| {
                    xs.spawn(|_| {
                        got = s.map_ordered(0..4u64, |i| i * 10).collect();
                    });
                });
                got
            })
        })
    });
    assert_eq!(got, [0, 10, 20, 30]);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn an_x_job_on_the_owners_thread_consumes_an_ordered_stream_of_the_scope() {
    common::isolated(
        "an_x_job_on_the_owners_thread_consumes_an_ordered_stream_of_the_scope",
        "REVIEW18C_CHILD",
        20,
        || {
            x_job_on_the_owners_thread_consumes_an_ordered_stream(2);
            x_job_on_the_owners_thread_consumes_an_ordered_stream(1);
        },
    );
}

/// The same through `install`: a Y job of the scope calls back into X (review 18b's bounce) and
/// the X root R, run on W during the scope's end wait, consumes an ordered stream of the scope.
/// R is not the owner (95b27a7), so its carrier is deferred to the owner, whose end loop is
/// below R on W: it never comes back to `admit_deferred`.
fn bounced_root_consumes_an_ordered_stream() {
    let x = common::pool(1, 1);
    let y = common::pool(2, 1);
    let got = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|ts| {
        watch(ts, &y);
        x.install(|| {
            y.in_place_scope(|s| {
                let (x, got) = (&x, &got);
                // On the credit root's loan: calls back into X, whose root runs on W.
                s.spawn(move |s| {
                    x.install(|| {
                        *got.lock().unwrap() = s.map_ordered(0..4u64, |i| i * 10).collect();
                    });
                });
                // On Y's only pool token, for 300 ms.
                s.spawn(|_| std::thread::sleep(Duration::from_millis(300)));
                // The body returns: W waits for the scope's end, running X's jobs (R).
            });
        });
    });
    assert_eq!(*got.lock().unwrap(), [0, 10, 20, 30]);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn an_x_root_bounced_onto_the_owners_thread_consumes_an_ordered_stream() {
    common::isolated(
        "an_x_root_bounced_onto_the_owners_thread_consumes_an_ordered_stream",
        "REVIEW18C_CHILD",
        20,
        bounced_root_consumes_an_ordered_stream,
    );
}

/// The body's own code, as the second half of a `join` that runs as part of J while the first
/// half's owner spawn waits (`credit_admits` set): its carrier is deferred (the flag), and the
/// half then waits for it above the waiting spawn, so the scope's end never comes.
fn join_half_consumes_while_an_owner_spawn_waits() {
    let x = common::pool(1, 1);
    let y = common::pool(2, 1);
    let got = x.install(|| {
        y.in_place_scope(|s| {
            hold_both(s);
            let ((), got) = treepool::join(
                // Waits for the credit root's loan or Y's token (300 ms).
                || s.spawn(|_| {}),
                || s.map_ordered(0..4u64, |i| i * 10).collect::<Vec<_>>(),
            );
            got
        })
    });
    assert_eq!(got, [0, 10, 20, 30]);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn a_join_half_of_the_body_consumes_an_ordered_stream_while_an_owner_spawn_waits() {
    common::isolated(
        "a_join_half_of_the_body_consumes_an_ordered_stream_while_an_owner_spawn_waits",
        "REVIEW18C_CHILD",
        20,
        join_half_consumes_while_an_owner_spawn_waits,
    );
}

/// A plain thread's in-place scope; a thread started in the body consumes an ordered stream
/// of the scope while Y's only token is held: not the owner, its carrier is deferred, and the
/// owner joins the thread before it can reach its scope's end. (Design §4.13: "a plain thread
/// parks; it holds no token, and nothing waits for it: its carriers are roots or queued spawns
/// of the scope, admitted without it".) Also from another pool's worker as the owner.
fn thread_in_the_body_consumes_an_ordered_stream(from_x: bool) {
    let x = common::pool(1, 1);
    let y = common::pool(2, 1);
    let body = || {
        y.in_place_scope(|s| {
            if from_x {
                hold_both(s);
            } else {
                // A plain owner's spawn is a root: on Y's only token.
                s.spawn(|_| std::thread::sleep(Duration::from_millis(300)));
            }
            std::thread::scope(|ts| {
                ts.spawn(|| s.map_ordered(0..4u64, |i| i * 10).collect::<Vec<_>>())
                    .join()
                    .unwrap()
            })
        })
    };
    let got = if from_x { x.install(body) } else { body() };
    assert_eq!(got, [0, 10, 20, 30]);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn a_thread_started_in_a_plain_threads_in_place_body_consumes_an_ordered_stream() {
    common::isolated(
        "a_thread_started_in_a_plain_threads_in_place_body_consumes_an_ordered_stream",
        "REVIEW18C_CHILD",
        20,
        || thread_in_the_body_consumes_an_ordered_stream(false),
    );
}

#[test]
fn a_thread_started_in_an_x_jobs_in_place_body_consumes_an_ordered_stream() {
    common::isolated(
        "a_thread_started_in_an_x_jobs_in_place_body_consumes_an_ordered_stream",
        "REVIEW18C_CHILD",
        20,
        || thread_in_the_body_consumes_an_ordered_stream(true),
    );
}

// ---- Shapes that held (kept as regression tests) ----

use std::sync::atomic::{AtomicUsize, Ordering};

/// The builder's thread B of a `use_current_thread` pool opens the free `in_place_scope`
/// (entered as worker 0) while another thread, which owns the pool, drops it mid-body; the
/// body goes on spawning after the other workers stopped: B runs them at its waits.
#[test]
fn use_current_thread_in_place_scope_while_another_thread_drops_the_pool() {
    common::isolated(
        "use_current_thread_in_place_scope_while_another_thread_drops_the_pool",
        "REVIEW18C_CHILD",
        30,
        || {
            for threads in 1..=3 {
                for cap in 1..=2 {
                    // A fresh builder's thread each time: a pool dropped on another thread
                    // leaves its builder's thread its worker 0 (`borrowed::release`).
                    std::thread::spawn(move || one_drop_mid_body(threads, cap))
                        .join()
                        .unwrap();
                }
            }
        },
    );
}

fn one_drop_mid_body(threads: usize, cap: usize) {
    {
        {
            {
                {
                    let pool = treepool::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .max_inflight(cap)
                        .use_current_thread()
                        .build()
                        .unwrap();
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
#[test]
fn use_current_thread_in_place_scope_panics_and_nested_calls_leave_the_pool_idle() {
    common::isolated(
        "use_current_thread_in_place_scope_panics_and_nested_calls_leave_the_pool_idle",
        "REVIEW18C_CHILD",
        30,
        || {
            std::panic::set_hook(Box::new(|_| {}));
            for threads in 1..=2 {
                let pool = treepool::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .max_inflight(1)
                    .use_current_thread()
                    .build()
                    .unwrap();
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
                    wait_idle(&pool);
                    assert_idle(&pool.stats());
                }
            }
        },
    );
}

/// A start handler of X (a worker with no current job: `owner_job` 0) opens an in-place scope
/// of Y and spawns and consumes an ordered stream there, with X jobs already queued.
#[test]
fn a_start_handler_owns_an_in_place_scope_of_another_pool() {
    common::isolated(
        "a_start_handler_owns_an_in_place_scope_of_another_pool",
        "REVIEW18C_CHILD",
        30,
        || {
            let y = std::sync::Arc::new(common::pool(1, 1));
            let done = std::sync::Arc::new(AtomicUsize::new(0));
            let (y2, done2) = (y.clone(), done.clone());
            let x = treepool::ThreadPoolBuilder::new()
                .num_threads(1)
                .max_inflight(1)
                .start_handler(move |_| {
                    y2.in_place_scope(|s| {
                        for _ in 0..3 {
                            s.spawn(|_| std::thread::sleep(Duration::from_millis(20)));
                        }
                        let v: Vec<u32> = s.map_ordered(0..3u32, |i| i).collect();
                        assert_eq!(v, [0, 1, 2]);
                    });
                    done2.fetch_add(1, Ordering::SeqCst);
                })
                .build()
                .unwrap();
            // The handler's waits run X's jobs: this root may finish before the handler does.
            x.install(|| ());
            common::spin_until(|| done.load(Ordering::SeqCst) == 1);
            wait_idle(&x);
            wait_idle(&y);
            assert_idle(&x.stats());
            assert_idle(&y.stats());
        },
    );
}

/// review_18b's bounce (a Y job of the in-place scope calls back into X, whose root R runs on
/// the owner's thread W during the scope's end wait and spawns into the scope) through a fifo
/// in-place scope, with `spawn_fifo` and `spawn_broadcast` from R and from J's join halves
/// while a body spawn waits, and panics in some of the jobs: no hang, every job runs, one
/// panic is raised, both pools idle (B4).
fn bounce_fifo_and_broadcast(y_threads: usize, panic_in: u32) {
    let x = common::pool(1, 1);
    let y = common::pool(y_threads, 1);
    let ran = AtomicUsize::new(0);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        x.install(|| {
            y.in_place_scope_fifo(|s| {
                let (x, ran) = (&x, &ran);
                s.spawn_fifo(move |s| {
                    x.install(|| {
                        s.spawn_fifo(move |_| {
                            ran.fetch_add(1, Ordering::SeqCst);
                            if panic_in & 1 != 0 {
                                panic!("R's fifo spawn");
                            }
                        });
                        s.spawn_broadcast(move |_, _| {
                            ran.fetch_add(1, Ordering::SeqCst);
                        });
                    });
                });
                s.spawn_fifo(|_| std::thread::sleep(Duration::from_millis(50)));
                treepool::join(
                    || {
                        s.spawn_fifo(move |_| {
                            ran.fetch_add(1, Ordering::SeqCst);
                        })
                    },
                    || {
                        s.spawn_broadcast(move |_, _| {
                            ran.fetch_add(1, Ordering::SeqCst);
                            if panic_in & 2 != 0 {
                                panic!("broadcast");
                            }
                        });
                        s.spawn_fifo(move |_| {
                            ran.fetch_add(1, Ordering::SeqCst);
                        });
                    },
                );
                if panic_in & 4 != 0 {
                    panic!("body");
                }
            })
        })
    }));
    assert_eq!(result.is_err(), panic_in != 0);
    assert_eq!(ran.load(Ordering::SeqCst), 3 + 2 * y_threads);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
    assert_eq!(y.stats().calls_in, 0);
}

#[test]
fn bounces_fifo_spawns_and_broadcasts_with_panics_leave_both_pools_idle() {
    common::isolated(
        "bounces_fifo_spawns_and_broadcasts_with_panics_leave_both_pools_idle",
        "REVIEW18C_CHILD",
        30,
        || {
            std::panic::set_hook(Box::new(|_| {}));
            for y_threads in 1..=2 {
                for panic_in in 0..8 {
                    for _ in 0..5 {
                        bounce_fifo_and_broadcast(y_threads, panic_in);
                    }
                }
            }
        },
    );
}

/// review_18b's cycle with an ordered stream in R: a Y job F2 holds Y's only token and waits in
/// `x.install` for R, which runs on W (X's only worker) during the scope's end wait and consumes
/// an ordered stream of the scope. Deferring R's carrier (95b27a7) hangs: the owner's end loop
/// is below R. Waiting for it as an owner spawn (10d6a3a) hangs too: it would wait for F2's
/// token or for the credit root's loan, held by D1, which waits for F2. So a non-owner consumer
/// can neither wait for nor defer its carrier here.
fn ordered_stream_in_the_18b_cycle() {
    let x = common::pool(1, 1);
    let y = common::pool(2, 1);
    let got = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|ts| {
        watch(ts, &y);
        x.install(|| {
            y.in_place_scope(|s| {
                let (x, got) = (&x, &got);
                // D1: on the credit root's loan.
                s.spawn(move |s| {
                    treepool::scope(|ys| {
                        // F1: on D1's loan, so that F2 takes Y's only pool token.
                        ys.spawn(|_| std::thread::sleep(Duration::from_millis(200)));
                        // F2: on Y's pool token; calls into X, whose root R consumes a stream.
                        ys.spawn(move |_| {
                            x.install(|| {
                                *got.lock().unwrap() = s.map_ordered(0..4u64, |i| i * 10).collect();
                            });
                        });
                    });
                });
            });
        });
    });
    assert_eq!(*got.lock().unwrap(), [0, 10, 20, 30]);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn an_x_root_in_review_18bs_cycle_consumes_an_ordered_stream() {
    common::isolated(
        "an_x_root_in_review_18bs_cycle_consumes_an_ordered_stream",
        "REVIEW18C_CHILD",
        30,
        ordered_stream_in_the_18b_cycle,
    );
}
