//! `WorkerThread::runs_its_last_half`: a worker about to run a join half inline counts itself
//! idle only when no other half of its own is unclaimed, private or public. A public half that
//! no thief has claimed comes back to its thread when its frame returns, so a thread that has
//! one is not about to run dry. Counted idle there, it made the other workers promote at every
//! `join` while all of them were busy (200 sums of a 512-leaf tree on 2 threads took about 1.4
//! times as long: docs/benchmarks-notes.md, "A last half is the last unclaimed one"; issue 41).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::common::{pool, spin_until, watchdog};

/// Two workers. W2 takes the root's `b` and stays busy in a `join`'s `a` (so the idle count
/// does not count it) until the end. W1 makes two nested `join_context`s, whose halves are
/// public at once and which no one claims: the inner `b` is taken back with the outer one
/// still public and unclaimed below it, so W1 is not idle there; the outer `b`, taken back
/// with only W2's claimed half below, is W1's last, and W1 counts itself idle.
#[test]
fn a_public_half_left_below_keeps_its_worker_out_of_the_idle_count() {
    for _ in 0..10 {
        watchdog(20, || {
            let pool = pool(2, 4);
            let w2_busy = AtomicBool::new(false);
            let done = AtomicBool::new(false);
            let idle_in_inner = AtomicUsize::new(usize::MAX);
            let idle_in_outer = AtomicUsize::new(usize::MAX);
            let idle = || pool.stats().idle_workers;
            let (w1, w2) = pool.install(|| {
                treepool::join_context(
                    |_| {
                        spin_until(|| w2_busy.load(Ordering::SeqCst));
                        treepool::join_context(
                            |_| {
                                treepool::join_context(
                                    |_| (),
                                    |_| idle_in_inner.store(idle(), Ordering::SeqCst),
                                )
                            },
                            |_| {
                                idle_in_outer.store(idle(), Ordering::SeqCst);
                                done.store(true, Ordering::SeqCst);
                            },
                        );
                        treepool::current_thread_index()
                    },
                    |_| {
                        // The `join` takes W2 out of the idle count (a thief counts until the
                        // half it stole joins); `a` keeps it busy until W1 is done.
                        treepool::join(
                            || {
                                w2_busy.store(true, Ordering::SeqCst);
                                spin_until(|| done.load(Ordering::SeqCst));
                            },
                            || (),
                        );
                        treepool::current_thread_index()
                    },
                )
            });
            assert_ne!(w1, w2, "the root's `b` ran on the other worker");
            assert_eq!(
                idle_in_inner.load(Ordering::SeqCst),
                0,
                "the inner `b` ran with the outer one public and unclaimed below: not idle"
            );
            assert_eq!(
                idle_in_outer.load(Ordering::SeqCst),
                1,
                "the outer `b` was the last unclaimed half of its worker: counted idle"
            );
        });
    }
}

/// What the rule gives up, and the call that does not need it. W1 runs a half taken back from
/// the public part with another public half of its own unclaimed below, so it is busy, not
/// counted idle; meanwhile W2 joins, and its `a` waits until its `b` has run. A plain `join`
/// there keeps `b` private (a join made while every other worker is busy: design §6), and
/// hangs; the old rule happened to count W1 idle and finished it (found by the adversarial
/// review of the rule). `join_context` publishes `b` at once, so W1 takes it when it runs dry.
#[test]
fn a_join_context_made_while_the_other_worker_runs_a_half_above_a_public_one_finishes() {
    for _ in 0..10 {
        watchdog(20, || {
            let pool = pool(2, 4);
            let r_started = AtomicBool::new(false);
            let go = AtomicBool::new(false);
            let w2_in_a = AtomicBool::new(false);
            let b_ran = AtomicBool::new(false);
            let b_thread = AtomicUsize::new(usize::MAX);
            let (w1, ()) = pool.install(|| {
                treepool::join_context(
                    |_| {
                        spin_until(|| r_started.load(Ordering::SeqCst));
                        // W2 is a thief that has not joined yet (counted idle): both `b`s
                        // are promoted; the inner one comes back retracted over the outer.
                        treepool::join(
                            || {
                                treepool::join(
                                    || (),
                                    || {
                                        go.store(true, Ordering::SeqCst);
                                        spin_until(|| w2_in_a.load(Ordering::SeqCst));
                                    },
                                )
                            },
                            || (),
                        );
                        treepool::current_thread_index()
                    },
                    |_| {
                        r_started.store(true, Ordering::SeqCst);
                        spin_until(|| go.load(Ordering::SeqCst));
                        treepool::join_context(
                            |_| {
                                w2_in_a.store(true, Ordering::SeqCst);
                                spin_until(|| b_ran.load(Ordering::SeqCst));
                            },
                            |_| {
                                b_thread.store(
                                    treepool::current_thread_index().unwrap_or(usize::MAX),
                                    Ordering::SeqCst,
                                );
                                b_ran.store(true, Ordering::SeqCst);
                            },
                        );
                    },
                )
            });
            assert_eq!(
                Some(b_thread.load(Ordering::SeqCst)),
                w1,
                "the `b` W2's `a` waited for ran on W1, once W1 ran dry"
            );
        });
    }
}
