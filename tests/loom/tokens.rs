//! Loom models of the lending token table (`src/admission/token.rs`).
//!
//! Run with
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
//!     cargo test --release --test loom tokens::
//! ```
//!
//! (about 45 s for the whole file in release on this 2-core machine), and under AddressSanitizer,
//! which is what sees a lender used after it was freed (see "Lifetimes" below):
//!
//! ```text
//! RUSTC_BOOTSTRAP=1 RUSTFLAGS="--cfg loom -Zsanitizer=address" CARGO_TARGET_DIR=target/loom-asan \
//!     CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true TREEPOOL_LOOM_PREEMPTIONS=2 \
//!     cargo test --release --target x86_64-unknown-linux-gnu --test loom tokens::
//! ```
//!
//! Under ASan the models with spin loops are some 100 times slower: with every model's own bound
//! the file took 18 minutes here, so the ASan run sets every bound to 2 preemptions
//! (`TREEPOOL_LOOM_PREEMPTIONS` overrides each model's bound), under half a minute; the lifetime bugs
//! these models were written against (a borrower slot's reference counted after the CAS that
//! publishes it; `finish` touching a lender it has parked) need one preemption each.
//!
//! (`CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true` turns on the table's own `debug_assert!`s, such
//! as "a job finished with a child waiting for its loan", at little cost; CI runs the models with
//! it, and some mutations are caught only by them.)
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
//! * a *thief* of a join half makes the half's lender from the joiner's job (by address, as
//!   `Registry::new_child` does), calls `try_admit` only, and declines the half when it fails
//!   (the half stays in the joiner's split stack, and the joiner runs it as part of its job);
//! * a *finisher* calls `finish` when a job's body returns and makes runnable whatever job the
//!   call granted a token to;
//! * a call from a job of another pool starts a root with `admit_credit`.
//!
//! # Lifetimes: the models free lenders when the code does
//!
//! No model keeps a lender alive that the pool would not. Each job's `LenderRef` (a [`Held`])
//! is owned by whoever runs the job, the thread that plays its spawner and finisher, and is
//! passed *by value* to `finish`, as `Registry::finish_job` does; the references the table takes
//! (the borrower slot's, the queue's, a parked parent's) are the table's own. A child refers to
//! its parent by address only, as in the real code, so a lender is freed the moment the table
//! drops its last reference, possibly on another thread while a job of the same chain is still
//! running. The [`World`] ledger keeps per-job counters and each lender's address (to recognise a
//! grant), never a reference.
//!
//! What sees a lifetime bug:
//! * *The lender's own reference count* (`Lender::refs`, a loom atomic): loom interleaves every
//!   clone and drop, so it runs other threads between the compare-and-swap that publishes a
//!   reference and a clone that counts it too late. A granter also inspects the count of what it
//!   was granted (`LenderRef::ref_count`, in [`World::granted`]): it must be at least 2, the
//!   grant's reference and the job's own, which the job keeps until it has run, and it runs only
//!   once its granter made it runnable (as `Registry::start_granted` pushes a granted job's
//!   `JobRef`). The model runner (`tests/loom/runner.rs`) fails an execution that ends with
//!   a lender still alive (`live_lenders`: a parked token never released, a slot's reference
//!   never dropped).
//! * *The table's `debug_assert!`s*, such as "a job finished with a child waiting for its loan"
//!   or "a lender dropped with a borrower registered".
//! * *AddressSanitizer*: a freed lender's memory is really freed, but loom's atomics keep their
//!   state in loom's execution table, so a plain load from a freed lender (through a stale
//!   `&Lender`, a raw pointer or a child's parent pointer) still "works" under loom alone. Under
//!   ASan it is a heap-use-after-free report. ASan's run is much slower (loom's threads are
//!   coroutines on stacks ASan does not know, which it warns about once, harmlessly here); run the
//!   models under it after any change to the lifetimes.
//!
//! # What is checked
//!
//! Running a job is a few loom atomic operations on the [`World`] ledger, which checks the
//! lending rules while the job runs (no two children on one loan at once, at most `cap` pool
//! tokens in use) and, at the end of every execution, exact conservation: every job that started
//! was admitted exactly once (by its own `try_admit` / `register`, or by exactly one grant), ran
//! exactly once, `count()` is back to zero in both halves (pool and credit), the peaks stay within
//! `cap` plus the credit roots, and exactly `cap` fresh roots can be admitted (so no token was lost
//! or minted). A lost wake-up leaves a spawner in its `yield_now` loop: loom fails the execution
//! for exceeding its branch limit.
//!
//! # What is assumed
//!
//! Under `--cfg loom` the waiter queue (`WaiterQueue`, crossbeam's `Injector` in normal builds) is
//! a locked `VecDeque`: these models check the protocol *around* the queue (register, fence,
//! re-check; release, fence, re-check; stale entries) and take the queue itself as linearizable,
//! which crossbeam's own tests establish. The lock orders every push before a later `is_empty` or
//! `pop` by itself (and a releaser's `is_empty` before a later push), so **loom cannot check the
//! SeqCst fences next to the queue** (in `register`, `purge_stale` and `count_free_and_recheck`)
//! nor the SeqCst of `try_pool` and of the free count: deleting the fences and making every SeqCst
//! in `src/admission/token.rs` Relaxed passes every model.
//! Those orderings rest on the argument in `count_free_and_recheck`'s doc, not on these models.
//! The stale-entry purge (`purge_stale`, after 32 stale entries) is not modelled: it needs 32
//! spawns. Deadlock freedom across pools (B3) is not modelled either: jobs of different pools are
//! never linked, and a credit root is a plain root here. The lenders' tickets are left unset: the
//! table never reads them. The join model (models 6 and 6b) mirrors `JoinJob` and its `Half`
//! (`src/worker/job.rs`) with loom primitives, since the real ones need a `Registry` with worker
//! threads, and takes the split stack's claim as one compare-and-swap (the stack has models of
//! its own, in `tests/loom/join.rs`).

use crate::runner::model;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use loom::thread;
use treepool::__loom::{Admission, Arc, Lender, LenderRef, Registration, TokenTable};

/// A job's lender as its runner holds it: the reference the runner gives to `finish`.
struct Held {
    /// The job's index in [`World::jobs`].
    i: usize,
    lender: LenderRef,
}

/// The address of a running job's lender, so that another thread can make a child of it (the
/// thief of a join half does): the real code keeps no reference to a parent either.
#[derive(Clone, Copy)]
struct ParentAddr(*const Lender);

// SAFETY: only dereferenced while the job it points to is running (its runner waits for the
// thread that uses it), as `Lender::parent` is.
unsafe impl Send for ParentAddr {}

impl Held {
    fn addr(&self) -> ParentAddr {
        ParentAddr(LenderRef::as_ptr(&self.lender))
    }
}

/// `Job::addr` of a job whose lender was freed and its address reused.
const FREED: usize = 1;

/// One job of a model and what happened to it. No reference to its lender.
struct Job {
    /// Index of the parent job in [`World::jobs`].
    parent: Option<usize>,
    /// The address of the job's lender once made, 0 before, [`FREED`] once another lender is
    /// made at the same address: how a grant is mapped back to its job. std's atomic:
    /// bookkeeping, not part of what loom explores.
    addr: std::sync::atomic::AtomicUsize,
    /// Times the job was admitted: by its own `try_admit` / `register`, or by a grant.
    admitted: AtomicUsize,
    /// Times its body ran.
    ran: AtomicUsize,
    /// Children running on this job's loan right now.
    on_loan: AtomicUsize,
    /// Whether the job was made runnable (by whoever admitted it); its body runs only then.
    runnable: AtomicBool,
}

/// A token table, the jobs of one model, and the checks on them.
struct World {
    table: TokenTable,
    jobs: Vec<Job>,
    /// Roots admitted on credit so far (bookkeeping, std's atomic).
    credits: std::sync::atomic::AtomicUsize,
    /// Jobs in flight per level (index 0 unused), counted as `Registry` counts them: in by the
    /// admitter after the admission, out by `finish`'s `count_out`. At each level at most one
    /// job per token in use can be in flight (a token's jobs form one chain of loans), so a
    /// level above `cap + credits` means a finished job was still counted while its token
    /// admitted another: `count_out` came after the release (a loom operation, so a point where
    /// loom runs the grantee). std's atomics: loom runs one thread at a time, so they hold the
    /// counts of the explored schedule without adding states to explore.
    inflight: [std::sync::atomic::AtomicUsize; 5],
    /// If set, bumped by every `count_out` and read by every admission check, right next to the
    /// std counters of `inflight`: a loom write and a loom read, so that loom sees a count-out
    /// and an admission as dependent and explores both orders (the real counter is one shared
    /// atomic); std's counters alone are invisible to its partial-order reduction. Only model 4d
    /// needs it (a parked token's release racing its own job's count-out; elsewhere the release
    /// itself is the loom operation that orders the two), and it multiplies the executions.
    count_point: Option<AtomicUsize>,
}

impl World {
    /// A table of `cap` tokens and no jobs.
    fn new(cap: usize) -> Self {
        World {
            table: TokenTable::new(cap),
            jobs: Vec::new(),
            credits: std::sync::atomic::AtomicUsize::new(0),
            inflight: Default::default(),
            count_point: None,
        }
    }

    /// Job `i`'s level: root = 1.
    fn level(&self, i: usize) -> usize {
        1 + self.jobs[i].parent.map_or(0, |p| self.level(p))
    }

    /// Adds a root job (`parent: None`) or a child of job `parent`; returns its index.
    fn job(&mut self, parent: Option<usize>) -> usize {
        self.jobs.push(Job {
            parent,
            addr: std::sync::atomic::AtomicUsize::new(0),
            admitted: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
            on_loan: AtomicUsize::new(0),
            runnable: AtomicBool::new(false),
        });
        self.jobs.len() - 1
    }

    /// Makes job `i`'s lender, as its spawner does: a root, or a child of its parent job, which
    /// must be running (`parent` is that job's lender).
    fn make(&self, i: usize, parent: Option<&Lender>) -> Held {
        use std::sync::atomic::Ordering::Relaxed;
        let expect = self.jobs[i].parent.map(|p| self.jobs[p].addr.load(Relaxed));
        let got = parent.map(|p| p as *const Lender as usize);
        assert_eq!(got, expect, "job {i} made with the wrong parent");
        let lender = LenderRef::new(Lender::new(parent));
        let addr = LenderRef::as_ptr(&lender) as usize;
        // A job of the same address was freed: forget it, so that a grant maps to this one.
        for job in &self.jobs {
            let _ = job.addr.compare_exchange(addr, FREED, Relaxed, Relaxed);
        }
        let before = self.jobs[i].addr.swap(addr, Relaxed);
        assert_eq!(before, 0, "job {i} made twice");
        Held { i, lender }
    }

    /// Makes job `i`'s lender as a child of the running job at `parent`.
    fn make_child(&self, i: usize, parent: ParentAddr) -> Held {
        // SAFETY: the caller's parent job is running (see `ParentAddr`).
        self.make(i, Some(unsafe { &*parent.0 }))
    }

    /// Job `i` was admitted by the calling thread's own `try_admit` / `register` / credit, or by
    /// a grant: counts it and makes it runnable.
    fn admitted(&self, i: usize) {
        let before = self.jobs[i].admitted.fetch_add(1, Ordering::Relaxed);
        assert_eq!(before, 0, "job {i} admitted twice");
        assert!(
            self.table.count().pool <= self.table.cap(),
            "more pool tokens in use than exist"
        );
        // B2 level by level on the count `Stats` reports (see `World::inflight`).
        if let Some(point) = &self.count_point {
            point.load(Ordering::Relaxed);
        }
        let level = &self.inflight[self.level(i)];
        let now = level.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let credits = self.credits.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            now <= self.table.cap() + credits,
            "{now} jobs counted in flight at job {i}'s level: above cap + credits"
        );
        // Release: the job's runner waits for it (`run`).
        self.jobs[i].runnable.store(true, Ordering::Release);
    }

    /// A table call returned `granted`: the job it admitted, which the pool would make runnable.
    /// The reference is dropped here, as `Registry::start_granted` drops it.
    fn granted(&self, granted: Option<LenderRef>) {
        let Some(granted) = granted else { return };
        let addr = LenderRef::as_ptr(&granted) as usize;
        let i = self
            .jobs
            .iter()
            .position(|job| job.addr.load(std::sync::atomic::Ordering::Relaxed) == addr)
            .expect("a grant to a job of this model");
        assert!(
            granted.admission().is_some(),
            "granted job {i} is not admitted"
        );
        // The grant's reference is counted, and it is not the last: the job itself holds its
        // own until it has run, which it does only once made runnable, below. Loom takes clones and drops of an `Arc` as commuting, so without this
        // inspection (which does not commute with either) it would never run a granter between
        // the compare-and-swap that publishes a reference and a clone that counts it too late.
        assert!(
            LenderRef::ref_count(&granted) >= 2,
            "granted job {i}'s reference is its only one"
        );
        self.admitted(i);
    }

    /// Admits job `h` without waiting (the thief of a join half), counting it.
    fn try_admit(&self, h: &Held) -> Option<Admission> {
        let how = self.table.try_admit(&h.lender);
        if how.is_some() {
            self.admitted(h.i);
        }
        how
    }

    /// Admits job `h` as `Registry::admit` does: try, else register and wait. Returns how it was
    /// admitted.
    fn admit(&self, h: &Held) -> Admission {
        if let Some(how) = self.try_admit(h) {
            return how;
        }
        match self.table.register(&h.lender) {
            Registration::Admitted => self.admitted(h.i),
            Registration::Waiting(granted) => {
                self.granted(granted);
                while h.lender.admission().is_none() {
                    thread::yield_now();
                }
            }
        }
        let granted = self.table.settle(&h.lender);
        self.granted(granted);
        h.lender.admission().expect("admitted")
    }

    /// Runs job `h`, admitted as `how`, once it is runnable, and checks that it is the only child
    /// on its parent's loan. (A granted job runs only once its granter made it runnable, as a
    /// granted job's `JobRef` is pushed by `Registry::start_granted`: its spawner may return
    /// from its spawn call as soon as it sees the admission, but the job does not run before.)
    fn run(&self, h: &Held, how: Admission) {
        let job = &self.jobs[h.i];
        // Acquire: see what the granter did before it made the job runnable.
        while !job.runnable.load(Ordering::Acquire) {
            thread::yield_now();
        }
        assert_eq!(h.lender.admission(), Some(how));
        let parent = match how {
            Admission::Loan => Some(&self.jobs[job.parent.expect("a loan has a lender")]),
            Admission::Pool | Admission::Credit => None,
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

    /// Job `h`'s body returned: gives its runner's reference to `finish` (as
    /// `Registry::finish_job` does) and makes runnable what that granted.
    fn finish(&self, h: Held) {
        let level = &self.inflight[self.level(h.i)];
        let count_out = || {
            // Paired with the load in `admitted` (see `World::count_point`).
            if let Some(point) = &self.count_point {
                point.fetch_add(1, Ordering::Relaxed);
            }
            level.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        };
        let granted = self.table.finish(h.lender, None, count_out);
        self.granted(granted);
    }

    /// Runs job `h`, admitted as `how`, and finishes it.
    fn run_and_finish(&self, h: Held, how: Admission) {
        self.run(&h, how);
        self.finish(h);
    }

    /// Admits job `h` (waiting if needed), runs it and finishes it.
    fn spawn_and_run(&self, h: Held) {
        let how = self.admit(&h);
        self.run_and_finish(h, how);
    }

    /// Marks job `h`, admitted before the model's threads start, as admitted `how` (a `Credit`
    /// root is admitted with `admit_credit`).
    fn start(&self, h: &Held, how: Admission) {
        if how == Admission::Credit {
            self.table.admit_credit(&h.lender);
            self.credits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.admitted(h.i);
        } else {
            assert_eq!(self.try_admit(h), Some(how));
        }
    }

    /// Makes and admits a chain of jobs made with `job`, each the child of the one before: the
    /// first admitted as `root`, the others on their parent's loan. Returns their lenders.
    fn start_chain(&self, jobs: &[usize], root: Admission) -> Vec<Held> {
        let mut held: Vec<Held> = Vec::new();
        for &i in jobs {
            let h = match held.last() {
                None => self.make(i, None),
                Some(parent) => self.make(i, Some(&parent.lender)),
            };
            self.start(
                &h,
                if held.is_empty() {
                    root
                } else {
                    Admission::Loan
                },
            );
            held.push(h);
        }
        held
    }

    /// End of an execution: every job in `ran` was admitted and ran exactly once, every other job
    /// was never admitted, no token is in use (pool or credit), the peaks are within bounds, and
    /// exactly `cap` fresh roots can be admitted.
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
        for level in &self.inflight {
            let left = level.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(left, 0, "jobs still counted in flight");
        }
        let count = self.table.count();
        assert_eq!(
            (count.pool, count.credit),
            (0, 0),
            "tokens in use at the end (pool, credit): a token lost or minted"
        );
        let credits = self.credits.load(std::sync::atomic::Ordering::Relaxed);
        let cap = self.table.cap();
        assert!(
            self.table.peak_executing() <= cap + credits,
            "peak executing"
        );
        assert!(self.table.peak_credit() <= credits, "peak credit");
        let mut fresh: Vec<LenderRef> = (0..=cap)
            .map(|_| LenderRef::new(Lender::new(None)))
            .collect();
        for (k, root) in fresh.iter().enumerate() {
            let how = self.table.try_admit(root);
            if k < cap {
                assert_eq!(how, Some(Admission::Pool), "fresh root {k} not admitted");
            } else {
                assert_eq!(how, None, "more free tokens than the table has");
            }
        }
        fresh.truncate(cap);
        for root in fresh {
            assert!(
                self.table.finish(root, None, || ()).is_none(),
                "nobody waits"
            );
        }
        assert_eq!(self.table.count().pool, 0);
    }
}

/// Runs and finishes each of `jobs` (already admitted as given) on a thread of its own.
fn run_each_on_a_thread(
    world: &Arc<World>,
    jobs: Vec<(Held, Admission)>,
) -> Vec<thread::JoinHandle<()>> {
    jobs.into_iter()
        .map(|(h, how)| {
            let world = world.clone();
            thread::spawn(move || world.run_and_finish(h, how))
        })
        .collect()
}

/// Model 1: two children of one parent race for its loan. Thread A is the thief of a join half
/// (makes the half's lender, `try_admit` only, declines the half if that fails); thread B spawns
/// (`try_admit`, else `register` and wait). With one token, held by the parent, at most one runs
/// at a time; if B waits, A's finish (or B's own re-check) passes the loan on.
#[test]
fn two_children_race_for_one_loan() {
    model(None, || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        let world = Arc::new(world);
        let hp = world.make(p, None);
        world.start(&hp, Admission::Pool);
        let h2 = world.make(c2, Some(&hp.lender));

        let a = {
            let (world, parent) = (world.clone(), hp.addr());
            thread::spawn(move || {
                let h1 = world.make_child(c1, parent);
                match world.try_admit(&h1) {
                    Some(how) => {
                        assert_eq!(how, Admission::Loan, "the pool is empty");
                        world.run_and_finish(h1, how);
                        true
                    }
                    None => false, // declined: the joiner runs it inline, no admission
                }
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || world.spawn_and_run(h2))
        };
        let thief_ran = a.join().unwrap();
        b.join().unwrap();

        world.run_and_finish(hp, Admission::Pool);
        let mut ran = vec![p, c2];
        if thief_ran {
            ran.push(c1);
        }
        world.check_conserved(&ran);
    });
}

/// Model 2: a loan returns while another child registers for it. The parent lent its only token
/// to C1 before the threads start; thread A finishes C1 while thread B spawns C2. C2 must be
/// admitted exactly once, whoever grants it, and the borrower slot's reference to C2 must be
/// counted before the slot is published (the returner may take it out and drop it at once).
#[test]
fn loan_returns_while_borrower_registers() {
    model(None, || {
        let mut world = World::new(1);
        let p = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        let world = Arc::new(world);
        let hp = world.make(p, None);
        world.start(&hp, Admission::Pool);
        let h1 = world.make(c1, Some(&hp.lender));
        world.start(&h1, Admission::Loan);
        let h2 = world.make(c2, Some(&hp.lender));

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run_and_finish(h1, Admission::Loan);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || world.spawn_and_run(h2))
        };
        a.join().unwrap();
        b.join().unwrap();

        world.run_and_finish(hp, Admission::Pool);
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
        let world = Arc::new(world);
        let h1 = world.make(r1, None);
        world.start(&h1, Admission::Pool);

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run_and_finish(h1, Admission::Pool);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || {
                let h2 = world.make(r2, None);
                world.spawn_and_run(h2);
            })
        };
        a.join().unwrap();
        b.join().unwrap();

        world.check_conserved(&[r1, r2]);
    });
}

/// A root P, admitted `root`, lent its only token to C; thread A finishes P, thread B finishes C.
/// The token is released exactly once, by whichever comes second; if P finishes first, its
/// lender is parked with the loan and freed by C's thread.
fn parent_finishes_while_loan_returns(root: Admission) {
    let mut world = World::new(1);
    let p = world.job(None);
    let c = world.job(Some(p));
    let world = Arc::new(world);
    let hp = world.make(p, None);
    world.start(&hp, root);
    let hc = world.make(c, Some(&hp.lender));
    world.start(&hc, Admission::Loan);

    for t in run_each_on_a_thread(&world, vec![(hp, root), (hc, Admission::Loan)]) {
        t.join().unwrap();
    }

    world.check_conserved(&[p, c]);
}

/// Model 4: a parent finishes while its loan comes back (rule 4), on a pool token: afterwards
/// exactly one fresh root can be admitted.
#[test]
fn parent_finishes_while_loan_returns_pool() {
    model(None, || parent_finishes_while_loan_returns(Admission::Pool));
}

/// Model 4c: as model 4, the parent a root on credit (a call from another pool): the parked
/// token is the credit, which goes back to the credit half, never to the pool's free count.
#[test]
fn parent_finishes_while_loan_returns_credit() {
    model(None, || {
        parent_finishes_while_loan_returns(Admission::Credit)
    });
}

/// Model 4d: as model 4, with a root R waiting for the pool's only token: whichever of P and C
/// finishes second releases it to R. R is admitted exactly once, and not before P is counted out
/// of the in-flight count (P parks its token when C still has the loan; C's return then releases
/// it, and R's admission must not count next to P).
#[test]
fn parked_token_released_to_a_waiting_root() {
    model(Some(3), || {
        let mut world = World::new(1);
        world.count_point = Some(AtomicUsize::new(0));
        let p = world.job(None);
        let c = world.job(Some(p));
        let r = world.job(None);
        let world = Arc::new(world);
        let hp = world.make(p, None);
        world.start(&hp, Admission::Pool);
        let hc = world.make(c, Some(&hp.lender));
        world.start(&hc, Admission::Loan);

        let threads =
            run_each_on_a_thread(&world, vec![(hp, Admission::Pool), (hc, Admission::Loan)]);
        let hr = world.make(r, None);
        world.spawn_and_run(hr);
        for t in threads {
            t.join().unwrap();
        }

        world.check_conserved(&[p, c, r]);
    });
}

/// Model 4b: a parked token climbs two levels. G took the only token, lent it to P, which lent it
/// to C; all three finish at once. The token goes back to the pool exactly once, and each parked
/// lender is freed by whoever passes its token on.
#[test]
fn parked_token_climbs_two_levels() {
    model(Some(4), || {
        let mut world = World::new(1);
        let g = world.job(None);
        let p = world.job(Some(g));
        let c = world.job(Some(p));
        let world = Arc::new(world);
        let [hg, hp, hc] = <[Held; 3]>::try_from(world.start_chain(&[g, p, c], Admission::Pool))
            .unwrap_or_else(|_| unreachable!());

        let threads = run_each_on_a_thread(
            &world,
            vec![
                (hg, Admission::Pool),
                (hp, Admission::Loan),
                (hc, Admission::Loan),
            ],
        );
        for t in threads {
            t.join().unwrap();
        }

        world.check_conserved(&[g, p, c]);
    });
}

/// Model 4e: a job that finishes while lending first takes over the tokens its finished lenders
/// parked with the loan it holds (`Lender::take_over_parked`, rule 4 done early), then parks its
/// own. G took the only token and lent it to P, which lent it to C, which lent it to D; G has
/// finished (parked). P, C and D finish on threads of their own: P and C each take over whatever
/// has finished above them (P may take G's, C may take P's and G's), D returns its loan to C.
/// The token goes back to the pool exactly once, each finished lender is freed exactly once (by
/// the thread that took it over, or by whoever passes the token on later), and no take-over reads
/// a lender that was freed (run it under ASan).
#[test]
fn finishing_lender_takes_over_parked_tokens() {
    model(Some(3), || finishing_chain_takes_over(Admission::Pool));
}

/// Model 4f: as model 4e, G a root on credit (a call from another pool): a take-over that
/// climbs to G copies the credit, which goes back to the credit half once, never to the pool's
/// free count.
#[test]
fn finishing_lender_takes_over_a_parked_credit() {
    model(Some(3), || finishing_chain_takes_over(Admission::Credit));
}

/// Models 4e and 4f: G admitted as `root`, the chain below it on loans.
fn finishing_chain_takes_over(root: Admission) {
    let mut world = World::new(1);
    let g = world.job(None);
    let p = world.job(Some(g));
    let c = world.job(Some(p));
    let d = world.job(Some(c));
    let world = Arc::new(world);
    let [hg, hp, hc, hd] = <[Held; 4]>::try_from(world.start_chain(&[g, p, c, d], root))
        .unwrap_or_else(|_| unreachable!());
    world.run_and_finish(hg, root);

    let threads = run_each_on_a_thread(
        &world,
        vec![
            (hp, Admission::Loan),
            (hc, Admission::Loan),
            (hd, Admission::Loan),
        ],
    );
    for t in threads {
        t.join().unwrap();
    }

    world.check_conserved(&[g, p, c, d]);
}

/// Model 4g: a loan taken over from a finished lender still passes straight to the waiting
/// child of the running lender above it (rule 3). G holds the only token and runs; it lent it to
/// P, which lent it to C, which lent it to D; P has finished (parked). G spawns X, which waits
/// for G's loan (no pool token is free), while C finishes (taking P's parked token over: C then
/// holds G's loan) and D finishes. Whichever returns G's loan must grant it to X, exactly once,
/// and the token goes back to the pool once G and X are done.
#[test]
fn taken_over_loan_passes_to_the_lenders_waiting_child() {
    model(Some(3), || {
        let mut world = World::new(1);
        let g = world.job(None);
        let p = world.job(Some(g));
        let c = world.job(Some(p));
        let d = world.job(Some(c));
        let x = world.job(Some(g));
        let world = Arc::new(world);
        let [hg, hp, hc, hd] =
            <[Held; 4]>::try_from(world.start_chain(&[g, p, c, d], Admission::Pool))
                .unwrap_or_else(|_| unreachable!());
        world.run_and_finish(hp, Admission::Loan);

        let threads =
            run_each_on_a_thread(&world, vec![(hc, Admission::Loan), (hd, Admission::Loan)]);
        let hx = world.make(x, Some(&hg.lender));
        assert_eq!(world.admit(&hx), Admission::Loan, "X takes G's loan");
        world.run_and_finish(hx, Admission::Loan);
        world.run_and_finish(hg, Admission::Pool);
        for t in threads {
            t.join().unwrap();
        }

        world.check_conserved(&[g, p, c, d, x]);
    });
}

/// Model 5: one waiter granted by its parent's loan and by a pool token at once. Two tokens: P
/// holds one and lent it to C1, root R holds the other; C2 (P's child) waits for either. Thread A
/// finishes C1 (the loan returns), thread B finishes R (a pool token is released), and the main
/// thread is P's: it waits for C2's admission, runs C2, then finishes C2 and P, while C1 may still
/// hold P's loan (P then parks its token). Exactly one grant to C2 wins; the other token is not
/// lost: while it is free a fresh root is admitted, and at the end everything is back. If the
/// pool token wins, `settle` must take C2 out of P's borrower slot (and drop the slot's
/// reference) before P finishes.
#[test]
fn waiter_granted_by_loan_and_pool_at_once() {
    model(Some(3), || {
        let mut world = World::new(2);
        let p = world.job(None);
        let r = world.job(None);
        let c1 = world.job(Some(p));
        let c2 = world.job(Some(p));
        let extra = world.job(None);
        let world = Arc::new(world);
        let hp = world.make(p, None);
        world.start(&hp, Admission::Pool);
        let hr = world.make(r, None);
        world.start(&hr, Admission::Pool);
        let h1 = world.make(c1, Some(&hp.lender));
        world.start(&h1, Admission::Loan);
        let h2 = world.make(c2, Some(&hp.lender));
        assert_eq!(world.table.try_admit(&h2.lender), None);
        match world.table.register(&h2.lender) {
            Registration::Waiting(None) => {}
            _ => panic!("C2 must wait: its parent is lending and the pool is empty"),
        }

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run_and_finish(h1, Admission::Loan);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || {
                world.run_and_finish(hr, Admission::Pool);
            })
        };
        // P's thread, in its spawn call for C2.
        while h2.lender.admission().is_none() {
            thread::yield_now();
        }
        world.granted(world.table.settle(&h2.lender));
        let how = h2.lender.admission().unwrap();
        world.run(&h2, how);
        b.join().unwrap();

        // R's token came back. On the loan, C2 left it free, and a fresh root takes it; on R's
        // token, P's is lent or back with P, and the pool is empty.
        let mut ran = vec![p, r, c1, c2];
        let hx = world.make(extra, None);
        match how {
            Admission::Loan => {
                assert_eq!(world.table.count().pool, 1);
                assert_eq!(world.try_admit(&hx), Some(Admission::Pool));
                world.run_and_finish(hx, Admission::Pool);
                ran.push(extra);
            }
            _ => {
                assert_eq!(how, Admission::Pool);
                assert_eq!(world.table.count().pool, 2);
                assert_eq!(world.try_admit(&hx), None);
            }
        }
        world.finish(h2);
        world.run_and_finish(hp, Admission::Pool);
        a.join().unwrap();
        world.check_conserved(&ran);
    });
}

/// A join half's state bits (`Half::state`, `src/worker/job.rs`). None set: not run, and no
/// taker is done with it.
/// Its closure ran (or runs now).
const RAN: u8 = 1;
/// The taker that claimed it is done with it: ran it, or declined it.
const SETTLED: u8 = 2;
/// With `SETTLED` and without `RAN`: the taker found no token and left it, unrun, for its job.
const DECLINED: u8 = 4;

/// What `b` returns.
const B_RESULT: usize = 7;

/// The `b` of a join (`JoinJob`, `src/worker/job.rs`), on its joiner's frame and in its
/// thread's split stack: its state, its job (read by a taker to make `b`'s lender), its closure
/// (taken by whoever runs it) and its result (written by a run away from the joiner's frame,
/// read once by the joiner). The cells are loom's, so a taker's use of them that is not ordered
/// before the joiner's (a settle without `Release`, a probe without `Acquire`), or a second run
/// racing the first, is a causality violation.
struct JoinHalf {
    /// `RAN`, `SETTLED` and `DECLINED` bits.
    state: AtomicU8,
    /// `Half::parent`: the joiner's job. Overwritten by the joiner once it has `b`'s result,
    /// as the frame's next use would.
    parent: UnsafeCell<ParentAddr>,
    /// Whether `b`'s closure is still there (`JoinJob::func`).
    func: UnsafeCell<bool>,
    /// `JoinJob::result`.
    result: UnsafeCell<Option<usize>>,
    /// Times `b`'s closure ran, wherever.
    runs: AtomicUsize,
}

// SAFETY: the cells are loom's `UnsafeCell`s, whose accesses loom checks: a write concurrent
// with another access fails the model.
unsafe impl Sync for JoinHalf {}

impl JoinHalf {
    fn new(parent: ParentAddr) -> Self {
        JoinHalf {
            state: AtomicU8::new(0),
            parent: UnsafeCell::new(parent),
            func: UnsafeCell::new(true),
            result: UnsafeCell::new(None),
            runs: AtomicUsize::new(0),
        }
    }

    /// Takes `b`'s closure and calls it, unless a run took it already.
    fn call(&self) -> Option<usize> {
        // SAFETY: loom checks the accesses (see `Sync` above).
        let there = self
            .func
            .with_mut(|func| unsafe { std::mem::replace(&mut *func, false) });
        there.then(|| {
            self.runs.fetch_add(1, Ordering::Relaxed);
            B_RESULT
        })
    }

    /// `JoinJob::run_into_result`: a taker runs `b` away from its joiner's frame.
    fn run_into_result(&self) {
        let value = self.call().expect("a join half runs once");
        // SAFETY: as in `call`.
        self.result
            .with_mut(|result| unsafe { *result = Some(value) });
    }

    /// `JoinJob::run_inline`: the joiner runs `b` here, unless a taker ran it (then its result).
    fn run_inline(&self) -> usize {
        self.call().unwrap_or_else(|| {
            // SAFETY: as in `call`.
            let result = self.result.with_mut(|result| unsafe { (*result).take() });
            result.expect("the taker that ran b wrote its result")
        })
    }
}

/// The join protocol of `join_in_worker` and `public_half` (`src/api/join.rs`) and
/// `JoinJob::run_taken` (`src/worker/job.rs`), for one public `b`, mirrored with loom
/// primitives and the real token table: `unclaimed` stands for `b` public in the joiner's split
/// stack (taken by exactly one of the joiner's take-back and a thief's claim: one CAS on
/// `ends`, whose own models are in `tests/loom/join.rs`), [`JoinHalf`] for `b` itself. J (the
/// joiner's job) holds the only token and lent it to C1; if `c1_returns`, a third thread
/// finishes C1 meanwhile, so the thief may find the loan free. The thief makes `b`'s lender
/// only once it has claimed `b` (`Registry::new_child(job.parent)`), from J's address read in
/// the half, and tries to admit it (`try_admit` only: J is not its current job, and no call
/// into another pool lies below J, so neither HalfRunsAsPart nor CalledOutHalfOnCredit
/// applies). Admitted, it runs `b` as a child of J, finishes it and settles `b`
/// (`SETTLED | RAN`, Release); else it declines `b` (`SETTLED | DECLINED`, Release: `b` stays
/// where it is, unrun) and drops the lender unadmitted. The joiner, after `a`, takes `b` back
/// and runs it inline, or waits until `b` is settled (Acquire: `JoinJob::settled`) and takes
/// its result, or, declined, runs it inline (`result_after_taken`): as part of J, no
/// admission. Then the join's frame may be reused, and J finishes as soon as its body returns,
/// without waiting for the thief's thread, as in the pool. The wake-up the taker sends the
/// joiner's thread (`Sleep::wake_worker`) is not modelled: the joiner spins.
///
/// Shown to fail, each mutation made by hand in this function: a settle with `Relaxed`, after
/// a run (model 6b) or a decline (models 6 and 6b: the taker's read of the half races the
/// frame's reuse), or a probe with `Relaxed` (models 6 and 6b): "Causality violation"; a taker
/// that declines without settling, or a joiner that waits for `RAN` only (models 6 and 6b:
/// "Model exceeded maximum number of branches"); a joiner that runs only a `b` it took back
/// (models 6 and 6b: "b ran exactly once").
fn join_decline(c1_returns: bool) {
    let mut world = World::new(1);
    let j = world.job(None);
    let c1 = world.job(Some(j));
    let b = world.job(Some(j));
    let world = Arc::new(world);
    let hj = world.make(j, None);
    world.start(&hj, Admission::Pool);
    let h1 = world.make(c1, Some(&hj.lender));
    world.start(&h1, Admission::Loan);
    let unclaimed = Arc::new(AtomicBool::new(true));
    let half = Arc::new(JoinHalf::new(hj.addr()));

    let thief = {
        let (world, unclaimed, half) = (world.clone(), unclaimed.clone(), half.clone());
        thread::spawn(move || {
            // The claim (`HalfStack::steal`).
            if unclaimed
                .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return false; // the joiner took it back
            }
            // SAFETY: loom checks the access (see `JoinHalf`'s `Sync`).
            let parent = half.parent.with(|parent| unsafe { *parent });
            let hb = world.make_child(b, parent);
            match world.try_admit(&hb) {
                None => {
                    // No token: decline `b`, which stays in J's split stack, unrun, for J
                    // (`Half::settle`: the state last, with Release). Then its lender, never
                    // shared, is dropped unadmitted, as `run_taken`'s return drops it: J may
                    // have finished by then.
                    half.state.store(SETTLED | DECLINED, Ordering::Release);
                    drop(hb);
                    false
                }
                Some(how) => {
                    assert!(c1_returns, "J's token is lent and the pool is empty");
                    world.run(&hb, how);
                    half.run_into_result();
                    world.finish(hb);
                    // Release: publishes `b`'s result, and orders the loan's return before J's
                    // finish.
                    half.state.store(SETTLED | RAN, Ordering::Release);
                    true
                }
            }
        })
    };
    let (returner, h1) = if c1_returns {
        let world = world.clone();
        let t = thread::spawn(move || {
            world.run_and_finish(h1, Admission::Loan);
        });
        (Some(t), None)
    } else {
        (None, Some(h1))
    };

    // The joiner: `a` ran inline; now take `b` back (`HalfOwner::take_back`: `Retracted`), or,
    // claimed (`Taken`), wait until its taker settled it.
    let taken_back = unclaimed
        .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok();
    let inline = taken_back || {
        let settled = loop {
            // Acquire: `JoinJob::settled`, paired with the taker's Release.
            let state = half.state.load(Ordering::Acquire);
            if state & SETTLED != 0 {
                break state;
            }
            thread::yield_now();
        };
        assert!(
            settled == SETTLED | RAN || settled == SETTLED | DECLINED,
            "a settled half is run or declined"
        );
        // `result_after_taken`. Relaxed: settled, so only this thread looks at the state now.
        half.state.fetch_or(RAN, Ordering::Relaxed);
        settled & DECLINED != 0
    };
    // Taken back or declined, `b` runs here, as part of J: no admission.
    assert_eq!(half.run_inline(), B_RESULT);
    // The join is over: its frame may be reused at once (the taker's reads of the half must
    // be ordered before this, by its settle).
    // SAFETY: loom checks the access (see `JoinHalf`'s `Sync`).
    half.parent
        .with_mut(|parent| unsafe { *parent = ParentAddr(std::ptr::null()) });

    if let Some(t) = returner {
        t.join().unwrap();
    }
    if let Some(h1) = h1 {
        world.run_and_finish(h1, Admission::Loan);
    }
    // J's body returns, and J finishes (its lender may be freed) before the thief is done.
    world.run_and_finish(hj, Admission::Pool);
    let thief_ran = thief.join().unwrap();
    assert_eq!(half.runs.load(Ordering::Relaxed), 1, "b ran exactly once");
    assert_eq!(thief_ran, !inline);
    let mut ran = vec![j, c1];
    if thief_ran {
        ran.push(b);
    }
    world.check_conserved(&ran);
}

/// Model 6: a claimed join half with no token is declined while its joiner tries to take it
/// back. The thief cannot admit `b` (the joiner's token is lent, the pool empty), so it declines
/// it and `b` stays in place; its joiner, waiting for it to settle, runs it inline, as part of
/// J. `b` runs exactly once, and its lender is freed unadmitted.
#[test]
fn a_stolen_half_with_no_token_is_declined_and_run_by_its_joiner() {
    model(None, || join_decline(false));
}

/// Model 6b: as model 6, with the joiner's loan returning meanwhile, so the thief may admit `b`
/// on it and run it, or find no token yet and decline it; either way `b` runs exactly once.
///
/// Bounded, by a bound that explores all there is (4532 executions, 1426 of them with `b`
/// admitted; from 12 up the count no longer grows): with no bound, loom 0.7.3 explored only 87
/// executions here, and in none of them did the thief admit `b` (with a bound of 2 it does, in
/// 9 of 48).
#[test]
fn a_stolen_half_is_admitted_on_a_returned_loan_or_declined() {
    model(Some(16), || join_decline(true));
}

/// Model 7: a root on credit lends, and its next child waits for the loan or a pool token. One
/// pool token, held by root R; K, a root started by a call from a job of another pool, is
/// admitted on credit and lent its token to C1. The main thread is K's: it spawns C2, which
/// finds K's token lent and the pool empty and waits for either; thread A finishes C1 (the loan
/// returns, to C2 or to K), thread B finishes R (the pool token is released, to C2 or to the free
/// count). C2 is admitted exactly once; then K finishes. At the end `count()` is zero in both
/// halves (the credit went back to the credit half, the pool token to the pool) and exactly `cap`
/// fresh roots can be admitted.
#[test]
fn credit_root_lends_while_pool_token_released() {
    model(Some(3), || {
        let mut world = World::new(1);
        let r = world.job(None);
        let k = world.job(None);
        let c1 = world.job(Some(k));
        let c2 = world.job(Some(k));
        let world = Arc::new(world);
        let hr = world.make(r, None);
        world.start(&hr, Admission::Pool);
        let hk = world.make(k, None);
        world.start(&hk, Admission::Credit);
        let h1 = world.make(c1, Some(&hk.lender));
        world.start(&h1, Admission::Loan);
        let count = world.table.count();
        assert_eq!((count.pool, count.credit), (1, 1));

        let a = {
            let world = world.clone();
            thread::spawn(move || {
                world.run_and_finish(h1, Admission::Loan);
            })
        };
        let b = {
            let world = world.clone();
            thread::spawn(move || {
                world.run_and_finish(hr, Admission::Pool);
            })
        };
        // K's thread: spawn C2 and wait for it, then K's body returns.
        let h2 = world.make(c2, Some(&hk.lender));
        world.spawn_and_run(h2);
        a.join().unwrap();
        b.join().unwrap();
        world.run_and_finish(hk, Admission::Credit);

        assert_eq!(world.table.peak_credit(), 1);
        world.check_conserved(&[r, k, c1, c2]);
    });
}
