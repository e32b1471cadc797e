//! Consumers of an in-place scope's ordered stream that are not its owner: an X job on the
//! owner's thread, an X root bounced onto it, a join half of the body while an owner spawn waits,
//! threads started in the body. Every test that may hang runs in a child process with a timeout.
//!
//! The shape that breaks: a consumer of `Scope::map_ordered` that is not taken for the scope's
//! owner (design §4.8: "any other consumer spawns one carrier with `Scope::spawn`'s rules ...
//! offer, else defer to the scope's owner") waits for its carrier; a deferred carrier is admitted
//! only by the owner's `admit_deferred`, at the scope's end (`run_scope`), which the consumer's
//! wait keeps the owner from reaching. Since 95b27a7 the code that runs on the owner's thread
//! with another job current (an X job of a scope inside the body) is no longer the owner.

use crate::common;
use crate::common::settle;
use std::time::Duration;

/// Prints `y`'s stats after 2 s (to stderr, which `isolated!` reports on a hang): what Y holds
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
    settle([&x, &y]);
}

/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn an_x_job_on_the_owners_thread_consumes_an_ordered_stream_of_the_scope() {
    common::isolated!(20, || {
        x_job_on_the_owners_thread_consumes_an_ordered_stream(2);
        x_job_on_the_owners_thread_consumes_an_ordered_stream(1);
    });
}

/// The same through `install`: a Y job of the scope calls back into X (the bounce of
/// `cross_pool::in_place_scopes`) and the X root R, run on W during the scope's end wait,
/// consumes an ordered stream of the scope. R is not the owner (95b27a7), so its carrier is
/// deferred to the owner, whose end loop is below R on W: it never comes back to
/// `admit_deferred`.
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
    settle([&x, &y]);
}

/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn an_x_root_bounced_onto_the_owners_thread_consumes_an_ordered_stream() {
    common::isolated!(20, bounced_root_consumes_an_ordered_stream);
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
    settle([&x, &y]);
}

/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn a_join_half_of_the_body_consumes_an_ordered_stream_while_an_owner_spawn_waits() {
    common::isolated!(20, join_half_consumes_while_an_owner_spawn_waits);
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
    settle([&x, &y]);
}

/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn a_thread_started_in_a_plain_threads_in_place_body_consumes_an_ordered_stream() {
    common::isolated!(20, || thread_in_the_body_consumes_an_ordered_stream(false));
}

/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn a_thread_started_in_an_x_jobs_in_place_body_consumes_an_ordered_stream() {
    common::isolated!(20, || thread_in_the_body_consumes_an_ordered_stream(true));
}

/// The bounce cycle of
/// `cross_pool::in_place_scopes::x_root_run_by_the_in_place_owner_spawns_into_its_scope` with an
/// ordered stream in R: a Y job F2 holds Y's only token and waits in `x.install` for R, which
/// runs on W (X's only worker) during the scope's end wait and consumes an ordered stream of the
/// scope. Deferring R's carrier (95b27a7) hangs: the owner's end loop
/// is below R. Waiting for it as an owner spawn (10d6a3a) hangs too: it would wait for F2's
/// token or for the credit root's loan, held by D1, which waits for F2. So a non-owner consumer
/// can neither wait for nor defer its carrier here.
fn ordered_stream_in_the_bounce_cycle() {
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
    settle([&x, &y]);
}

/// Found by the adversarial review of 95b27a7 (the review 18b fixes: `Scope::owner_job`,
/// `credit_admits`, `scope_fifo::on_caller`).
#[test]
fn an_x_root_in_the_bounce_cycle_consumes_an_ordered_stream() {
    common::isolated!(30, ordered_stream_in_the_bounce_cycle);
}
