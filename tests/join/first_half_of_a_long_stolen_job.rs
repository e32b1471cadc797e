//! LongStolenHalfPublishes (`WorkerThread::idle_at_join`): a stolen half that runs long before its
//! first `join` publishes that join's `b` at once, whether or not a worker is idle, so a worker
//! that runs dry later, while the joiner runs a long `a` with no `join` in it, takes that `b`,
//! as a rayon thief takes the oldest job of a deque. Found with rayon-demo's
//! `demo_quick_sort_strings` (issue 41), whose idle worker waited for the end of the other's
//! partition: a stolen half partitions (long), then joins, then partitions again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{pool, spin_until, watchdog};

/// Far longer than `LONG_BEFORE_JOIN` (10 µs), so that no preemption makes the run shorter.
const LONG: Duration = Duration::from_millis(2);

/// Two workers. The root's `join_context` gives its `b` to the other worker W2, which runs it
/// for `LONG` and then joins: its `b2` goes to W2's split stack while W1, spinning in the
/// root's `a`, is busy (not counted idle), so the idle rule alone would keep `b2` private.
/// Then W1 runs dry (its `a` returns, and it waits for the `b` W2 runs), and W2's `a2` spins,
/// joining nothing, until `b2` has run: only W1 can run it, and only if it is public. Without
/// the policy the test hangs and its watchdog fails it.
#[test]
fn a_worker_that_runs_dry_later_takes_the_first_half_of_a_long_stolen_job() {
    for _ in 0..10 {
        watchdog(20, || {
            let pool = pool(2, 4);
            let started = AtomicBool::new(false);
            let b2_ran = AtomicBool::new(false);
            let promotions_before = pool.stats().promotions;
            let (on_w1, (w2, b2_thread)) = pool.install(|| {
                treepool::join_context(
                    |_| {
                        spin_until(|| started.load(Ordering::SeqCst));
                        treepool::current_thread_index()
                    },
                    |_| {
                        let until = Instant::now() + LONG;
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                        let ((), b2_thread) = treepool::join(
                            || {
                                started.store(true, Ordering::SeqCst);
                                spin_until(|| b2_ran.load(Ordering::SeqCst));
                            },
                            || {
                                b2_ran.store(true, Ordering::SeqCst);
                                treepool::current_thread_index()
                            },
                        );
                        (treepool::current_thread_index(), b2_thread)
                    },
                )
            });
            assert_ne!(on_w1, w2, "the root's `b` ran on the other worker");
            assert_eq!(b2_thread, on_w1, "`b2` ran on the worker that ran dry");
            // The root's `b` (by `join_context`) and `b2` (by the policy), at least.
            assert!(pool.stats().promotions >= promotions_before + 2);
        });
    }
}
