//! Loom models of lazy join (`src/worker/lazy.rs`, `src/api/join.rs`): promotion of a private join half
//! against its joiner taking it back.
//!
//! Run with
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test --release --test loom join::
//! ```
//!
//! # What is modelled
//!
//! The real [`PrivateHalves`] (the owner's stack of un-promoted halves) and [`RequestFlag`] (the
//! thief's request), compiled against loom's atomics. The owner thread runs two nested joins,
//! then a third join in the slot the outer one used, as
//! `join_in_worker` does: push the half and serve a pending request (promote the oldest half to
//! the deque), run `a` (the inner join), then `take_back`: run the half inline if it is still
//! private, else pop the deque as `promoted_half` does (its own half: run it inline; another
//! one: run it as a taker would), or wait for the half's latch, running meanwhile whatever half
//! was sent back to it (named policy HalfReturnsToItsJob: the joiner's wait runs it as part of
//! its job). The thief steals from the front of the deque until the owner is done, and runs,
//! or sends back, what it takes; each round that finds nothing raises the owner's flag.
//!
//! Each model checks that every half runs exactly once and that the owner saw both results.
//!
//! A third model, `a_thief_that_asked_before_sleeping_is_woken_by_the_promotion`, runs the real
//! [`Sleep`] with the real [`RequestFlag`]: a thief raises the busy worker's flag and sleeps
//! until the deque holds work; the busy worker, which goes on joining, serves the request as
//! `WorkerThread::promote_oldest` does (a deque push, then `Sleep::new_work`). A lost wake-up
//! leaves the thief blocked forever, which loom reports as a deadlock. With
//! `Sleep::new_local_work` (no fence) in place of `new_work` it fails: that is why a promotion,
//! unlike other pushes to a worker's own deque, fences.
//!
//! # What is assumed
//!
//! The deque is a loom `Mutex<VecDeque>` (push and pop at the back by the owner, steal at the
//! front), standing in for crossbeam's deque, whose one-winner guarantee is crossbeam's to
//! prove. A half's latch is a loom `AtomicU8` set with `Release` and probed with `Acquire`, as
//! `Latch` does; the owner's inbox, where halves are sent back, is a loom `Mutex<VecDeque>`, as
//! crossbeam's injector stands behind `Inboxes`; admission is not modelled (a taker either
//! always admits or always sends back, one model each): the token table has models of its own
//! in `tests/loom/tokens.rs`.

use std::collections::VecDeque;

use crate::runner::model;
use loom::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering};
use loom::sync::Mutex;
use loom::thread;
use treepool::__loom::{Arc, PrivateHalves, RequestFlag, Sleep};

const UNSET: u8 = 0;
const SET: u8 = 1;

/// The halves: 0 is the outer join's `b`, 1 the inner one's (a join inside the outer `a`), 2
/// the `b` of a second join made after the outer one returned, which reuses slot 0.
const HALVES: usize = 3;

/// What the owner and the thief share.
#[derive(Default)]
struct Shared {
    request: RequestFlag,
    deque: Mutex<VecDeque<usize>>,
    /// The owner's inbox: halves sent back to it unrun.
    inbox: Mutex<VecDeque<usize>>,
    latches: [AtomicU8; HALVES],
    /// How many times each half ran.
    runs: [AtomicUsize; HALVES],
    owner_done: AtomicBool,
}

impl Shared {
    /// Runs half `h` (counts the run).
    fn run(&self, h: usize) {
        self.runs[h].fetch_add(1, Ordering::Relaxed);
    }

    /// A taker other than the joiner's pop-back got half `h`: runs it and sets its latch, or
    /// sends it back unrun to the owner's inbox (`WorkerThread::return_half`).
    fn take(&self, h: usize, admit: bool) {
        if admit {
            self.run_and_set(h);
        } else {
            self.inbox.lock().unwrap().push_back(h);
        }
    }

    /// Runs half `h` away from its joiner's frame and sets its latch, as `JoinJob::run` does.
    fn run_and_set(&self, h: usize) {
        self.run(h);
        self.latches[h].store(SET, Ordering::Release);
    }

    /// The owner's wait: runs a half sent back to it, as part of its job. Returns whether it
    /// found one.
    fn run_sent_back(&self) -> bool {
        let sent_back = self.inbox.lock().unwrap().pop_front();
        sent_back.map(|h| self.run_and_set(h)).is_some()
    }
}

/// The owner: `push_half` of `join_in_worker`.
fn push_half(shared: &Shared, halves: &PrivateHalves<usize>, h: usize) -> usize {
    // Loom's exploration does not move the thief's raise (a load, then a store) ahead of the
    // owner's relaxed load in `take` on its own; an owner step on the deque that the thief also
    // touches gives it the point to switch at. The real owner touches its deque all the time.
    drop(shared.deque.lock().unwrap());
    let slot = halves.push(h);
    if shared.request.take() {
        if let Some(oldest) = halves.promote_oldest() {
            shared.deque.lock().unwrap().push_back(oldest);
        }
    }
    slot
}

/// The owner, after `a`: `take_back`, else `promoted_half`.
fn finish_half(shared: &Shared, halves: &PrivateHalves<usize>, h: usize, slot: usize, admit: bool) {
    if halves.take_back(slot) {
        shared.run(h);
        return;
    }
    loop {
        if shared.latches[h].load(Ordering::Acquire) != UNSET {
            break;
        }
        let popped = shared.deque.lock().unwrap().pop_back();
        match popped {
            Some(job) if job == h => {
                shared.run(h);
                return;
            }
            Some(other) => shared.take(other, admit),
            None => {
                while shared.latches[h].load(Ordering::Acquire) == UNSET {
                    if !shared.run_sent_back() {
                        thread::yield_now();
                    }
                }
                return;
            }
        }
    }
}

/// Two nested joins and a later one on the owner, against a thief that asks for work and takes what is promoted,
/// admitting it (`admit`) or sending it back.
fn nested_joins_against_a_thief(admit: bool) {
    model(Some(3), move || {
        let shared = Arc::new(Shared::default());
        let thief = {
            let shared = shared.clone();
            thread::spawn(move || {
                // The thief is idle from the start (it asks first); then, as `wait_until`, each
                // round that finds nothing raises the owner's flag again and yields.
                shared.request.raise();
                while !shared.owner_done.load(Ordering::Acquire) {
                    let stolen = shared.deque.lock().unwrap().pop_front();
                    match stolen {
                        Some(h) => shared.take(h, admit),
                        None => {
                            shared.request.raise();
                            thread::yield_now();
                        }
                    }
                }
            })
        };
        let halves = PrivateHalves::default();
        let outer = push_half(&shared, &halves, 0);
        let inner = push_half(&shared, &halves, 1);
        finish_half(&shared, &halves, 1, inner, admit);
        finish_half(&shared, &halves, 0, outer, admit);
        let next = push_half(&shared, &halves, 2);
        finish_half(&shared, &halves, 2, next, admit);
        shared.owner_done.store(true, Ordering::Release);
        thief.join().unwrap();
        for h in 0..HALVES {
            assert_eq!(
                shared.runs[h].load(Ordering::Relaxed),
                1,
                "half {h} ran once"
            );
        }
        assert!(shared.deque.lock().unwrap().is_empty());
    });
}

#[test]
fn a_promoted_half_runs_once_when_its_taker_admits_it() {
    nested_joins_against_a_thief(true);
}

#[test]
fn a_promoted_half_runs_once_when_its_taker_sends_it_back() {
    nested_joins_against_a_thief(false);
}

/// Whether the (modelled) deque holds work, read as `WorkerThread::has_work` does (see
/// `tests/loom/sleep.rs`: crossbeam's `Stealer::is_empty` fences between its loads).
fn has_work(work: &AtomicBool) -> bool {
    // SeqCst fence: as in crossbeam's `Stealer::is_empty`.
    fence(Ordering::SeqCst);
    work.load(Ordering::Acquire)
}

#[test]
fn a_thief_that_asked_before_sleeping_is_woken_by_the_promotion() {
    model(None, || {
        let sleep = Arc::new(Sleep::new(2));
        let request = Arc::new(RequestFlag::default());
        let work = Arc::new(AtomicBool::new(false));
        let busy = {
            let (sleep, request, work) = (sleep.clone(), request.clone(), work.clone());
            thread::spawn(move || {
                // Worker 0 goes on joining; each join checks its flag.
                while !request.take() {
                    thread::yield_now();
                }
                // `promote_oldest`: the push, then the fenced announcement.
                work.store(true, Ordering::Release);
                sleep.new_work();
            })
        };
        // Worker 1: its last request before sleeping (`ask_for_work(true)`), then the sleep loop
        // of `wait_until`.
        request.raise();
        while !has_work(&work) {
            sleep.sleep(1, || has_work(&work), || false);
        }
        busy.join().unwrap();
    });
}
