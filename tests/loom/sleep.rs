//! Loom models of the sleep/wake protocol (`src/worker/sleep.rs`).
//!
//! Run with
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test --release --test loom sleep::
//! ```
//!
//! Each model fixes its own preemption bound through [`loom::model::Builder`] (none at all for
//! the two-thread models), so the result does not depend on `LOOM_MAX_PREEMPTIONS`.
//!
//! # What is modelled
//!
//! The real [`Sleep`] code, compiled against loom's atomics, `Mutex` and `Condvar`. A worker loops
//! `while !condition { sleep.sleep(0, has_work, done) }` as `WorkerThread::wait_until` does (a
//! sleep may return spuriously); the other side publishes the condition and then calls
//! `new_work()` (a job was pushed) or `wake_worker(0)` (the worker's latch was set). A lost
//! wake-up leaves the worker blocked on its condvar forever, which loom reports as a deadlock.
//! Every model ends with no worker counted as a sleeper ([`Sleep::sleepers`]): whoever wakes a
//! worker takes it out of the count, and a worker that leaves on its own takes itself out, once
//! (a second time trips a `debug_assert!`; CI runs the models with debug assertions).
//!
//! Shown to fail (each change made alone to `src/worker/sleep.rs`, then reverted; a deadlock aborts the
//! run at the first model that hits it):
//! * without the SeqCst fence in `wake_worker`: model (b) deadlocks;
//! * without the fence after the sleeper raises its `asleep` flag, or with the flag raised
//!   `Relaxed` and no fence: models (a) to (d) deadlock;
//! * without the fence after `wake_one`'s `announcements` increment, or without the increment:
//!   model (a) deadlocks;
//! * if a woken worker also takes itself out of `sleepers`: "a worker left sleep twice";
//! * if `wake_one` does not pass by a worker that sleeps aside: model (f) deadlocks;
//! * if the waker of an aside sleeper takes it out of `sleepers`: model (e) fails "a worker
//!   left sleep twice".
//! * if a worker that stops running pool work does not pass on a wake-up it spent
//!   (`Sleep::pass_on` left out): model (g) deadlocks.
//!
//! # What is assumed
//!
//! The deques are not modelled: "work is available" is one loom `AtomicBool`. The pusher stores
//! it with `Release`, as a deque push publishes its new back index. `has_work` issues a SeqCst
//! fence before it loads the flag, as crossbeam's `Stealer::is_empty` does between its two index
//! loads (the injector's `is_empty` uses SeqCst loads instead; loom treats SeqCst loads as
//! acquire loads, so a model with them would report false lost wake-ups). A latch is a loom
//! `AtomicBool` set with `Release` and probed with `Acquire`, as `Latch` does.

use crate::runner::model;
use loom::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use loom::thread;
use treepool::__loom::{Arc, Sleep};

/// Whether the (modelled) deques hold work, read as `WorkerThread::has_work` does.
fn has_work(work: &AtomicBool) -> bool {
    // SeqCst fence: as in crossbeam's `Stealer::is_empty`.
    fence(Ordering::SeqCst);
    work.load(Ordering::Acquire)
}

/// Model (a): work pushed while worker 0 goes to sleep. The pusher publishes the work, then calls
/// `new_work()`; the sleeper must see the work or be woken.
#[test]
fn new_work_wakes_sleeper() {
    model(None, || {
        let sleep = Arc::new(Sleep::new(1));
        let work = Arc::new(AtomicBool::new(false));

        let pusher = {
            let (sleep, work) = (sleep.clone(), work.clone());
            thread::spawn(move || {
                work.store(true, Ordering::Release);
                sleep.new_work();
            })
        };
        while !has_work(&work) {
            sleep.sleep(0, || has_work(&work), || false);
        }
        pusher.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// Model (b): worker 0 sleeps until its latch is set; the setter sets it, then wakes the owner
/// with `wake_worker(0)`, as `Latch::set` does.
#[test]
fn latch_wakes_owner() {
    model(None, || {
        let sleep = Arc::new(Sleep::new(1));
        let latch = Arc::new(AtomicBool::new(false));

        let setter = {
            let (sleep, latch) = (sleep.clone(), latch.clone());
            thread::spawn(move || {
                latch.store(true, Ordering::Release);
                sleep.wake_worker(0);
            })
        };
        let done = || latch.load(Ordering::Acquire);
        while !done() {
            sleep.sleep(0, || false, done);
        }
        setter.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// Model (c): two workers asleep, one wakes the other. Worker 1 waits for its latch; worker 0
/// sets it after its own sleep was ended by new work from a third thread. Both must return.
#[test]
fn chained_wake_ups() {
    model(Some(3), || {
        let sleep = Arc::new(Sleep::new(2));
        let work = Arc::new(AtomicBool::new(false));
        let latch = Arc::new(AtomicBool::new(false));

        let worker1 = {
            let (sleep, latch) = (sleep.clone(), latch.clone());
            thread::spawn(move || {
                let done = || latch.load(Ordering::Acquire);
                while !done() {
                    sleep.sleep(1, || false, done);
                }
            })
        };
        let pusher = {
            let (sleep, work) = (sleep.clone(), work.clone());
            thread::spawn(move || {
                work.store(true, Ordering::Release);
                sleep.new_work();
            })
        };
        // Worker 0: sleeps until it has work, then "runs" it, which sets worker 1's latch.
        while !has_work(&work) {
            sleep.sleep(0, || has_work(&work), || false);
        }
        latch.store(true, Ordering::Release);
        sleep.wake_worker(1);
        pusher.join().unwrap();
        worker1.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// Model (d): two workers asleep, two jobs pushed one after the other, each `new_work()`. Each
/// worker waits until it took a job. The first wake-up takes its worker out of `sleepers` at
/// once, so the second push must still find (and wake) the other one, not a count that says no
/// one sleeps while a worker is blocked.
#[test]
fn two_pushes_wake_two_sleepers() {
    model(Some(2), || {
        let sleep = Arc::new(Sleep::new(2));
        let jobs = Arc::new(AtomicUsize::new(0));

        let pusher = {
            let (sleep, jobs) = (sleep.clone(), jobs.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    jobs.fetch_add(1, Ordering::Release);
                    sleep.new_work();
                }
            })
        };
        let worker1 = {
            let (sleep, jobs) = (sleep.clone(), jobs.clone());
            thread::spawn(move || take_one(&sleep, 1, &jobs))
        };
        take_one(&sleep, 0, &jobs);
        pusher.join().unwrap();
        worker1.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// Worker `index` sleeps until it takes one of `jobs`.
fn take_one(sleep: &Sleep, index: usize, jobs: &AtomicUsize) {
    while !try_take(jobs) {
        sleep.sleep(index, || has_jobs(jobs), || false);
    }
}

/// Model (e): worker 0 sleeps aside (`sleep_aside`, as an ordered stream's consumer waits in
/// `wait_for_own`) until its latch is set; the setter sets it, then wakes it by index. Like
/// model (b); an aside sleeper never counts itself in `sleepers`, and its waker does not take
/// it out ("a worker left sleep twice" otherwise).
#[test]
fn latch_wakes_aside_sleeper() {
    model(None, || {
        let sleep = Arc::new(Sleep::new(1));
        let latch = Arc::new(AtomicBool::new(false));

        let setter = {
            let (sleep, latch) = (sleep.clone(), latch.clone());
            thread::spawn(move || {
                latch.store(true, Ordering::Release);
                sleep.wake_worker(0);
            })
        };
        let done = || latch.load(Ordering::Acquire);
        while !done() {
            sleep.sleep_aside(0, || false, done);
        }
        setter.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// Model (f): worker 0 sleeps aside until its latch is set, worker 1 sleeps for work; a pusher
/// publishes work and calls `new_work()`. The announcement must reach worker 1, not be spent on
/// worker 0 (which would not take the work): only once worker 1 took it is worker 0's latch set.
#[test]
fn new_work_passes_an_aside_sleeper_by() {
    model(Some(3), || {
        let sleep = Arc::new(Sleep::new(2));
        let work = Arc::new(AtomicBool::new(false));
        let latch = Arc::new(AtomicBool::new(false));

        let aside = {
            let (sleep, latch) = (sleep.clone(), latch.clone());
            thread::spawn(move || {
                let done = || latch.load(Ordering::Acquire);
                while !done() {
                    sleep.sleep_aside(0, || false, done);
                }
            })
        };
        let pusher = {
            let (sleep, work) = (sleep.clone(), work.clone());
            thread::spawn(move || {
                work.store(true, Ordering::Release);
                sleep.new_work();
            })
        };
        while !has_work(&work) {
            sleep.sleep(1, || has_work(&work), || false);
        }
        pusher.join().unwrap();
        latch.store(true, Ordering::Release);
        sleep.wake_worker(0);
        aside.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// Model (g): worker 0 is the builder's thread of `use_current_thread` in a call: it waits by
/// the rule until its latch is set (running a job if it finds one), then leaves the call and
/// runs no pool work any more, passing on a wake-up it may have spent (`Sleep::pass_on`, as
/// `WorkerThread::hand_over_local_jobs` does). Worker 1 sleeps for work. A third thread pushes a
/// job (`new_work()`), then sets worker 0's latch. With both workers blocked, the announcement
/// wakes worker 0, whose wait may then see its latch set and end without the job: the job must
/// still reach worker 1.
#[test]
fn a_leaving_worker_passes_a_spent_wake_up_on() {
    model(Some(2), || {
        let sleep = Arc::new(Sleep::new(2));
        let jobs = Arc::new(AtomicUsize::new(0));
        let latch = Arc::new(AtomicBool::new(false));
        // Set for worker 1 once worker 0 took the job itself (then no job is left for it).
        let stop = Arc::new(AtomicBool::new(false));

        let pusher = {
            let (sleep, jobs, latch) = (sleep.clone(), jobs.clone(), latch.clone());
            thread::spawn(move || {
                jobs.fetch_add(1, Ordering::Release);
                sleep.new_work();
                latch.store(true, Ordering::Release);
                sleep.wake_worker(0);
            })
        };
        let worker1 = {
            let (sleep, jobs, stop) = (sleep.clone(), jobs.clone(), stop.clone());
            thread::spawn(move || {
                let done = || stop.load(Ordering::Acquire);
                while !done() && !try_take(&jobs) {
                    sleep.sleep(1, || has_jobs(&jobs), done);
                }
            })
        };
        let done = || latch.load(Ordering::Acquire);
        let mut took = false;
        while !done() {
            if try_take(&jobs) {
                took = true;
                continue;
            }
            sleep.sleep(0, || has_jobs(&jobs), done);
        }
        sleep.pass_on(|| has_jobs(&jobs));
        pusher.join().unwrap();
        if took {
            stop.store(true, Ordering::Release);
            sleep.wake_worker(1);
        }
        worker1.join().unwrap();
        assert_eq!(jobs.load(Ordering::Acquire), 0);
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// Whether `jobs` holds a job, read as `WorkerThread::has_work` does.
fn has_jobs(jobs: &AtomicUsize) -> bool {
    // SeqCst fence: as in `has_work` above.
    fence(Ordering::SeqCst);
    jobs.load(Ordering::Acquire) > 0
}

/// Takes one of `jobs` if there is one.
fn try_take(jobs: &AtomicUsize) -> bool {
    let mut n = jobs.load(Ordering::Acquire);
    while n > 0 {
        match jobs.compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => n = now,
        }
    }
    false
}
