//! Loom models of the ordered stream's two handshakes (`Handoff` in `src/api/ordered.rs`).
//!
//! Run with
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test --release --test loom ordered::
//! ```
//!
//! # What is modelled
//!
//! The real [`Handoff`], compiled against loom's atomics and fences. A carrier claims items until
//! none is left, then leaves through `Handoff::stays`; the consumer publishes an item and calls
//! `Handoff::add_carrier`, spawning a carrier (a loom thread) when it says so. Every published
//! item must be claimed by the end: a pulled item left without a runner would hang a consumer
//! that cannot run items itself. The consumer's wait is `arm`, then a loop that parks until the
//! item is complete; the completer stores its output, calls `complete`, and unparks the consumer
//! if it says so: a lost wake-up leaves the consumer parked forever, which loom reports as a
//! deadlock.
//!
//! Shown to fail (each change made alone to `src/api/ordered.rs`, then reverted):
//! * `stays` without its fence: model (a) fails "an item was left without a carrier";
//! * `add_carrier` without its fence: the same;
//! * `complete` without its fence, or `arm` without its fence: model (b) deadlocks (loom:
//!   "deadlock; threads = [.. Blocked ..]").
//!
//! # What is assumed
//!
//! The slots are not modelled: an item is its index, its output a loom `AtomicBool` stored with
//! `Release` before `complete` (as `Stream::complete` marks the slot), and read with `Acquire`.

use crate::runner::model;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;
use treepool::__loom::{Arc, Handoff};

/// A carrier's run (as `Stream::serve`, without the lingering): claims until nothing is left,
/// counting the claims in `ran`, then leaves unless it must stay.
fn serve(handoff: &Handoff, ran: &AtomicUsize) {
    loop {
        while handoff.claim().is_some() {
            ran.fetch_add(1, Ordering::Relaxed);
        }
        if !handoff.stays() {
            return;
        }
    }
}

/// Model (a): a carrier that is about to leave, and the consumer publishing an item. The item
/// must be claimed, by that carrier or by one the consumer spawns, exactly once.
#[test]
fn a_published_item_always_finds_a_carrier() {
    model(None, || {
        let handoff = Arc::new(Handoff::new());
        let ran = Arc::new(AtomicUsize::new(0));
        // One carrier lives (as if spawned for an earlier item, already claimed).
        assert_eq!(handoff.add_carrier(0), None);
        handoff.publish(1);
        assert_eq!(handoff.add_carrier(1), Some(0));
        assert_eq!(handoff.claim(), Some(0));
        ran.fetch_add(1, Ordering::Relaxed);
        let carrier = {
            let (handoff, ran) = (handoff.clone(), ran.clone());
            thread::spawn(move || serve(&handoff, &ran))
        };
        // The consumer publishes item 1 while the carrier may be leaving.
        handoff.publish(2);
        let spawned = handoff.add_carrier(2).map(|_| {
            let (handoff, ran) = (handoff.clone(), ran.clone());
            thread::spawn(move || serve(&handoff, &ran))
        });
        carrier.join().unwrap();
        if let Some(spawned) = spawned {
            spawned.join().unwrap();
        }
        assert_eq!(
            ran.load(Ordering::Relaxed),
            2,
            "an item was left without a carrier"
        );
    });
}

/// Model (b): the consumer waits for item 0 while a carrier completes it: it must see the
/// output or be woken.
#[test]
fn a_waiting_consumer_is_woken_by_the_completion() {
    model(None, || {
        let handoff = Arc::new(Handoff::new());
        let output = Arc::new(AtomicBool::new(false));
        handoff.publish(1);
        let consumer = {
            let (handoff, output) = (handoff.clone(), output.clone());
            thread::spawn(move || {
                handoff.arm();
                while handoff.completed() < 1 {
                    thread::park();
                }
                handoff.disarm();
                assert!(output.load(Ordering::Acquire), "the output is visible");
            })
        };
        assert_eq!(handoff.claim(), Some(0));
        output.store(true, Ordering::Release);
        if handoff.complete() {
            consumer.thread().unpark();
        }
        consumer.join().unwrap();
    });
}
