//! Loom models of a worker's split stack of `join` halves (`src/base/half_stack.rs`): the owner
//! (its joins) against takers (thieves, and the owner's own wait).
//!
//! Run with
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
//!     cargo test --release --test loom join::
//! ```
//!
//! # What is modelled
//!
//! The real [`HalfStack`] (what takers see) and [`HalfOwner`] (the owner's end), compiled
//! against loom's atomics, driven as `join_in_worker` and `public_half` (`src/api/join.rs`) and
//! `WorkerThread`'s waits (`src/worker/thread.rs`) drive them. A join of half `h` pushes `h`'s
//! address (`push`), maybe makes the oldest private half public (`promote`), runs `a` (which
//! may join again, above), then takes the slot back (`take_back`): `Private` or `Retracted`,
//! the owner runs `h` itself (unless a wait of `a` ran it already, in place); `Taken`, it waits
//! until the taker settled `h` (its state, set with `Release` by the taker: `DONE` after running
//! it, `DECLINED` when it would not admit it, and then the owner runs it), then frees the slot
//! (`release_taken`). A taker thread loops `HalfStack::steal` until the owner is done, and runs
//! or declines (one model each) what it claims.
//!
//! * model A, `a_public_half_runs_once_when_its_taker_{admits,declines}_it`: half 0's join,
//!   promoted, whose `a` joins half 1, promoted too; then half 2's join, promoted, which reuses
//!   slot 0 with another address; against a taker that admits, or declines, what it claims;
//! * model B, `a_joiner_that_waits_for_a_taken_half_joins_again_above_it`: the owner, waiting
//!   for its taken half 0, joins half 1 in the slot above (promoted, so it may be taken too),
//!   frees that slot, then its own, then reuses slot 0 for half 2: this checks
//!   `release_taken`'s reset of `ends`;
//! * model C, `a_wait_claims_the_owners_oldest_public_half_as_a_thief_would` and
//!   `a_wait_retracts_the_owners_public_halves_and_runs_them_in_place`: inside `a` of two
//!   nested promoted joins, the owner's wait runs its own halves, one per round: claimed as a
//!   thief would (`HalfOwner::steal`, as `claim_own_half` does), or the newest not run yet, in
//!   place, private or public and retracted (`place`, `retract_to`, as
//!   `run_half_of_current_job` does), the claim first or last; a half run in place is then
//!   taken back `Private`, and its joiner does not run it again;
//! * model E, `an_eager_half_taken_back_newest_first_runs_once_when_its_taker_{admits,declines}_it`:
//!   model A's joins as `join_context` makes them (`join_eagerly`): taken back by
//!   `take_back_newest_public` first, then, if that did not free the slot, `take_back`;
//! * model D, `a_thief_that_asked_before_sleeping_is_woken_by_the_promotion`: the real
//!   [`Sleep`] with its idle count: a thief counts itself idle (`Sleep::idle`) and sleeps
//!   until a half is public ([`HalfStack::has_public`]), then claims it; the owner, which goes
//!   on joining, sees the idle count at a join and promotes as `WorkerThread::promote_oldest`
//!   does (`promote`, then `Sleep::new_work_after_seqcst_rmw`), and waits in its `a` for the
//!   thief to run the half. A lost wake-up
//!   leaves the thief blocked forever and the owner waiting, which loom reports when the
//!   owner's wait reaches its branch limit ("Model exceeded maximum number of branches": a
//!   deadlock proper, the owner blocked too, would abort the test binary, as loom's report
//!   panics again while unwinding). With `Sleep::new_local_work` in place of it it fails so
//!   (`a_thief_that_asked_before_sleeping_is_not_woken_without_the_fence`, `#[should_panic]`).
//!   Under loom `new_work_after_seqcst_rmw` fences before its load of the sleepers: loom
//!   treats SeqCst accesses as acquire/release, so the promotion's SeqCst RMW and that load
//!   alone, which order the two sides in C++20's single total order (the argument is at
//!   `Sleep::new_work_after_seqcst_rmw`), are beyond what it can check; the model checks the
//!   rest of the handshake.
//!
//! Each model checks that every half joined runs exactly once; that a taker gets, with the
//! slot it claimed, the address its joiner pushed there for the join in progress (each join
//! pushes its own address, `(h + 1) * 8`; a join that reuses a slot pushes another one), not
//! one of an earlier join of the slot ("a stale address"); and that the owner sees every
//! result: a half's result is a loom `UnsafeCell` that its runner writes and its joiner reads,
//! so a missing happens-before edge, or a half run twice, is a causality violation. Bounds:
//! preemption bound 5 for models A and E, 6 for B and C (each a few seconds), none for D.
//!
//! # Shown to fail
//!
//! The driver is generic over [`Owner`] and [`Takers`], which the real types implement, and so
//! does `broken::BrokenOwner`, a copy of the protocol (its debug assertions left out) with one
//! breakage chosen by a const parameter. The copy without a breakage passes models A to C and E
//! (`broken::the_faithful_copy_passes_*`); each breakage fails a model (`broken::*`,
//! `#[should_panic]`, with any preemption bound from 2 up):
//!
//! * `STEAL_READS_FIRST` (model A): `steal` reads the slot before its CAS. The owner retracts
//!   the half, runs it, reuses the slot and promotes again: `ends` is back to the value the
//!   taker read (an ABA), its CAS succeeds, and it gets the earlier join's address: "a taker
//!   got half 0 from slot 0 when its join was over: a stale address";
//! * `TAKE_BACK_BY_LOAD` (model A): the owner takes a public half back by a load and a store
//!   of `ends`, not a CAS: a taker's claim between the two is lost, and both run the half
//!   ("Causality violation: Concurrent write accesses to `UnsafeCell`", the half's result);
//!   model E fails so too, through `take_back_newest_public`;
//! * `RELEASE_KEEPS_HEAD` (model B): `release_taken` moves `split` down but leaves `head`: the
//!   next join in the slot is promoted below `head`, no taker can claim it, and its joiner,
//!   told `Taken`, waits forever ("Model exceeded maximum number of branches");
//! * `PROMOTE_RELAXED` (model A): `promote` bumps `split` with `Relaxed`: a claim is not
//!   ordered after the owner's write of the slot, reads the slot's earlier address and runs
//!   that half again ("Causality violation: Concurrent write accesses to `UnsafeCell`");
//! * `FREES_TAKEN_AT_ONCE` (model B): `take_back` frees a taken half's slot at once, not in
//!   `release_taken`: the owner's next join reuses the slot before the taker that claimed it
//!   read it, and the taker gets the new join's address: "a taker got half 1 from slot 0 when
//!   its join was over: a stale address".
//!
//! # What is assumed
//!
//! A half's state is a loom `AtomicU8` set with `Release` and probed with `Acquire`, as
//! `Latch` does; what a half does and how a taker admits it are not modelled (a taker always
//! admits, or always declines: one model each; the token table has models of its own in
//! `tests/loom/tokens.rs`). One taker thread stands for every thief (in model C the owner's
//! own claims race it): claims are one CAS on one word, so more thieves add interleavings of
//! the same kind. In model D the thief's look is [`HalfStack::has_public`], a SeqCst fence and
//! a load, which pairs with the owner's SeqCst promotion and its look at the sleepers (with a
//! Relaxed load and no fence there the model loses the wake-up).

use std::cell::Cell;

use crate::runner::model;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use loom::thread;
use treepool::__loom::{Arc, Back, HalfOwner, HalfStack, Place, Sleep, Steal};

/// The protocol as the models drive it, takers' side: [`HalfStack`], or a broken copy.
trait Takers: Default + Send + Sync + 'static {
    fn steal(&self) -> Steal;
    fn has_public(&self) -> bool;
}

/// The protocol as the models drive it, owner's side: [`HalfOwner`], or a broken copy.
trait Owner: 'static {
    type Stack: Takers;
    fn new(stack: Arc<Self::Stack>) -> Self;
    fn push(&self, half: *const ()) -> Option<usize>;
    fn promote(&self) -> bool;
    fn take_back(&self, slot: usize) -> Back;
    fn take_back_newest_public(&self, slot: usize) -> bool;
    fn release_taken(&self, slot: usize);
    fn retract_to(&self, slot: usize) -> bool;
    fn place(&self, slot: usize) -> Place;
    fn get(&self, slot: usize) -> *const ();
    fn top(&self) -> usize;
    fn steal(&self) -> Steal;
}

impl Takers for HalfStack {
    fn steal(&self) -> Steal {
        HalfStack::steal(self)
    }
    fn has_public(&self) -> bool {
        HalfStack::has_public(self)
    }
}

impl Owner for HalfOwner {
    type Stack = HalfStack;
    fn new(stack: Arc<HalfStack>) -> Self {
        HalfOwner::new(stack)
    }
    fn push(&self, half: *const ()) -> Option<usize> {
        HalfOwner::push(self, half)
    }
    fn promote(&self) -> bool {
        HalfOwner::promote(self)
    }
    fn take_back(&self, slot: usize) -> Back {
        HalfOwner::take_back(self, slot)
    }
    fn take_back_newest_public(&self, slot: usize) -> bool {
        HalfOwner::take_back_newest_public(self, slot)
    }
    fn release_taken(&self, slot: usize) {
        HalfOwner::release_taken(self, slot)
    }
    fn retract_to(&self, slot: usize) -> bool {
        HalfOwner::retract_to(self, slot)
    }
    fn place(&self, slot: usize) -> Place {
        HalfOwner::place(self, slot)
    }
    fn get(&self, slot: usize) -> *const () {
        HalfOwner::get(self, slot)
    }
    fn top(&self) -> usize {
        HalfOwner::top(self)
    }
    fn steal(&self) -> Steal {
        HalfOwner::steal(self)
    }
}

/// The most halves a model joins.
const HALVES: usize = 3;

/// A half's state: not settled yet.
const UNRUN: u8 = 0;
/// A taker ran it.
const DONE: u8 = 1;
/// A taker would not run it: its joiner does.
const DECLINED: u8 = 2;

/// The address a join of half `h` pushes: distinct, never null.
fn address(h: usize) -> *const () {
    ((h + 1) * 8) as *const ()
}

/// The half whose address a taker got.
fn half_at(address: *const ()) -> usize {
    let a = address as usize;
    assert!(
        a % 8 == 0 && (8..=HALVES * 8).contains(&a),
        "a taker got address {a:#x}, which no join pushed"
    );
    a / 8 - 1
}

/// The result of half `h`.
fn result_of(h: usize) -> usize {
    100 + h
}

/// The halves of a model, shared by the owner and the taker.
#[derive(Default)]
struct Halves {
    /// Each half's state: `UNRUN`, then `DONE` or `DECLINED` once a taker settled it.
    state: [AtomicU8; HALVES],
    /// How many times each half ran.
    runs: [AtomicUsize; HALVES],
    /// Each half's result: written by its runner, read by its joiner.
    result: [UnsafeCell<usize>; HALVES],
    /// Whether half `h`'s join is in progress (set before its push, cleared once its joiner
    /// has its result): a taker that gets `h` while it is not has a stale address.
    live: [AtomicBool; HALVES],
    /// The slot half `h` was pushed in.
    slot_of: [AtomicUsize; HALVES],
    /// Whether half `h` was joined (which halves a model joins depends on what was taken).
    joined: [AtomicBool; HALVES],
    owner_done: AtomicBool,
}

// SAFETY: the result cells are loom's `UnsafeCell`s, whose accesses loom checks: a write
// concurrent with another access fails the model.
unsafe impl Sync for Halves {}

impl Halves {
    /// Runs half `h`: counts the run and writes its result.
    fn run(&self, h: usize) {
        self.runs[h].fetch_add(1, Ordering::Relaxed);
        // SAFETY: loom checks the accesses (see `Sync` above).
        self.result[h].with_mut(|r| unsafe { *r = result_of(h) });
    }

    /// A taker claimed `address` from `slot`: checks that it is the half its joiner pushed there
    /// for the join in progress, then runs it (`admit`) or declines it, and settles it.
    fn claimed(&self, slot: usize, address: *const (), admit: bool) {
        let h = half_at(address);
        // Relaxed: the claim's acquire (of `ends` as the slot's promotion left it, or later)
        // orders the owner's stores made before that promotion before these loads.
        assert!(
            self.live[h].load(Ordering::Relaxed),
            "a taker got half {h} from slot {slot} when its join was over: a stale address"
        );
        assert_eq!(
            self.slot_of[h].load(Ordering::Relaxed),
            slot,
            "a taker got half {h} from a slot it was not pushed in"
        );
        assert_eq!(
            self.state[h].load(Ordering::Relaxed),
            UNRUN,
            "half {h} was claimed twice"
        );
        if admit {
            self.run(h);
            self.state[h].store(DONE, Ordering::Release);
        } else {
            self.state[h].store(DECLINED, Ordering::Release);
        }
    }

    /// A taker thread: claims what is public until the owner is done.
    fn taker<S: Takers>(&self, stack: &S, admit: bool) {
        loop {
            match stack.steal() {
                Steal::Taken(slot, address) => self.claimed(slot, address, admit),
                Steal::Retry => {}
                Steal::Empty => {
                    if self.owner_done.load(Ordering::Acquire) {
                        return;
                    }
                    thread::yield_now();
                }
            }
        }
    }

    /// After the owner and the taker are done: every half joined ran exactly once, and no
    /// other one ran.
    fn check_runs(&self) {
        for h in 0..HALVES {
            let joined = self.joined[h].load(Ordering::Relaxed);
            assert_eq!(
                self.runs[h].load(Ordering::Relaxed),
                usize::from(joined),
                "half {h} (joined: {joined}) ran once if joined, else never"
            );
        }
    }
}

/// The owner's side of a model: its end of the stack, and what it ran in place.
struct Joiner<'a, O: Owner> {
    owner: O,
    halves: &'a Halves,
    /// Halves a wait of their job ran in place (retracted): their joiner does not run them.
    ran_here: [Cell<bool>; HALVES],
    /// Joins take their half back as `join_context`'s do (`join_eagerly`): the newest public
    /// half first (`take_back_newest_public`), else as any join.
    eager: Cell<bool>,
}

impl<'a, O: Owner> Joiner<'a, O> {
    fn new(stack: Arc<O::Stack>, halves: &'a Halves) -> Self {
        Joiner {
            owner: O::new(stack),
            halves,
            ran_here: Default::default(),
            eager: Cell::new(false),
        }
    }

    /// `join_in_worker` with `b` = half `h`: pushes it, runs `serve` (the request check of
    /// `push_half`: promotes, or not), then `a`, then takes `h` back and gets its result. While
    /// a taker has `h`, runs `while_taken` first (the wait's other work), then waits.
    fn join(&self, h: usize, serve: impl FnOnce(&O), a: impl FnOnce(), while_taken: impl FnOnce()) {
        let halves = self.halves;
        // Relaxed: published with the slot by the promotion's release.
        halves.live[h].store(true, Ordering::Relaxed);
        halves.joined[h].store(true, Ordering::Relaxed);
        let slot = self.owner.push(address(h)).expect("a free slot");
        halves.slot_of[h].store(slot, Ordering::Relaxed);
        serve(&self.owner);
        a();
        let back = if self.eager.get() && self.owner.take_back_newest_public(slot) {
            Back::Retracted
        } else {
            self.owner.take_back(slot)
        };
        match back {
            Back::Private | Back::Last | Back::Retracted => {
                if !self.ran_here[h].get() {
                    halves.run(h);
                }
            }
            Back::Taken => {
                while_taken();
                loop {
                    // Acquire: pairs with the taker's release; the result (or the half, declined)
                    // is the owner's then.
                    match halves.state[h].load(Ordering::Acquire) {
                        UNRUN => thread::yield_now(),
                        DONE => break,
                        _ => {
                            // Declined: the wait runs it, as part of its job.
                            halves.run(h);
                            break;
                        }
                    }
                }
                self.owner.release_taken(slot);
            }
        }
        // SAFETY: loom checks the access.
        let result = halves.result[h].with(|r| unsafe { *r });
        assert_eq!(
            result,
            result_of(h),
            "the joiner of half {h} sees its result"
        );
        halves.live[h].store(false, Ordering::Relaxed);
    }

    /// A wait of the current job that found no other work, step 1 of `run_own_half`
    /// (`run_half_of_current_job`): runs the newest half not run yet in place, private, or
    /// public and retracted. Returns whether it ran one.
    fn run_in_place(&self) -> bool {
        for slot in (0..self.owner.top()).rev() {
            let h = half_at(self.owner.get(slot));
            if self.ran_here[h].get() {
                continue;
            }
            let place = self.owner.place(slot);
            if place == Place::Private || (place == Place::Public && self.owner.retract_to(slot)) {
                self.halves.run(h);
                self.ran_here[h].set(true);
                return true;
            }
        }
        false
    }

    /// A wait that found no other work, step 3 of `run_own_half` (`claim_own_half`): claims the
    /// oldest public half as a thief would, and runs it. Returns whether it ran one.
    fn claim_own_half(&self) -> bool {
        loop {
            match self.owner.steal() {
                Steal::Taken(slot, address) => {
                    self.halves.claimed(slot, address, true);
                    return true;
                }
                Steal::Retry => {}
                Steal::Empty => return false,
            }
        }
    }
}

/// `serve` for a join that promotes (work was wanted).
fn promote<O: Owner>(owner: &O) {
    owner.promote();
}

/// Runs `owner_side` as the owner against one taker thread that admits (`admit`) or declines
/// what it claims; then checks that each half joined ran once.
fn against_a_taker<O: Owner>(
    preemptions: Option<usize>,
    admit: bool,
    owner_side: impl Fn(&Joiner<'_, O>) + Send + Sync + 'static,
) {
    model(preemptions, move || {
        let stack = Arc::new(O::Stack::default());
        let halves = Arc::new(Halves::default());
        let taker = {
            let (stack, halves) = (stack.clone(), halves.clone());
            thread::spawn(move || halves.taker(&*stack, admit))
        };
        owner_side(&Joiner::new(stack, &halves));
        halves.owner_done.store(true, Ordering::Release);
        taker.join().unwrap();
        halves.check_runs();
    });
}

/// Model A: half 0's join, promoted, whose `a` joins half 1 (promoted too); then half 2's
/// join, promoted, in slot 0 again.
fn nested_then_reused<O: Owner>(admit: bool) {
    against_a_taker::<O>(Some(5), admit, |j| {
        j.join(0, promote, || j.join(1, promote, || {}, || {}), || {});
        j.join(2, promote, || {}, || {});
    });
}

/// Model B: half 0's join, promoted; while a taker has it, half 1's join in slot 1, promoted;
/// then half 2's join, promoted, in slot 0 again.
fn join_while_taken<O: Owner>() {
    against_a_taker::<O>(Some(6), true, |j| {
        j.join(0, promote, || {}, || j.join(1, promote, || {}, || {}));
        j.join(2, promote, || {}, || {});
    });
}

/// Model E: model A's joins as `join_context` makes them: each half public at its push, and
/// taken back newest public first.
fn eager_nested_then_reused<O: Owner>(admit: bool) {
    against_a_taker::<O>(Some(5), admit, |j| {
        j.eager.set(true);
        j.join(0, promote, || j.join(1, promote, || {}, || {}), || {});
        j.join(2, promote, || {}, || {});
    });
}

/// Model C: half 0's join, promoted, whose `a` joins half 1, promoted, whose `a` waits for
/// two rounds, then one more: each round runs one of the owner's halves if it can, claimed as a
/// thief would first (`claim_first`), else in place first.
fn wait_runs_own<O: Owner>(claim_first: bool) {
    against_a_taker::<O>(Some(6), true, move |j| {
        let wait = || {
            if claim_first {
                j.claim_own_half();
                j.run_in_place();
                j.run_in_place();
            } else {
                j.run_in_place();
                j.run_in_place();
                j.claim_own_half();
            }
        };
        j.join(0, promote, || j.join(1, promote, wait, || {}), || {});
    });
}

#[test]
fn a_public_half_runs_once_when_its_taker_admits_it() {
    nested_then_reused::<HalfOwner>(true);
}

#[test]
fn a_public_half_runs_once_when_its_taker_declines_it() {
    nested_then_reused::<HalfOwner>(false);
}

#[test]
fn an_eager_half_taken_back_newest_first_runs_once_when_its_taker_admits_it() {
    eager_nested_then_reused::<HalfOwner>(true);
}

#[test]
fn an_eager_half_taken_back_newest_first_runs_once_when_its_taker_declines_it() {
    eager_nested_then_reused::<HalfOwner>(false);
}

#[test]
fn a_joiner_that_waits_for_a_taken_half_joins_again_above_it() {
    join_while_taken::<HalfOwner>();
}

#[test]
fn a_wait_claims_the_owners_oldest_public_half_as_a_thief_would() {
    wait_runs_own::<HalfOwner>(true);
}

#[test]
fn a_wait_retracts_the_owners_public_halves_and_runs_them_in_place() {
    wait_runs_own::<HalfOwner>(false);
}

/// Whether a half is public, read as `WorkerThread::has_work` reads another worker's stack
/// (its own fence: the sleeper's side of the handshake needs no other).
fn has_work<S: Takers>(stack: &S) -> bool {
    stack.has_public()
}

/// Model D: the thief counts itself idle and sleeps until a half is public, then claims it;
/// the owner sees the idle count at a join in its `a` and promotes, with `announce` after the
/// promotion, and goes on with `a` until the thief is done (it never takes the half back
/// first: a thief that finds no work sleeps for good, rightly).
fn thief_asks_then_sleeps<O: Owner>(announce: fn(&Sleep)) {
    model(None, move || {
        let sleep = Arc::new(Sleep::new(2));
        let stack = Arc::new(O::Stack::default());
        let halves = Arc::new(Halves::default());
        let thief = {
            let (sleep, stack, halves) = (sleep.clone(), stack.clone(), halves.clone());
            thread::spawn(move || {
                // Worker 1: a wait round that found no work of its own counts it idle
                // (`count_idle`), then the sleep loop of `wait_until`; woken, it claims the half.
                sleep.idle();
                while !has_work(&*stack) {
                    sleep.sleep(1, || has_work(&*stack), || false);
                }
                loop {
                    match stack.steal() {
                        Steal::Taken(slot, address) => break halves.claimed(slot, address, true),
                        Steal::Retry => {}
                        Steal::Empty => panic!("the promoted half is public until claimed"),
                    }
                }
            })
        };
        // Worker 0: half 0's join, whose `a` goes on joining (each join reads the idle count)
        // until it sees the thief idle and promotes as `promote_oldest` does, then until the
        // thief is done.
        let j = Joiner::<O>::new(stack, &halves);
        let a = || {
            while sleep.idle_count() == 0 {
                thread::yield_now();
            }
            assert!(j.owner.promote());
            announce(&sleep);
            // Acquire: as the joiner's wait.
            while halves.state[0].load(Ordering::Acquire) == UNRUN {
                thread::yield_now();
            }
        };
        j.join(0, |_| {}, a, || {});
        thief.join().unwrap();
        halves.check_runs();
        assert_eq!(sleep.sleepers(), 0);
    });
}

#[test]
fn a_thief_that_asked_before_sleeping_is_woken_by_the_promotion() {
    thief_asks_then_sleeps::<HalfOwner>(Sleep::new_work_after_seqcst_rmw);
}

#[test]
#[should_panic(expected = "maximum number of branches")]
fn a_thief_that_asked_before_sleeping_is_not_woken_without_the_fence() {
    thief_asks_then_sleeps::<HalfOwner>(Sleep::new_local_work);
}

/// A copy of `src/base/half_stack.rs`'s protocol (its debug assertions left out: the models
/// must catch what goes wrong) with one breakage, chosen by `B`, and the models run against
/// it: the faithful copy must pass, each breakage must fail.
#[cfg(test)]
mod broken {
    use std::cell::Cell;

    use loom::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
    use treepool::__loom::{Arc, Back, Place, Steal, HALF_SLOTS};

    use super::{Owner, Takers};

    /// No breakage: the protocol as in `src/base/half_stack.rs`.
    pub const FAITHFUL: u8 = 0;
    /// `steal` reads the slot before its CAS.
    pub const STEAL_READS_FIRST: u8 = 1;
    /// `retract_to` decides from a plain load of `ends`, then stores it (no CAS).
    pub const TAKE_BACK_BY_LOAD: u8 = 2;
    /// `release_taken` moves `split` down to the slot but keeps `head`.
    pub const RELEASE_KEEPS_HEAD: u8 = 3;
    /// `promote` bumps `split` with `Relaxed`: no release of the slot's write.
    pub const PROMOTE_RELAXED: u8 = 4;
    /// `take_back` frees a taken half's slot at once; `release_taken` does nothing.
    pub const FREES_TAKEN_AT_ONCE: u8 = 5;

    const HEAD_ONE: u64 = 1 << 32;

    fn pack(head: usize, split: usize) -> u64 {
        ((head as u64) << 32) | split as u64
    }

    fn head_of(ends: u64) -> usize {
        (ends >> 32) as usize
    }

    fn split_of(ends: u64) -> usize {
        (ends & 0xffff_ffff) as usize
    }

    pub struct BrokenStack<const B: u8> {
        slots: Box<[AtomicPtr<()>]>,
        ends: AtomicU64,
    }

    impl<const B: u8> Default for BrokenStack<B> {
        fn default() -> Self {
            BrokenStack {
                slots: (0..HALF_SLOTS)
                    .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                    .collect(),
                ends: AtomicU64::new(0),
            }
        }
    }

    impl<const B: u8> Takers for BrokenStack<B> {
        fn steal(&self) -> Steal {
            let ends = self.ends.load(Ordering::Acquire);
            let head = head_of(ends);
            if head >= split_of(ends) {
                return Steal::Empty;
            }
            let early = (B == STEAL_READS_FIRST).then(|| self.slots[head].load(Ordering::Acquire));
            match self.ends.compare_exchange_weak(
                ends,
                ends + HEAD_ONE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => Steal::Taken(
                    head,
                    early.unwrap_or_else(|| self.slots[head].load(Ordering::Relaxed)),
                ),
                Err(_) => Steal::Retry,
            }
        }

        fn has_public(&self) -> bool {
            loom::sync::atomic::fence(Ordering::SeqCst);
            let ends = self.ends.load(Ordering::Relaxed);
            head_of(ends) < split_of(ends)
        }
    }

    pub struct BrokenOwner<const B: u8> {
        stack: Arc<BrokenStack<B>>,
        top: Cell<usize>,
        split: Cell<usize>,
    }

    impl<const B: u8> Owner for BrokenOwner<B> {
        type Stack = BrokenStack<B>;

        fn new(stack: Arc<BrokenStack<B>>) -> Self {
            BrokenOwner {
                stack,
                top: Cell::new(0),
                split: Cell::new(0),
            }
        }

        fn push(&self, half: *const ()) -> Option<usize> {
            let slot = self.top.get();
            let cell = self.stack.slots.get(slot)?;
            cell.store(half as *mut (), Ordering::Relaxed);
            self.top.set(slot + 1);
            Some(slot)
        }

        fn take_back(&self, slot: usize) -> Back {
            if slot >= self.split.get() {
                self.top.set(slot);
                return Back::Private;
            }
            if self.retract_to(slot) {
                self.top.set(slot);
                Back::Retracted
            } else {
                if B == FREES_TAKEN_AT_ONCE {
                    self.top.set(slot);
                    self.split.set(slot);
                    self.stack.ends.store(pack(slot, slot), Ordering::Release);
                }
                Back::Taken
            }
        }

        fn take_back_newest_public(&self, slot: usize) -> bool {
            if self.split.get() == slot + 1 && self.retract_to(slot) {
                self.top.set(slot);
                return true;
            }
            false
        }

        fn release_taken(&self, slot: usize) {
            if B == FREES_TAKEN_AT_ONCE {
                return;
            }
            self.top.set(slot);
            self.split.set(slot);
            let head = if B == RELEASE_KEEPS_HEAD {
                head_of(self.stack.ends.load(Ordering::Relaxed))
            } else {
                slot
            };
            self.stack.ends.store(pack(head, slot), Ordering::Release);
        }

        fn promote(&self) -> bool {
            let split = self.split.get();
            if split >= self.top.get() {
                return false;
            }
            let order = if B == PROMOTE_RELAXED {
                Ordering::Relaxed
            } else {
                Ordering::SeqCst
            };
            self.stack.ends.fetch_add(1, order);
            self.split.set(split + 1);
            true
        }

        fn retract_to(&self, slot: usize) -> bool {
            let mut ends = self.stack.ends.load(Ordering::Acquire);
            loop {
                if head_of(ends) > slot {
                    return false;
                }
                if B == TAKE_BACK_BY_LOAD {
                    self.stack
                        .ends
                        .store(pack(head_of(ends), slot), Ordering::Release);
                    self.split.set(slot);
                    return true;
                }
                match self.stack.ends.compare_exchange_weak(
                    ends,
                    pack(head_of(ends), slot),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        self.split.set(slot);
                        return true;
                    }
                    Err(now) => ends = now,
                }
            }
        }

        fn place(&self, slot: usize) -> Place {
            if slot >= self.split.get() {
                Place::Private
            } else if slot >= head_of(self.stack.ends.load(Ordering::Acquire)) {
                Place::Public
            } else {
                Place::Taken
            }
        }

        fn get(&self, slot: usize) -> *const () {
            self.stack.slots[slot].load(Ordering::Relaxed)
        }

        fn top(&self) -> usize {
            self.top.get()
        }

        fn steal(&self) -> Steal {
            self.stack.steal()
        }
    }

    use super::{eager_nested_then_reused, join_while_taken, nested_then_reused, wait_runs_own};

    #[test]
    fn the_faithful_copy_passes_model_a() {
        nested_then_reused::<BrokenOwner<FAITHFUL>>(true);
    }

    #[test]
    fn the_faithful_copy_passes_model_e() {
        eager_nested_then_reused::<BrokenOwner<FAITHFUL>>(true);
        eager_nested_then_reused::<BrokenOwner<FAITHFUL>>(false);
    }

    #[test]
    #[should_panic(expected = "Concurrent write accesses to `UnsafeCell`")]
    fn an_eager_take_back_by_a_load_and_a_store_runs_a_half_twice() {
        eager_nested_then_reused::<BrokenOwner<TAKE_BACK_BY_LOAD>>(true);
    }

    #[test]
    fn the_faithful_copy_passes_model_b() {
        join_while_taken::<BrokenOwner<FAITHFUL>>();
    }

    #[test]
    fn the_faithful_copy_passes_model_c() {
        wait_runs_own::<BrokenOwner<FAITHFUL>>(true);
        wait_runs_own::<BrokenOwner<FAITHFUL>>(false);
    }

    #[test]
    #[should_panic(expected = "a stale address")]
    fn steal_reading_the_slot_before_its_claim_gets_a_stale_address() {
        nested_then_reused::<BrokenOwner<STEAL_READS_FIRST>>(true);
    }

    #[test]
    #[should_panic(expected = "Concurrent write accesses to `UnsafeCell`")]
    fn take_back_by_a_load_and_a_store_runs_a_half_twice() {
        nested_then_reused::<BrokenOwner<TAKE_BACK_BY_LOAD>>(true);
    }

    #[test]
    #[should_panic(expected = "maximum number of branches")]
    fn release_taken_keeping_head_loses_the_next_half() {
        join_while_taken::<BrokenOwner<RELEASE_KEEPS_HEAD>>();
    }

    #[test]
    #[should_panic(expected = "Concurrent write accesses to `UnsafeCell`")]
    fn promote_without_release_runs_an_earlier_address() {
        nested_then_reused::<BrokenOwner<PROMOTE_RELAXED>>(true);
    }

    #[test]
    #[should_panic(expected = "a stale address")]
    fn take_back_freeing_a_taken_slot_at_once_gets_a_stale_address() {
        join_while_taken::<BrokenOwner<FREES_TAKEN_AT_ONCE>>();
    }
}
