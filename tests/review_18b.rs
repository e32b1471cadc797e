//! Adversarial review of 93d4ff7 (issue 18 fixes): attacks on `Scope::owner_admits` /
//! `credit_admits` and on `pool::on_worker`. Every test that may hang or abort runs in a child
//! process with a timeout.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{assert_idle, wait_idle};

/// Design §1.4's own example of why a spawn from another pool's worker may not wait ("take B
/// with one token, held by a job J_B that calls `A.install`; the A root spawns into B. Waiting
/// there, it would wait for B's token, held by J_B, which waits for that A root"), reached on
/// the owner's thread W of an in-place scope of Y: the X root R that a Y job F2 starts runs on
/// W (X's only worker) during the scope's end wait, where `credit_admits` is not set, so R's
/// spawn into the scope is taken for an owner spawn: a child of the credit root C that waits
/// for C's loan (held by D1, which waits for F2) or Y's only token (held by F2, which waits for
/// R). Every job waits only on its descendants and on its own calls into other pools (B3).
fn x_root_on_the_owners_thread_waits_for_its_own_caller() {
    let x = common::pool(1, 1);
    let y = common::pool(2, 1);
    let ran = AtomicUsize::new(0);
    x.install(|| {
        y.in_place_scope(|s| {
            let (x, ran) = (&x, &ran);
            // D1: on the credit root's loan.
            s.spawn(move |s| {
                treepool::scope(|ys| {
                    // F1: on D1's loan, so that F2 takes Y's only pool token.
                    ys.spawn(move |_| {
                        std::thread::sleep(Duration::from_millis(200));
                        ran.fetch_add(1, Ordering::SeqCst);
                    });
                    // F2: on Y's pool token; calls into X, whose root R spawns into `s`.
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
            // The body returns: W waits for the scope's end, running X's jobs (R).
        });
    });
    assert_eq!(ran.load(Ordering::SeqCst), 4);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn x_root_run_by_the_in_place_owner_spawns_into_its_scope() {
    common::isolated(
        "x_root_run_by_the_in_place_owner_spawns_into_its_scope",
        "REVIEW18B_CHILD",
        30,
        x_root_on_the_owners_thread_waits_for_its_own_caller,
    );
}

/// The same cycle reached inside the body, not at the scope's end: the body yields to X for a
/// while (`treepool::yield_now`, rayon-core's API) after spawning D1; the yield runs F2's X
/// root R on W with `credit_admits` clear, so R's spawn waits as a child of the credit root
/// for D1's loan or F2's token. (So marking the scope's end wait alone would not fix it.)
fn x_root_run_by_a_yield_in_the_body() {
    let x = common::pool(1, 1);
    let y = common::pool(2, 1);
    let ran = AtomicUsize::new(0);
    x.install(|| {
        y.in_place_scope(|s| {
            let (x, ran) = (&x, &ran);
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
            let until = std::time::Instant::now() + Duration::from_millis(1000);
            while std::time::Instant::now() < until {
                let _ = treepool::yield_now();
            }
        });
    });
    assert_eq!(ran.load(Ordering::SeqCst), 4);
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
}

#[test]
fn x_root_run_by_a_yield_in_the_in_place_body_spawns_into_its_scope() {
    common::isolated(
        "x_root_run_by_a_yield_in_the_in_place_body_spawns_into_its_scope",
        "REVIEW18B_CHILD",
        30,
        x_root_run_by_a_yield_in_the_body,
    );
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
    wait_idle(&pool);
    assert_idle(&pool.stats());
}

#[test]
fn use_current_thread_in_place_scope_on_the_builders_thread() {
    common::isolated(
        "use_current_thread_in_place_scope_on_the_builders_thread",
        "REVIEW18B_CHILD",
        20,
        use_current_thread_in_place_scope_runs_its_spawn,
    );
}

/// review_18's shape (D1 on the credit root's loan, D2 on Y's only token, the body's D3 waits,
/// W runs an X job E that spawns D4, deferred) with panics everywhere in it: in D4 (deferred,
/// admitted at the scope's end), in E after its spawn, and in D3. The in-place scope raises one
/// of them after every job finished, and both pools are idle after (B4). Passes on 93d4ff7.
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
    wait_idle(&x);
    wait_idle(&y);
    assert_idle(&x.stats());
    assert_idle(&y.stats());
    assert_eq!(y.stats().calls_in, 0);
}

#[test]
fn panics_around_a_deferred_owner_spawn_leave_both_pools_idle() {
    common::isolated(
        "panics_around_a_deferred_owner_spawn_leave_both_pools_idle",
        "REVIEW18B_CHILD",
        120,
        || {
            std::panic::set_hook(Box::new(|_| {}));
            // Y's cap 1: D4 is deferred; 2 and 3: D4 may be offered (a root on a free token).
            for y_cap in 1..=3 {
                for which in 0..8 {
                    for _ in 0..3 {
                        panics_in_the_deferred_path(which, y_cap);
                    }
                }
            }
        },
    );
}
