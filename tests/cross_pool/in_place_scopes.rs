//! An in-place scope of pool Y opened by a job of pool X (or by X's start handler): its body runs
//! on X's worker and its spawns are children of a credit root of Y. An X job or root that runs
//! on the owner's thread (run by the owner's wait, by a yield in the body, bounced back through
//! Y) and spawns into the scope, fifo spawns, broadcasts and panics around a deferred owner
//! spawn: each finishes and leaves both pools idle. Each test that may hang or abort runs in a
//! child process with a timeout.

use crate::common;
use crate::common::settle;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use treepool::ThreadPool;

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
    settle([&x, &y]);
}

/// Found by the adversarial review of issue 18 (the rayon-core API additions): it failed on
/// d282453.
#[test]
fn in_place_scope_from_another_pool_two_waiting_children() {
    // Before the fix this shape failed a debug assertion and hung, or aborted.
    common::isolated!(20, two_waiting_children_of_the_credit_root);
}

/// Design §1.4's own example of why a spawn from another pool's worker may not wait ("take B
/// with one token, held by a job J_B that calls `A.install`; the A root spawns into B. Waiting
/// there, it would wait for B's token, held by J_B, which waits for that A root"), reached on
/// the owner's thread W of an in-place scope of Y: the X root R that a Y job F2 starts runs on
/// W (X's only worker) during the scope's end wait, where `credit_admits` is not set, so R's
/// spawn into the scope is taken for an owner spawn: a child of the credit root C that waits
/// for C's loan (held by D1, which waits for F2) or Y's only token (held by F2, which waits for
/// R). Every job waits only on its descendants and on its own calls into other pools (B3).
///
/// Found by the adversarial review of 93d4ff7 (the issue 18 fixes: `Scope::owner_admits`,
/// `credit_admits`, `pool::on_worker`).
#[test]
fn x_root_run_by_the_in_place_owner_spawns_into_its_scope() {
    // The body returns: W waits for the scope's end, running X's jobs (R).
    common::isolated!(30, || the_bounce_in_an_in_place_body(|| {}));
}

/// The cycle of `x_root_run_by_the_in_place_owner_spawns_into_its_scope` reached inside the body,
/// not at the scope's end: the body yields to X for a while (`treepool::yield_now`, rayon-core's
/// API) after spawning D1; the yield runs F2's X root R on W with `credit_admits` clear, so R's
/// spawn waits as a child of the credit root for D1's loan or F2's token. (So marking the scope's
/// end wait alone would not fix it.)
///
/// Found by the adversarial review of 93d4ff7 (the issue 18 fixes: `Scope::owner_admits`,
/// `credit_admits`, `pool::on_worker`).
#[test]
fn x_root_run_by_a_yield_in_the_in_place_body_spawns_into_its_scope() {
    common::isolated!(30, || {
        the_bounce_in_an_in_place_body(|| {
            let until = std::time::Instant::now() + Duration::from_millis(1000);
            while std::time::Instant::now() < until {
                let _ = treepool::yield_now();
            }
        })
    });
}

/// An in-place scope of Y (two threads, one token) opened by a job of X (one thread, one token)
/// on X's worker W: the body spawns the bounce ([`spawn_the_bounce`]), then runs `then`; every
/// job runs and both pools end idle.
fn the_bounce_in_an_in_place_body(then: impl FnOnce() + Send) {
    let x = common::pool(1, 1);
    let y = common::pool(2, 1);
    let ran = AtomicUsize::new(0);
    x.install(|| {
        y.in_place_scope(|s| {
            spawn_the_bounce(s, &x, &ran);
            then();
        });
    });
    assert_eq!(ran.load(Ordering::SeqCst), 4);
    settle([&x, &y]);
}

/// The jobs of the bounce: D1, on the credit root's loan, opens a Y scope with F1 (on D1's
/// loan, so that F2 takes Y's only pool token) and F2 (on Y's pool token), which calls into X,
/// whose root R spawns into `s`. Four jobs count in `ran`: F1, F2, R's spawn and D1.
fn spawn_the_bounce<'s>(s: &treepool::Scope<'s>, x: &'s ThreadPool, ran: &'s AtomicUsize) {
    s.spawn(move |s| {
        treepool::scope(|ys| {
            ys.spawn(move |_| {
                std::thread::sleep(Duration::from_millis(200));
                ran.fetch_add(1, Ordering::SeqCst);
            });
            ys.spawn(move |_| {
                x.install(|| {
                    s.spawn(move |_| {
                        ran.fetch_add(1, Ordering::SeqCst);
                    });
                });
                ran.fetch_add(1, Ordering::SeqCst);
            });
        });
        ran.fetch_add(1, Ordering::SeqCst);
    });
}

/// The shape of `in_place_scope_from_another_pool_two_waiting_children` (D1 on the credit root's
/// loan, D2 on Y's only token, the body's D3 waits, W runs an X job E that spawns D4, deferred)
/// with panics everywhere in it: in D4 (deferred, admitted at the scope's end), in E after its
/// spawn, and in D3. The in-place scope raises one of them after every job finished, and both pools
/// are idle after (B4). Passes on 93d4ff7.
fn panics_in_the_deferred_path(which: u32, y_cap: usize) {
    use std::sync::atomic::AtomicBool;
    let x = common::pool(1, 2);
    let y = common::pool(1, y_cap);
    let ran = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        x.install(|| {
            y.in_place_scope(|s| {
                let (ran, go) = (&ran, &go);
                let hold = move |_: &treepool::Scope<'_>| {
                    common::spin_until(|| go.load(Ordering::SeqCst));
                    std::thread::sleep(Duration::from_millis(50));
                    ran.fetch_add(1, Ordering::SeqCst);
                };
                s.spawn(hold);
                s.spawn(hold);
                treepool::scope(|xs| {
                    xs.spawn(move |_| {
                        go.store(true, Ordering::SeqCst);
                        s.spawn(move |_| {
                            ran.fetch_add(1, Ordering::SeqCst);
                            if which & 1 != 0 {
                                panic!("D4");
                            }
                        });
                        if which & 2 != 0 {
                            panic!("E");
                        }
                    });
                    s.spawn(move |_| {
                        ran.fetch_add(1, Ordering::SeqCst);
                        if which & 4 != 0 {
                            panic!("D3");
                        }
                    });
                    go.store(true, Ordering::SeqCst);
                });
            });
        })
    }));
    assert_eq!(result.is_err(), which != 0, "which = {which}");
    assert_eq!(ran.load(Ordering::SeqCst), 4, "which = {which}");
    settle([&x, &y]);
    assert_eq!(y.stats().calls_in, 0);
}

/// Found by the adversarial review of 93d4ff7 (the issue 18 fixes: `Scope::owner_admits`,
/// `credit_admits`, `pool::on_worker`).
#[test]
fn panics_around_a_deferred_owner_spawn_leave_both_pools_idle() {
    common::isolated!(120, || {
        std::panic::set_hook(Box::new(|_| {}));
        // Y's cap 1: D4 is deferred; 2 and 3: D4 may be offered (a root on a free token).
        for y_cap in 1..=3 {
            for which in 0..8 {
                for _ in 0..3 {
                    panics_in_the_deferred_path(which, y_cap);
                }
            }
        }
    });
}

/// A start handler of X (a worker with no current job: `owner_job` 0) opens an in-place scope
/// of Y and spawns and consumes an ordered stream there, with X jobs already queued.
///
/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn a_start_handler_owns_an_in_place_scope_of_another_pool() {
    common::isolated!(30, || {
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
        settle([&x, &y]);
    });
}

/// The bounce of `x_root_run_by_the_in_place_owner_spawns_into_its_scope` (a Y job of the in-place
/// scope calls back into X, whose root R runs on the owner's thread W during the scope's end wait
/// and spawns into the scope) through a fifo in-place scope, with `spawn_fifo` and
/// `spawn_broadcast` from R and from J's join halves while a body spawn waits, and panics in some
/// of the jobs: no hang, every job runs, one panic is raised, both pools idle (B4).
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
    settle([&x, &y]);
    assert_eq!(y.stats().calls_in, 0);
}

/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn bounces_fifo_spawns_and_broadcasts_with_panics_leave_both_pools_idle() {
    common::isolated!(30, || {
        std::panic::set_hook(Box::new(|_| {}));
        for y_threads in 1..=2 {
            for panic_in in 0..8 {
                for _ in 0..5 {
                    bounce_fifo_and_broadcast(y_threads, panic_in);
                }
            }
        }
    });
}
