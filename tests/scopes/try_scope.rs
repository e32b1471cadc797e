//! `try_scope`, `ThreadPool::try_scope` and `TryScope`: the first error cancels the scope and is
//! what the call returns once every started job has finished; later spawns and queued jobs are
//! dropped unrun (counted in `Stats::cancelled`), their tokens going back as any job's; a panic
//! wins over an error; cancellation reaches nested fallible scopes. Each test runs under a
//! watchdog and checks the bounds and `Stats` back to zero. Meant to run under AddressSanitizer
//! and `--cfg treepool_chaos` too (`.ci/run` does).
use crate::common::{assert_peak_bounds, pool, settle, spin_until, wait_idle, watchdog};

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};
use treepool::{Stats, ThreadPool, TryScope};

/// The error of the tests: which job (or `usize::MAX` for the body) failed.
#[derive(Debug, PartialEq, Eq)]
struct Failed(usize);

/// Waits until `p` is idle, then checks B4 and the peaks (B1, B2) at `cap`; returns the stats.
fn settled(p: &ThreadPool, cap: usize) -> Stats {
    let [stats] = settle([p]);
    assert_peak_bounds(&stats, cap);
    stats
}

/// Spins for about `us` microseconds.
fn work(us: u64) {
    let until = Instant::now() + Duration::from_micros(us);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// `n` spawns from the body; job `fail` returns an error (none if `fail >= n`); the body
/// returns `body` after its spawns. Returns the result, how many closures ran and how many
/// spawns the pool counted as cancelled meanwhile.
fn fan_out(
    p: &ThreadPool,
    n: usize,
    fail: usize,
    body: Result<(), Failed>,
) -> (Result<(), Failed>, usize, u64) {
    let before = p.stats().cancelled;
    let ran = AtomicUsize::new(0);
    let result = p.try_scope(|s| {
        for i in 0..n {
            let ran = &ran;
            s.spawn(move |_| {
                ran.fetch_add(1, Relaxed);
                if i == fail {
                    Err(Failed(i))
                } else {
                    Ok(())
                }
            });
        }
        body
    });
    wait_idle(p);
    (result, ran.into_inner(), p.stats().cancelled - before)
}

#[test]
fn the_first_error_is_returned_at_every_position() {
    watchdog(120, || {
        let n = 200;
        for (threads, cap) in [(1, 1), (1, 4), (2, 1), (2, 3), (4, 8)] {
            let p = pool(threads, cap);
            for fail in [0, n / 2, n - 1] {
                let (result, ran, cancelled) = fan_out(&p, n, fail, Ok(()));
                let at = format!("job {fail}, {threads} threads, cap {cap}");
                assert_eq!(result, Err(Failed(fail)), "{at}");
                assert_eq!(ran as u64 + cancelled, n as u64, "ran + cancelled, {at}");
                if cap == 1 {
                    // One token: each job is admitted once the one before finished, so nothing
                    // after the failing job runs.
                    assert_eq!(ran, fail + 1, "{at}");
                }
                if cap == 1 && fail == n - 1 {
                    // The last one: every job ran. (With more tokens a waiting spawn runs the
                    // newest admitted job first, so the last may run before others.)
                    assert_eq!((ran, cancelled), (n, 0), "{at}");
                }
            }
            // From the body, after its spawns: every job was spawned before the error.
            let (result, ran, cancelled) = fan_out(&p, n, n, Err(Failed(usize::MAX)));
            assert_eq!(result, Err(Failed(usize::MAX)));
            assert_eq!(ran as u64 + cancelled, n as u64);
            // No error: everything runs, nothing is cancelled.
            let (result, ran, cancelled) = fan_out(&p, n, n, Ok(()));
            assert_eq!((result, ran, cancelled), (Ok(()), n, 0));
            settled(&p, cap);
        }
    });
}

#[test]
fn an_error_of_the_body_before_any_spawn_runs_nothing() {
    watchdog(60, || {
        let p = pool(2, 2);
        let ran = AtomicUsize::new(0);
        let result: Result<(), &str> = p.try_scope(|s| {
            let failed: Result<(), &str> = Err("early");
            if failed.is_err() {
                assert!(
                    !s.is_cancelled(),
                    "an error the body holds cancels nothing yet"
                );
            }
            failed?;
            s.spawn(|_| {
                ran.fetch_add(1, Relaxed);
                Ok(())
            });
            Ok(())
        });
        assert_eq!(result, Err("early"));
        assert_eq!(ran.into_inner(), 0);
        let stats = settled(&p, 2);
        assert_eq!(stats.cancelled, 0);
        // The body's error cancels spawns made by the jobs still running (the job itself is
        // dropped unrun if it had not started yet).
        let spawned = AtomicUsize::new(0);
        let job_ran = AtomicBool::new(false);
        let result: Result<(), &str> = p.try_scope(|s| {
            s.spawn(|s| {
                job_ran.store(true, Relaxed);
                spin_until(|| s.is_cancelled());
                for _ in 0..10 {
                    spawned.fetch_add(1, Relaxed);
                    s.spawn(|_| panic!("a spawn after the cancellation ran"));
                }
                Ok(())
            });
            Err("body")
        });
        assert_eq!(result, Err("body"));
        let stats = settled(&p, 2);
        let unrun = usize::from(!job_ran.into_inner());
        assert_eq!(stats.cancelled as usize, spawned.into_inner() + unrun);
    });
}

#[test]
fn spawns_waiting_for_admission_at_one_token_are_dropped_unrun() {
    watchdog(60, || {
        for threads in [1, 2] {
            let p = pool(threads, 1);
            let before = p.stats();
            let n = 50;
            let ran = AtomicUsize::new(0);
            let result = p.try_scope(|s| {
                // The first job holds the body's loan (the only token), so the second spawn
                // waits for it; the first fails only once that spawn waits.
                let p = &p;
                s.spawn(move |_| {
                    spin_until(|| p.stats().admission_waits > before.admission_waits);
                    Err(Failed(0))
                });
                for i in 1..n {
                    let ran = &ran;
                    s.spawn(move |_| {
                        ran.fetch_add(1, Relaxed);
                        Err(Failed(i))
                    });
                }
                Ok(())
            });
            assert_eq!(result, Err(Failed(0)), "{threads} threads");
            assert_eq!(ran.into_inner(), 0, "{threads} threads");
            let stats = settled(&p, 1);
            // The waiting spawn was admitted and dropped when it came up; the rest at the call.
            assert_eq!(stats.cancelled - before.cancelled, n as u64 - 1);
            assert!(stats.admission_waits > before.admission_waits);
        }
    });
}

#[test]
fn an_early_error_in_a_long_fan_out_leaves_most_jobs_unrun() {
    watchdog(120, || {
        let total = 100_000;
        for (threads, cap) in [(1, 1), (1, 4), (2, 2), (2, 8), (4, 4)] {
            let p = pool(threads, cap);
            let before = p.stats().cancelled;
            let ran = AtomicUsize::new(0);
            let result = p.try_scope(|s| {
                for i in 0..total {
                    let ran = &ran;
                    s.spawn(move |_| {
                        ran.fetch_add(1, Relaxed);
                        if i == 10 {
                            return Err(Failed(i));
                        }
                        work(50);
                        Ok(())
                    });
                }
                Ok(())
            });
            assert_eq!(result, Err(Failed(10)));
            let ran = ran.into_inner();
            let stats = settled(&p, cap);
            let cancelled = stats.cancelled - before;
            // At most `cap` jobs of 50 µs run at once, so 5,000 would take a stall of the
            // failing job's thread of over 60 ms between its steal and its start.
            assert!(
                ran < total / 20,
                "{ran} of {total} ran ({threads} threads, cap {cap})"
            );
            assert_eq!(ran as u64 + cancelled, total as u64);
            if cap == 1 {
                assert_eq!(ran, 11);
            }
        }
    });
}

/// A tree of fallible jobs: `width` children per job, `depth` levels; the `fail_at`-th job to
/// start fails.
struct Tree {
    width: usize,
    fail_at: usize,
    spawned: AtomicUsize,
    ran: AtomicUsize,
}

impl Tree {
    fn new(width: usize, fail_at: usize) -> Self {
        Tree {
            width,
            fail_at,
            spawned: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
        }
    }

    /// The next job's verdict: fail if it is the `fail_at`-th to start.
    fn start(&self) -> Result<(), Failed> {
        let k = self.ran.fetch_add(1, Relaxed);
        if k == self.fail_at {
            Err(Failed(k))
        } else {
            Ok(())
        }
    }
}

/// Spawns `tree`'s children into one scope, at every level.
fn grow<'s>(s: &TryScope<'s, Failed>, tree: &'s Tree, depth: usize) {
    for _ in 0..tree.width {
        tree.spawned.fetch_add(1, Relaxed);
        s.spawn(move |s| {
            tree.start()?;
            if depth > 1 {
                grow(s, tree, depth - 1);
            }
            Ok(())
        });
    }
}

/// Spawns `tree`'s children, each job opening a fallible scope of its own for its children and
/// passing their error up with `?`.
fn grow_nested<'s>(s: &TryScope<'s, Failed>, tree: &'s Tree, depth: usize) {
    for _ in 0..tree.width {
        tree.spawned.fetch_add(1, Relaxed);
        s.spawn(move |_| {
            tree.start()?;
            if depth > 1 {
                treepool::try_scope(|inner| {
                    grow_nested(inner, tree, depth - 1);
                    Ok(())
                })?;
            }
            Ok(())
        });
    }
}

#[test]
fn errors_deep_in_trees_cancel_the_whole_tree() {
    watchdog(120, || {
        for (threads, cap) in [(1, 1), (2, 1), (2, 4), (4, 3)] {
            let p = pool(threads, cap);
            for nested in [false, true] {
                for fail_at in [0, 100, 2_000, usize::MAX] {
                    let before = p.stats().cancelled;
                    let tree = Tree::new(8, fail_at);
                    let result = p.try_scope(|s| {
                        if nested {
                            grow_nested(s, &tree, 4);
                        } else {
                            grow(s, &tree, 4);
                        }
                        Ok(())
                    });
                    let stats = settled(&p, cap);
                    let at = format!("fail_at {fail_at}, nested {nested}, {threads}/{cap}");
                    let (spawned, ran) = (tree.spawned.into_inner(), tree.ran.into_inner());
                    let cancelled = (stats.cancelled - before) as usize;
                    assert_eq!(ran + cancelled, spawned, "{at}");
                    if fail_at == usize::MAX {
                        assert_eq!(result, Ok(()), "{at}");
                        assert_eq!((spawned, cancelled), (8 + 64 + 512 + 4096, 0), "{at}");
                    } else {
                        assert_eq!(result, Err(Failed(fail_at)), "{at}");
                        assert!(ran > fail_at, "{at}");
                    }
                }
            }
        }
    });
}

#[test]
fn max_inflight_one_on_one_thread_never_deadlocks() {
    watchdog(60, || {
        let p = pool(1, 1);
        // Nested fallible scopes six deep, an error at several depths, and plain scopes between.
        for fail_at in [0, 5, 50, 300, usize::MAX] {
            let tree = Tree::new(3, fail_at);
            let result = p.try_scope(|s| {
                grow_nested(s, &tree, 6);
                treepool::scope(|plain| {
                    plain.spawn(|_| {
                        // Not enclosed by the fallible scope (a plain scope's job): its own
                        // error, if the tree fails here, stays here.
                        let _ = treepool::try_scope(|s| {
                            grow(s, &tree, 2);
                            Ok(())
                        });
                    })
                });
                Ok(())
            });
            match fail_at {
                usize::MAX => assert_eq!(result, Ok(())),
                _ => assert_eq!(result, Err(Failed(fail_at))),
            }
            let stats = settled(&p, 1);
            assert!(stats.peak_depth >= 2);
        }
    });
}

#[test]
fn an_outer_error_cancels_nested_scopes() {
    watchdog(60, || {
        // Opened after the cancellation: cancelled from the start, its spawns dropped.
        for threads in [1, 2] {
            let p = pool(threads, 2);
            let before = p.stats().cancelled;
            let result = p.try_scope(|s| {
                s.spawn(|_| Err("outer"));
                while !s.is_cancelled() {
                    treepool::yield_now(); // runs the failing job on one thread
                }
                let inner = treepool::try_scope(|inner| {
                    assert!(inner.is_cancelled());
                    for _ in 0..10 {
                        inner.spawn(|_| panic!("a job of a cancelled scope ran"));
                    }
                    Ok::<_, &str>(42)
                });
                // Cancelled from outside, without an error of its own: the body's value.
                assert_eq!(inner, Ok(42));
                Ok(())
            });
            assert_eq!(result, Err("outer"));
            let stats = settled(&p, 2);
            assert_eq!(stats.cancelled - before, 10);
        }
        // Opened in a job and running when the outer scope fails: its running job sees the
        // cancellation, its later spawns are dropped.
        for threads in [2, 4] {
            let p = pool(threads, 4);
            let before = p.stats().cancelled;
            let started = AtomicBool::new(false);
            let saw = AtomicBool::new(false);
            let result = p.try_scope(|s| {
                s.spawn(|_| {
                    let inner = treepool::try_scope(|inner| {
                        inner.spawn(|inner| {
                            started.store(true, Release);
                            spin_until(|| inner.is_cancelled());
                            saw.store(true, Relaxed);
                            for _ in 0..5 {
                                inner.spawn(|_| panic!("a job of a cancelled scope ran"));
                            }
                            Ok(())
                        });
                        Ok::<_, &str>(())
                    });
                    assert_eq!(inner, Ok(()));
                    Ok(())
                });
                s.spawn(|_| {
                    spin_until(|| started.load(Acquire));
                    Err("outer")
                });
                Ok(())
            });
            assert_eq!(result, Err("outer"));
            assert!(saw.into_inner());
            let stats = settled(&p, 4);
            assert_eq!(stats.cancelled - before, 5);
        }
    });
}

#[test]
fn an_inner_error_is_returned_without_cancelling_the_outer_scope() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 2), (4, 4)] {
            let p = pool(threads, cap);
            let before = p.stats().cancelled;
            let ran = AtomicUsize::new(0);
            let result: Result<usize, String> = p.try_scope(|s| {
                s.spawn(|s| {
                    let inner: Result<(), &str> = treepool::try_scope(|inner| {
                        inner.spawn(|_| Err("inner"));
                        Ok(())
                    });
                    assert_eq!(inner, Err("inner"));
                    assert!(!s.is_cancelled());
                    Ok(())
                });
                // The body's own inner scope: handled, not propagated.
                let inner = treepool::try_scope(|_| Err::<(), _>(1));
                assert_eq!(inner, Err(1));
                assert!(!s.is_cancelled());
                for _ in 0..20 {
                    let ran = &ran;
                    s.spawn(move |_| {
                        ran.fetch_add(1, Relaxed);
                        Ok(())
                    });
                }
                Ok(7)
            });
            assert_eq!(result, Ok(7));
            assert_eq!(ran.into_inner(), 20);
            let stats = settled(&p, cap);
            assert_eq!(stats.cancelled, before);
            // Propagated with `?`: it cancels the outer scope too, and is what it returns.
            let result: Result<(), String> = p.try_scope(|s| {
                s.spawn(|_| {
                    treepool::try_scope(|inner| {
                        inner.spawn(|_| Err("inner".to_string()));
                        Ok(())
                    })?;
                    Ok(())
                });
                Ok(())
            });
            assert_eq!(result, Err("inner".to_string()));
            settled(&p, cap);
        }
    });
}

#[test]
fn cancellation_reaches_a_try_scope_of_another_pool() {
    watchdog(60, || {
        let a = pool(2, 2);
        let b = pool(2, 2);
        let started = AtomicBool::new(false);
        let result = a.try_scope(|s| {
            s.spawn(|_| {
                let inner = b.try_scope(|inner| {
                    started.store(true, Release);
                    spin_until(|| inner.is_cancelled());
                    inner.spawn(|_| panic!("a job of a cancelled scope ran"));
                    Ok::<_, &str>(())
                });
                assert_eq!(inner, Ok(()));
                Ok(())
            });
            s.spawn(|_| {
                spin_until(|| started.load(Acquire));
                Err("outer")
            });
            Ok(())
        });
        assert_eq!(result, Err("outer"));
        settled(&a, 2);
        let [stats] = settle([&b]);
        assert_eq!(stats.cancelled, 1);
        assert!(stats.peak_executing <= 2 + stats.peak_calls_in, "{stats:?}");
    });
}

#[test]
fn a_plain_scope_job_run_above_a_cancelled_job_is_not_cancelled() {
    watchdog(60, || {
        // One thread, two tokens: J runs first, yields to the failing job E, then spawns into the
        // plain scope; the second spawn waits for J's loan and runs the first above J, where the
        // thread-local still names J's cancelled scope. Its own try_scope is not enclosed by it.
        for threads in [1, 2] {
            let p = pool(threads, 2);
            let opened = AtomicUsize::new(0);
            p.scope(|plain| {
                let opened = &opened;
                let j_started = AtomicBool::new(false);
                let result = treepool::try_scope(|s| {
                    let j_started = &j_started;
                    s.spawn(move |_| {
                        spin_until(|| j_started.load(Acquire));
                        Err("E")
                    });
                    s.spawn(move |s| {
                        j_started.store(true, Release);
                        while !s.is_cancelled() {
                            treepool::yield_now();
                        }
                        for _ in 0..3 {
                            plain.spawn(move |_| {
                                let inner =
                                    treepool::try_scope(|inner| Ok::<_, ()>(inner.is_cancelled()));
                                assert_eq!(inner, Ok(false), "a plain scope's job was cancelled");
                                opened.fetch_add(1, Relaxed);
                            });
                        }
                        Ok(())
                    });
                    Ok(())
                });
                assert_eq!(result, Err("E"));
            });
            assert_eq!(opened.into_inner(), 3);
            settled(&p, 2);
        }
    });
}

/// A panic payload of the tests.
#[derive(Debug, PartialEq)]
struct Payload(u32);

fn panic_of<T>(f: impl FnOnce() -> T) -> Payload {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => panic!("no panic"),
        Err(payload) => *payload.downcast::<Payload>().expect("the original payload"),
    }
}

/// A panic cancels the scope as an error does: at one token on one thread, the first job
/// panics while the second spawn waits for its token, and no later job runs.
#[test]
fn a_panic_cancels_the_scope_too() {
    watchdog(60, || {
        let p = pool(1, 1);
        let ran = AtomicUsize::new(0);
        let before = p.stats().cancelled;
        let payload = panic_of(|| {
            p.try_scope(|s| {
                s.spawn(|_| panic::panic_any(Payload(9)));
                for _ in 0..50 {
                    s.spawn(|_| {
                        ran.fetch_add(1, Relaxed);
                        Ok::<(), Failed>(())
                    });
                }
                Ok(())
            })
        });
        assert_eq!(payload, Payload(9));
        assert_eq!(ran.into_inner(), 0);
        let stats = settled(&p, 1);
        assert_eq!(stats.cancelled - before, 50);
    });
}

#[test]
fn a_panic_wins_over_an_error_with_its_payload() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (1, 2), (2, 2), (4, 4)] {
            let p = pool(threads, cap);
            // A job fails after a job panicked.
            let b_started = AtomicBool::new(false);
            let payload = panic_of(|| {
                p.try_scope(|s| {
                    let b_started = &b_started;
                    s.spawn(move |_| {
                        b_started.store(true, Release);
                        panic::panic_any(Payload(1));
                    });
                    s.spawn(move |_| {
                        while !b_started.load(Acquire) {
                            treepool::yield_now();
                        }
                        Err("job")
                    });
                    while !s.is_cancelled() {
                        treepool::yield_now();
                    }
                    Ok(())
                })
            });
            assert_eq!(payload, Payload(1), "{threads}/{cap}");
            settled(&p, cap);
            // The body panics after a job failed.
            let payload = panic_of(|| {
                p.try_scope(|s| {
                    s.spawn(|_| Err("job"));
                    while !s.is_cancelled() {
                        treepool::yield_now();
                    }
                    if s.is_cancelled() {
                        panic::panic_any(Payload(2));
                    }
                    Ok(())
                })
            });
            assert_eq!(payload, Payload(2));
            settled(&p, cap);
            // The body fails after a job panicked.
            let started = AtomicBool::new(false);
            let payload = panic_of(|| {
                p.try_scope(|s| {
                    let started = &started;
                    s.spawn(move |_| {
                        started.store(true, Release);
                        panic::panic_any(Payload(3));
                    });
                    while !started.load(Acquire) {
                        treepool::yield_now();
                    }
                    Err::<(), _>("body")
                })
            });
            assert_eq!(payload, Payload(3));
            settled(&p, cap);
        }
    });
}

/// Drops of [`Counted`] errors.
static DROPS: AtomicUsize = AtomicUsize::new(0);

/// An error whose drops are counted.
#[derive(Debug)]
struct Counted(usize);

impl Drop for Counted {
    fn drop(&mut self) {
        DROPS.fetch_add(1, SeqCst);
    }
}

#[test]
fn of_many_errors_exactly_one_is_returned_and_the_rest_dropped() {
    watchdog(60, || {
        // Three jobs fail together (each waits for the other two to start), then the body.
        let p = pool(4, 4);
        let started = AtomicUsize::new(0);
        let dropped_before = DROPS.load(SeqCst);
        let result: Result<(), Counted> = p.try_scope(|s| {
            for i in 0..3 {
                let started = &started;
                s.spawn(move |_| {
                    started.fetch_add(1, SeqCst);
                    spin_until(|| started.load(SeqCst) == 3);
                    Err(Counted(i))
                });
            }
            spin_until(|| started.load(SeqCst) == 3);
            Err(Counted(3))
        });
        let error = result.expect_err("an error");
        assert!(error.0 < 4);
        assert_eq!(
            DROPS.load(SeqCst) - dropped_before,
            3,
            "the other errors dropped"
        );
        drop(error);
        assert_eq!(DROPS.load(SeqCst) - dropped_before, 4);
        settled(&p, 4);
        // One thread: a job fails, then the body; the body's error is the second.
        let p = pool(1, 2);
        let dropped_before = DROPS.load(SeqCst);
        let result: Result<(), Counted> = p.try_scope(|s| {
            s.spawn(|_| Err(Counted(0)));
            while !s.is_cancelled() {
                treepool::yield_now();
            }
            Err(Counted(1))
        });
        assert_eq!(result.expect_err("an error").0, 0);
        assert_eq!(DROPS.load(SeqCst) - dropped_before, 2);
        settled(&p, 2);
    });
}

/// An error (or a value) whose `Drop` panics.
#[derive(Debug)]
struct Loud(u32);

impl Drop for Loud {
    fn drop(&mut self) {
        panic!("Loud({}) dropped", self.0);
    }
}

#[test]
fn a_panicking_drop_of_a_dropped_error_does_not_escape() {
    watchdog(60, || {
        for (threads, cap) in [(1, 2), (2, 2)] {
            let p = pool(threads, cap);
            // A later error is dropped (and panics in its drop), the first is returned.
            let result: Result<Loud, Loud> = p.try_scope(|s| {
                s.spawn(|_| Err(Loud(1)));
                while !s.is_cancelled() {
                    treepool::yield_now();
                }
                Err(Loud(2))
            });
            let error = result.expect_err("the job's error");
            assert_eq!(error.0, 1);
            std::mem::forget(error);
            settled(&p, cap);
            // The body's value is dropped when a job's error wins.
            let result: Result<Loud, Loud> = p.try_scope(|s| {
                s.spawn(|_| Err(Loud(3)));
                while !s.is_cancelled() {
                    treepool::yield_now();
                }
                Ok(Loud(4))
            });
            let error = result.expect_err("the job's error");
            assert_eq!(error.0, 3);
            std::mem::forget(error);
            settled(&p, cap);
            // A kept error is dropped when a panic wins: while that panic unwinds.
            let payload = panic_of(|| {
                p.try_scope(|s| {
                    s.spawn(|_| Err(Loud(5)));
                    while !s.is_cancelled() {
                        treepool::yield_now();
                    }
                    if s.is_cancelled() {
                        panic::panic_any(Payload(5));
                    }
                    Ok::<(), Loud>(())
                })
            });
            assert_eq!(payload, Payload(5));
            settled(&p, cap);
        }
    });
}

#[test]
fn spawns_from_a_plain_thread_in_the_body_are_cancelled_too() {
    watchdog(60, || {
        for (threads, cap) in [(1, 1), (2, 2)] {
            let p = pool(threads, cap);
            let before = p.stats().cancelled;
            let ran = AtomicUsize::new(0);
            let result = p.try_scope(|s| {
                std::thread::scope(|ts| {
                    ts.spawn(|| {
                        for i in 0..100 {
                            let ran = &ran;
                            s.spawn(move |_| {
                                ran.fetch_add(1, Relaxed);
                                if i == 5 {
                                    Err(Failed(i))
                                } else {
                                    Ok(())
                                }
                            });
                        }
                    });
                });
                Ok(())
            });
            assert_eq!(result, Err(Failed(5)));
            let stats = settled(&p, cap);
            assert_eq!(ran.into_inner() as u64 + stats.cancelled - before, 100);
        }
    });
}

#[test]
fn the_free_try_scope_from_a_plain_thread_uses_the_global_pool() {
    watchdog(60, || {
        let on_workers = AtomicUsize::new(0);
        let result: Result<usize, String> = treepool::try_scope(|s| {
            assert!(treepool::current_thread_index().is_some());
            for _ in 0..10 {
                s.spawn(|_| {
                    if treepool::current_thread_index().is_some() {
                        on_workers.fetch_add(1, Relaxed);
                    }
                    Ok(())
                });
            }
            Ok(3)
        });
        assert_eq!(result, Ok(3));
        assert_eq!(on_workers.into_inner(), 10);
        let result: Result<(), String> = treepool::try_scope(|s| {
            for i in 0..1000 {
                s.spawn(move |_| match i {
                    7 => Err(format!("job {i}")),
                    _ => Ok(()),
                });
            }
            Ok(())
        });
        assert_eq!(result, Err("job 7".to_string()));
        // From several plain threads at once, each its own scope.
        std::thread::scope(|ts| {
            for t in 0..4 {
                ts.spawn(move || {
                    let result = treepool::try_scope(|s| {
                        s.spawn(move |_| Err(t));
                        Ok(())
                    });
                    assert_eq!(result, Err(t));
                });
            }
        });
    });
}

#[test]
fn thread_pool_try_scope_from_outside_inside_and_from_another_pool() {
    watchdog(60, || {
        let p = pool(2, 2);
        let q = pool(1, 1);
        // From a plain thread.
        assert_eq!(p.try_scope(|_| Ok::<_, ()>(1)), Ok(1));
        // Inline, from one of its own jobs.
        let inner = p.install(|| {
            let index = treepool::current_thread_index();
            p.try_scope(|s| {
                assert_eq!(treepool::current_thread_index(), index);
                s.spawn(|_| Err(2));
                Ok(())
            })
        });
        assert_eq!(inner, Err(2));
        // From a job of another pool: a call on credit.
        let across = q.install(|| {
            p.try_scope(|s| {
                s.spawn(|_| Ok(()));
                s.spawn(|_| Err(3));
                Ok(())
            })
        });
        assert_eq!(across, Err(3));
        let [stats] = settle([&p]);
        assert!(stats.peak_executing <= 2 + stats.peak_calls_in, "{stats:?}");
        settled(&q, 1);
    });
}
