//! Loom models of the lending token table (`src/token.rs`).
//!
//! Run with
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
//!     cargo test --release --test loom_tokens
//! ```
//!
//! (`CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true` is optional: it turns on the table's own
//! `debug_assert!`s, such as "a lender dropped with a borrower registered", at little cost; CI
//! runs the models with it.)
//! Each model fixes its own preemption bound through [`loom::model::Builder`] (none at all for
//! the two-thread models, which loom explores exhaustively), so the result does not depend on
//! `LOOM_MAX_PREEMPTIONS`. `--nocapture` shows how many executions each model explored.
//!
//! # What is modelled
//!
//! Each model drives the real [`TokenTable`] and [`Lender`] code, compiled against loom's
//! atomics and `Arc`, from a few threads that play the pool's roles:
//!
//! * a *spawner* admits a job the way `Registry::admit` does: `try_admit`, else `register`, make
//!   runnable whatever the registration's re-check granted, wait (a `yield_now` loop) until its
//!   own job is admitted, then `settle`;
//! * a *thief* of a join half calls `try_admit` only and hands the job back when it fails;
//! * a *finisher* calls `finish` when a job's body returns and makes runnable whatever job the
//!   call granted a token to.
//!
//! Running a job is a few loom atomic operations on a [`World`] ledger, which checks the lending
//! rules while the job runs (no two children on one loan at once, `in_use() <= cap`) and, at the
//! end of every execution, exact conservation: every job that started was admitted exactly once
//! (by its own `try_admit` / `register`, or by exactly one grant), ran exactly once, `in_use()` is
//! back to zero, and exactly `cap` fresh roots can be admitted (so no token was lost or minted).
//! Loom's leak check also fails a model whose `Arc<Lender>` references (the one the borrower slot
//! owns, queue entries) are not all given back.
//!
//! # What is assumed
//!
//! Under `--cfg loom` the waiter queues (`WaiterQueue`, crossbeam's `Injector` in normal builds)
//! are a locked `VecDeque`: these models check the protocol *around* the queue (register, fence,
//! re-check; release, fence, re-check; stale entries; the overflow queue) and take the queue itself
//! as linearizable, which crossbeam's own tests establish. The lock also orders a push before a
//! later `is_empty`/`pop` by itself, so these models cannot tell whether the SeqCst fences next to
//! the queue (in `register` and `release_pool`) are needed: deleting `register`'s fence passes.
//! The lenders' tickets are left unset: the
//! table never reads them. The join model mirrors `JoinJob`/`Latch` (`src/job.rs`, `src/latch.rs`)
//! with loom primitives, since the real ones need a `Registry` with worker threads.
#![cfg(loom)]

#[path = "common/loom_model.rs"]
mod loom_model;

use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use loom::thread;
use loom_model::model;
use treepool::__loom::{Admission, Arc, Lender, Registration, TokenTable};

/// The pool id every lender of a model belongs to.
const POOL: usize = 0;

/// One job of a model and what happened to it.
struct Job {
    lender: Arc<Lender>,
    /// Index of the parent job in [`World::jobs`].
    parent: Option<usize>,
    /// Times the job was admitted: by its own `try_admit` / `register`, or by a grant.
    admitted: AtomicUsize,
    /// Times its body ran.
    ran: AtomicUsize,
    /// Children running on this job's loan right now.
    on_loan: AtomicUsize,
}

/// A token table, the jobs of one model, and the checks on them.
struct World {
    table: TokenTable,
    jobs: Vec<Job>,
}

impl World {
    /// A table of `cap` tokens and no jobs.
    fn new(cap: usize) -> Self {
        World {
            table: TokenTable::new(cap),
            jobs: Vec::new(),
        }
    }

    /// Adds a root job (`parent: None`) or a child of job `parent`; returns its index.
    fn job(&mut self, parent: Option<usize>) -> usize {
        let lender = Lender::new(POOL, parent.map(|p| &*self.jobs[p].lender), None);
        self.jobs.push(Job {
            lender: Arc::new(lender),
            parent,
            admitted: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
            on_loan: AtomicUsize::new(0),
        });
        self.jobs.len() - 1
    }

    fn lender(&self, i: usize) -> &Arc<Lender> {
        &self.jobs[i].lender
    }

    /// Job `i` was admitted by the calling thread's own `try_admit` or `register`.
    fn admitted(&self, i: usize) {
        let before = self.jobs[i].admitted.fetch_add(1, Ordering::Relaxed);
        assert_eq!(before, 0, "job {i} admitted twice");
        assert!(
            self.table.in_use() <= self.table.cap(),
            "more tokens in use than exist"
        );
    }

    /// A table call returned `granted`: the job it admitted, which the pool would make runnable.
    fn granted(&self, granted: Option<Arc<Lender>>) {
        let Some(granted) = granted else { return };
        let i = self
            .jobs
            .iter()
            .position(|job| Arc::ptr_eq(&job.lender, &granted))
            .expect("a grant to a job of this model");
        assert!(
            granted.admission().is_some(),
            "granted job {i} is not admitted"
        );
        self.admitted(i);
    }

    /// Admits job `i` without waiting (the thief of a join half), counting it.
    fn try_admit(&self, i: usize) -> Option<Admission> {
        let how = self.table.try_admit(self.lender(i));
        if how.is_some() {
            self.admitted(i);
        }
        how
    }

    /// Admits job `i` as `Registry::admit` does: try, else register and wait. Returns how it was
    /// admitted.
    fn admit(&self, i: usize) -> Admission {
        if let Some(how) = self.try_admit(i) {
            return how;
        }
        let lender = self.lender(i);
        match self.table.register(lender) {
            Registration::Admitted => self.admitted(i),
            Registration::Waiting(granted) => {
                self.granted(granted);
                while lender.admission().is_none() {
                    thread::yield_now();
                }
            }
        }
        let granted = self.table.settle(lender);
        self.granted(granted);
        lender.admission().expect("admitted")
    }

    /// Runs job `i`, admitted as `how`, and checks that it is the only child on its parent's loan.
    fn run(&self, i: usize, how: Admission) {
        let job = &self.jobs[i];
        assert_eq!(job.lender.admission(), Some(how));
        let parent = match how {
            Admission::Loan => Some(&self.jobs[job.parent.expect("a loan has a lender")]),
            Admission::Pool => None,
        };
        if let Some(parent) = parent {
            let others = parent.on_loan.fetch_add(1, Ordering::Relaxed);
            assert_eq!(others, 0, "two children on one loan (rule 1)");
        }
        job.ran.fetch_add(1, Ordering::Relaxed);
        if let Some(parent) = parent {
            parent.on_loan.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Job `i`'s body returned: finishes it and makes runnable what that granted.
    fn finish(&self, i: usize) {
        let granted = self.table.finish(self.lender(i).clone());
        self.granted(granted);
    }

    /// Admits job `i` (waiting if needed), runs it and finishes it.
    fn spawn_and_run(&self, i: usize) {
        let how = self.admit(i);
        self.run(i, how);
        self.finish(i);
    }

    /// Marks job `i`, admitted before the model's threads start, as admitted `how`.
    fn start(&self, i: usize, how: Admission) {
        assert_eq!(self.try_admit(i), Some(how));
    }

    /// End of an execution: every job in `ran` was admitted and ran exactly once, every other job
    /// was never admitted, no token is in use, and exactly `cap` fresh roots can be admitted.
    fn check_conserved(&self, ran: &[usize]) {
        for (i, job) in self.jobs.iter().enumerate() {
            let expect = usize::from(ran.contains(&i));
            assert_eq!(
                job.admitted.load(Ordering::Relaxed),
                expect,
                "job {i} admissions"
            );
            assert_eq!(job.ran.load(Ordering::Relaxed), expect, "job {i} runs");
            assert_eq!(job.on_loan.load(Ordering::Relaxed), 0);
        }
        assert_eq!(self.table.in_use(), 0, "a token was not given back");
        let fresh: Vec<Arc<Lender>> = (0..=self.table.cap())
            .map(|_| Arc::new(Lender::new(POOL, None, None)))
            .collect();
        for (k, root) in fresh.iter().enumerate() {
            let how = self.table.try_admit(root);
            if k < self.table.cap() {
                assert_eq!(how, Some(Admission::Pool), "fresh root {k} not admitted");
            } else {
                assert_eq!(how, None, "more free tokens than the table has");
            }
        }
        for root in &fresh[..self.table.cap()] {
            assert!(self.table.finish(root.clone()).is_none(), "nobody waits");
        }
        assert_eq!(self.table.in_use(), 0);
    }
}

/// Model 1: two children of one parent race for its loan. Thread A is the thief of a join half
/// (`try_admit` only, hands the job back if that fails); thread B spawns (`try_admit`, else
/// `register` and wait). With one token, held by the parent, at most one runs at a time; if B
/// waits, A's finish (or B's own re-check) passes the loan on.
#[test]
fn two_children_race_for_one_loan() {
    model(None, || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        world.start(p, Admission::Pool);
        let world = Arc::new(world);

        let a = {
            let world = world.clone();
            thread::spawn(move || match world.try_admit(c1) {
                Some(how) => {
                    assert_eq!(how, Admission::Loan, "the pool is empty");
                    world.run(c1, how);
                    world.finish(c1);
                    true
                }
                None => false, // handed back: the joiner runs it inline, no admission
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || world.spawn_and_run(c2))
        };
        let thief_ran = a.join().unwrap();
        b.join().unwrap();

        world.run(p, Admission::Pool);
        world.finish(p);
        let mut ran = vec![p, c2];
        if thief_ran {
            ran.push(c1);
        }
        world.check_conserved(&ran);
    });
}

/// Model 2: a loan returns while another child registers for it. The parent lent its only token
/// to C1 before the threads start; thread A finishes C1 while thread B spawns C2. C2 must be
/// admitted exactly once, whoever grants it.
#[test]
fn loan_returns_while_borrower_registers() {
    model(None, || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        world.start(p, Admission::Pool);
        world.start(c1, Admission::Loan);
        let world = Arc::new(world);

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run(c1, Admission::Loan);
                world.finish(c1);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || world.spawn_and_run(c2))
        };
        a.join().unwrap();
        b.join().unwrap();

        world.run(p, Admission::Pool);
        world.finish(p);
        world.check_conserved(&[p, c1, c2]);
    });
}

/// Model 3: a pool token is released while a root enqueues for it (the classic lost wake-up).
/// One token, held by root R1; thread A finishes R1 while thread B starts root R2. R2 is admitted
/// exactly once: by its own `try_admit`, by its registration's re-check, or by R1's release.
#[test]
fn pool_token_released_while_waiter_enqueues() {
    model(None, || {
        let mut world = World::new(1);
        let r1 = world.job(None);
        let r2 = world.job(None);
        world.start(r1, Admission::Pool);
        let world = Arc::new(world);

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run(r1, Admission::Pool);
                world.finish(r1);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || world.spawn_and_run(r2))
        };
        a.join().unwrap();
        b.join().unwrap();

        world.check_conserved(&[r1, r2]);
    });
}

/// Model 4: a parent finishes while its loan comes back (rule 4). P took the only token and lent
/// it to C; thread A finishes P, thread B finishes C. The token is released exactly once, by
/// whichever comes second: afterwards exactly one fresh root can be admitted.
#[test]
fn parent_finishes_while_loan_returns() {
    model(None, || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c = world.job(Some(p));
        world.start(p, Admission::Pool);
        world.start(c, Admission::Loan);
        let world = Arc::new(world);

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run(p, Admission::Pool);
                world.finish(p);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || {
                world.run(c, Admission::Loan);
                world.finish(c);
            })
        };
        a.join().unwrap();
        b.join().unwrap();

        world.check_conserved(&[p, c]);
    });
}

/// Model 4b: a parked token climbs two levels. G took the only token, lent it to P, which lent it
/// to C; all three finish at once. The token goes back to the pool exactly once.
#[test]
fn parked_token_climbs_two_levels() {
    model(Some(4), || {
        let mut world = World::new(1);
        let g = world.job(None);
        let p = world.job(Some(g));
        let c = world.job(Some(p));
        world.start(g, Admission::Pool);
        world.start(p, Admission::Loan);
        world.start(c, Admission::Loan);
        let world = Arc::new(world);

        let threads: Vec<_> = [
            (g, Admission::Pool),
            (p, Admission::Loan),
            (c, Admission::Loan),
        ]
        .into_iter()
        .map(|(i, how)| {
            let world = world.clone();
            thread::spawn(move || {
                world.run(i, how);
                world.finish(i);
            })
        })
        .collect();
        for t in threads {
            t.join().unwrap();
        }

        world.check_conserved(&[g, p, c]);
    });
}

/// Model 5: one waiter granted by its parent's loan and by a pool token at once. Two tokens: P
/// holds one and lent it to C1, root R holds the other; C2 (P's child) waits for either. Thread A
/// finishes C1 (the loan returns), thread B finishes R (a pool token is released), and the main
/// thread is C2's spawner (P's thread). Exactly one grant to C2 wins; the other token is not
/// lost: while it is free a fresh root is admitted, and at the end everything is back.
#[test]
fn waiter_granted_by_loan_and_pool_at_once() {
    model(Some(4), || {
        let mut world = World::new(2);
        let p = world.job(None);
        let r = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        let extra = world.job(None);
        world.start(p, Admission::Pool);
        world.start(r, Admission::Pool);
        world.start(c1, Admission::Loan);
        assert_eq!(world.table.try_admit(world.lender(c2)), None);
        match world.table.register(world.lender(c2)) {
            Registration::Waiting(None) => {}
            _ => panic!("C2 must wait: its parent is lending and the pool is empty"),
        }
        let world = Arc::new(world);

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run(c1, Admission::Loan);
                world.finish(c1);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || {
                world.run(r, Admission::Pool);
                world.finish(r);
            })
        };
        // P's thread, in its spawn call for C2.
        let c2_lender = world.lender(c2);
        while c2_lender.admission().is_none() {
            thread::yield_now();
        }
        world.granted(world.table.settle(c2_lender));
        let how = c2_lender.admission().unwrap();
        world.run(c2, how);
        a.join().unwrap();
        b.join().unwrap();

        // C1's loan and R's token came back once each. On the loan, C2 left R's token free, and
        // a fresh root takes it; on R's token, P holds its own again and the pool is empty.
        let mut ran = vec![p, r, c1, c2];
        match how {
            Admission::Loan => {
                assert_eq!(world.table.in_use(), 1);
                assert_eq!(world.try_admit(extra), Some(Admission::Pool));
                world.run(extra, Admission::Pool);
                world.finish(extra);
                ran.push(extra);
            }
            Admission::Pool => {
                assert_eq!(world.table.in_use(), 2);
                assert_eq!(world.try_admit(extra), None);
            }
        }
        world.finish(c2);
        world.run(p, Admission::Pool);
        world.finish(p);
        world.check_conserved(&ran);
    });
}

/// `JoinJob` latch states (`src/latch.rs`).
const UNSET: u8 = 0;
const SET: u8 = 1;
const HANDED_BACK: u8 = 2;

/// The join protocol of `src/join.rs` and `JoinJob::run` (`src/job.rs`), mirrored with loom
/// primitives: `in_deque` stands for `b` in the joiner's deque (taken by exactly one of the
/// joiner's pop and a thief's steal), `latch` for `b`'s latch. J (the joiner's job) holds the
/// only token and lent it to C1; if `c1_returns`, a third thread finishes C1 meanwhile, so the
/// thief may find the loan free and run `b` itself.
fn join_hand_back(c1_returns: bool) {
    let mut world = World::new(1);
    let j = world.job(None);
    let c1 = world.job(Some(j));
    // `b`'s lender, which a thief makes when it steals `b` (`registry.new_child(job.parent)`).
    let b = world.job(Some(j));
    world.start(j, Admission::Pool);
    world.start(c1, Admission::Loan);
    let world = Arc::new(world);
    let in_deque = Arc::new(AtomicBool::new(true));
    let latch = Arc::new(AtomicU8::new(UNSET));
    // How many times `b`'s closure ran, wherever.
    let b_ran = Arc::new(AtomicUsize::new(0));

    let thief = {
        let (world, in_deque, latch, b_ran) = (
            world.clone(),
            in_deque.clone(),
            latch.clone(),
            b_ran.clone(),
        );
        thread::spawn(move || {
            if in_deque
                .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return false; // the joiner popped it back
            }
            match world.try_admit(b) {
                None => {
                    // No token: hand `b` back (`Latch::hand_back`, a release store).
                    latch.store(HANDED_BACK, Ordering::Release);
                    false
                }
                Some(how) => {
                    assert!(c1_returns, "J's token is lent and the pool is empty");
                    world.run(b, how);
                    b_ran.fetch_add(1, Ordering::Relaxed);
                    world.finish(b);
                    latch.store(SET, Ordering::Release);
                    true
                }
            }
        })
    };
    let returner = c1_returns.then(|| {
        let world = world.clone();
        thread::spawn(move || {
            world.run(c1, Admission::Loan);
            world.finish(c1);
        })
    });

    // The joiner: `a` ran inline; now pop `b` back, or wait for its latch.
    let popped = in_deque
        .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok();
    let inline = popped || {
        let state = loop {
            // Acquire: `Latch::probe`.
            match latch.load(Ordering::Acquire) {
                UNSET => thread::yield_now(),
                state => break state,
            }
        };
        state == HANDED_BACK
    };
    if inline {
        // Part of J's job: no admission.
        b_ran.fetch_add(1, Ordering::Relaxed);
    }

    let thief_ran = thief.join().unwrap();
    match returner {
        Some(t) => t.join().unwrap(),
        None => {
            world.run(c1, Admission::Loan);
            world.finish(c1);
        }
    }
    assert_eq!(b_ran.load(Ordering::Relaxed), 1, "b ran exactly once");
    assert_eq!(thief_ran, !inline);
    world.run(j, Admission::Pool);
    world.finish(j);
    let mut ran = vec![j, c1];
    if thief_ran {
        ran.push(b);
    }
    world.check_conserved(&ran);
}

/// Model 6: a stolen join half handed back while the joiner pops. The thief cannot admit `b` (the
/// joiner's token is lent, the pool empty) and hands it back; `b` runs exactly once, inline.
#[test]
fn stolen_join_half_handed_back() {
    model(None, || join_hand_back(false));
}

/// Model 6b: as model 6, with the joiner's loan returning meanwhile, so the thief may admit `b`
/// on it and run it; either way `b` runs exactly once.
#[test]
fn stolen_join_half_admitted_or_handed_back() {
    model(None, || join_hand_back(true));
}

/// Model 7: calls crossing pools make two children of one parent wait at once: one in the
/// parent's borrower slot, the other (`Busy`) in its overflow queue. The parent's only token is
/// on loan to C1; threads B and C spawn C2 and C3 while the main thread finishes C1. The loan
/// passes from child to child; both are admitted exactly once and the token comes back.
#[test]
fn two_waiting_children_with_overflow() {
    model(Some(3), || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        let c3 = world.job(Some(p));
        world.start(p, Admission::Pool);
        world.start(c1, Admission::Loan);
        let world = Arc::new(world);

        let spawners: Vec<_> = [c2, c3]
            .into_iter()
            .map(|i| {
                let world = world.clone();
                thread::spawn(move || world.spawn_and_run(i))
            })
            .collect();
        world.run(c1, Admission::Loan);
        world.finish(c1);
        for t in spawners {
            t.join().unwrap();
        }

        world.run(p, Admission::Pool);
        world.finish(p);
        world.check_conserved(&[p, c1, c2, c3]);
    });
}

/// Model 8: a child reaches a parent that is finishing (rule 4). Only a call crossing pools from
/// a detached descendant can do that: P (pool A) spawned C1 on its loan and started a detached
/// root in pool B, which spawns C2 back into pool A as P's child (`Lender::ancestor_in`). Thread A
/// finishes P (its token stays parked with the loan), thread B finishes C1 (the loan returns), and
/// thread C spawns C2. C2 is admitted exactly once, on the loan or on a pool token, and the token
/// goes back to the pool exactly once.
///
/// C2 can register in P's borrower slot (P lent, not yet finished) just before P finishes: this
/// model found that `finish` then left it there and passed the parked loan on, against rule 4.
/// Now `finish` withdraws it and it is admitted from the pool.
#[test]
fn child_of_finishing_parent() {
    model(Some(3), || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        world.start(p, Admission::Pool);
        world.start(c1, Admission::Loan);
        let world = Arc::new(world);

        let threads: Vec<_> = [0, 1, 2]
            .into_iter()
            .map(|k| {
                let world = world.clone();
                thread::spawn(move || match k {
                    0 => {
                        world.run(p, Admission::Pool);
                        world.finish(p);
                    }
                    1 => {
                        world.run(c1, Admission::Loan);
                        world.finish(c1);
                    }
                    _ => world.spawn_and_run(c2),
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }

        world.check_conserved(&[p, c1, c2]);
    });
}

/// Model 9: as model 8 with two children of P waiting at once (both from calls crossing pools):
/// C2 waits in P's borrower slot before the threads start, C3 registers meanwhile (finding the
/// slot taken, it waits in P's overflow queue). Thread A finishes C1, which passes the loan to
/// C2, then runs and finishes C2; thread B spawns C3; the main thread finishes P.
///
/// This model found two bugs, now fixed: (1) if P finished after C3 found the slot taken
/// (`Borrow::Busy`) but before C3 pushed itself to P's overflow queue, `finish`'s
/// `drain_overflow` missed C3, and the queue entry (an `Arc` of C3, whose parent is P) was never
/// dropped (now the child announces itself with the `OVERFLOW` bit, which `finish` reads). (2) If C2's return left P's token unlent before
/// C3 pushed itself, C3's `pump_loan` took the token and P finished before `return_loan`, which
/// returned `ParentFinished`: the token was lost (now `pump_loan` passes it on like `give_back`).
#[test]
fn overflow_child_of_finishing_parent() {
    model(Some(3), || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        let c3 = world.job(Some(p));
        world.start(p, Admission::Pool);
        world.start(c1, Admission::Loan);
        assert_eq!(world.table.try_admit(world.lender(c2)), None);
        match world.table.register(world.lender(c2)) {
            Registration::Waiting(None) => {}
            _ => panic!("C2 must wait: its parent is lending and the pool is empty"),
        }
        let world = Arc::new(world);

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run(c1, Admission::Loan);
                world.finish(c1);
                // C2's spawner, woken by the grant (to C2, from C1's finish: nothing else runs).
                let c2_lender = world.lender(c2);
                assert!(c2_lender.admission().is_some());
                world.granted(world.table.settle(c2_lender));
                world.run(c2, c2_lender.admission().unwrap());
                world.finish(c2);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || world.spawn_and_run(c3))
        };
        world.run(p, Admission::Pool);
        world.finish(p);
        a.join().unwrap();
        b.join().unwrap();

        world.check_conserved(&[p, c1, c2, c3]);
    });
}
