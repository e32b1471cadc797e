//! Join halves declined by their taker: a thief (or a wait on the joiner's own thread, above
//! the joiner's job) that claims a `b` and finds no token to admit it leaves it unrun where it
//! lies, in its joiner's split stack (`Stats::handed_back` counts it), and wakes the joiner's
//! thread; the half's own job then runs it in place, as part of the job: any wait of the job
//! that finds no other work, or the joiner itself once its `a` has returned. These tests check
//! waits of two kinds that must do so: an ordered stream's consumer waiting by OwnItems, and an
//! exit handler's waits, whose worker's inbox is closed (a worker's drain and exit handler run
//! after `main_loop` closed it; a declined half never goes through an inbox).
//! Both cases come from the adversarial review of issues 35 and 36, when such a half was sent
//! back to its joiner's thread (the first hung, the second aborted a debug build on an assertion
//! that the inbox was open); issue 39 made the half stay in place instead.

use crate::common;
use crate::common::{catch, pool, settle, spin_until, watchdog};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn busy(ms: u64) {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Spins until `flag` or `ms` milliseconds passed; returns the flag.
fn spin_for(flag: &AtomicBool, ms: u64) -> bool {
    let deadline = Instant::now() + Duration::from_millis(ms);
    while !flag.load(SeqCst) && Instant::now() < deadline {
        std::thread::yield_now();
    }
    flag.load(SeqCst)
}

/// Shape 2 (`x` waits for its own `y`), where `x` first spawns (the job's token is lent to the
/// coarse leaf C and none is free, so that spawn waits for admission, with the job's halves
/// kept: AdmittingKeepsHalves), then waits for `y` through an ordered stream: item 1 runs in a
/// carrier on A's other worker and waits (through B) for `y`, while the consumer waits by
/// OwnItems. `y` may be private, public (A's other worker counts idle while it runs C, so the
/// join makes `y` public), or claimed by that worker and declined for want of a token; the
/// consumer's OwnItems wait must run it in each case, as a half of its current job, or the item
/// waits forever (a hang, 1 round in 2 to 16, before OwnItems ran the job's own halves).
#[test]
fn shape_2_whose_x_waits_for_y_through_an_ordered_stream_after_a_spawns_admission() {
    common::isolated!(120, || watchdog(60, || {
        for round in 0..16 {
            let (a, b) = (pool(2, 1), pool(1, 1));
            let c_started = AtomicBool::new(false);
            let s_ran = AtomicBool::new(false);
            let y_started = AtomicBool::new(false);
            let item1_started = AtomicBool::new(false);
            let (x, y) = a.scope(|s| {
                s.spawn(|_| {
                    c_started.store(true, SeqCst);
                    busy(300);
                });
                spin_for(&c_started, 2000);
                treepool::join(
                    || {
                        // Waits for admission: the job's token is lent to C, none is free.
                        s.spawn(|_| s_ran.store(true, SeqCst));
                        spin_for(&s_ran, 2000);
                        let v: Vec<i32> = treepool::scope(|s2| {
                            s2.map_ordered(0..2, |i| {
                                if i == 0 {
                                    // Until item 1 runs elsewhere (a carrier), if this is the
                                    // consumer.
                                    spin_for(&item1_started, 1000);
                                    0
                                } else {
                                    item1_started.store(true, SeqCst);
                                    b.install(|| {
                                        spin_until(|| y_started.load(SeqCst));
                                        11
                                    })
                                }
                            })
                            .collect()
                        });
                        v[1]
                    },
                    || {
                        y_started.store(true, SeqCst);
                        20
                    },
                )
            });
            assert_eq!((x, y), (11, 20), "round {round}");
            settle([&a, &b]);
        }
    }));
}

static EH_R0_STARTED: AtomicBool = AtomicBool::new(false);
static EH_C_STARTED: AtomicBool = AtomicBool::new(false);
static EH_HANDLER0_DONE: AtomicBool = AtomicBool::new(false);
static EH_PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A public half of a join made by an exit handler (its worker's inbox is closed: `main_loop`
/// closes it before the drain and the handler) is claimed by the other worker, in a wait of
/// C (a child of the handler's root, holding its only token), which finds no token to admit it
/// and declines it: the half stays in the handler thread's split stack, and the handler's job
/// runs it as part of itself (a wait of the job, or the joiner once its `a` returned), with
/// the inbox closed. When a declined half
/// was sent back to its joiner's inbox instead, a debug assertion that the inbox was open
/// aborted the process here.
#[test]
fn a_declined_half_of_an_exit_handlers_join_runs_with_its_inbox_closed() {
    common::isolated!(120, || watchdog(60, || {
        let b = Arc::new(pool(1, 1));
        let a = treepool::ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(1)
            .exit_handler(move |index| {
                if index == 0 {
                    let b = &b;
                    treepool::scope(|s| {
                        s.spawn(move |_| {
                            EH_C_STARTED.store(true, SeqCst);
                            if let Err(m) = catch(|| {
                                b.install(|| std::thread::sleep(Duration::from_millis(300)))
                            }) {
                                EH_PANICS.lock().unwrap().push(m);
                            }
                        });
                        EH_R0_STARTED.store(true, SeqCst);
                        spin_for(&EH_C_STARTED, 2000);
                        let deadline = Instant::now() + Duration::from_millis(500);
                        treepool::join(
                            || {
                                while Instant::now() < deadline {
                                    treepool::join(|| {}, std::hint::spin_loop);
                                }
                            },
                            || (),
                        );
                    });
                    EH_HANDLER0_DONE.store(true, SeqCst);
                } else {
                    spin_for(&EH_R0_STARTED, 2000);
                    // A root of its own: waits for the only token, running the pool's jobs.
                    treepool::join(|| (), || ());
                }
            })
            .build()
            .unwrap();
        a.install(|| ());
        drop(a);
        let finished = spin_for(&EH_HANDLER0_DONE, 10_000);
        let panics = EH_PANICS.lock().unwrap().clone();
        assert!(
            panics.is_empty(),
            "a panic in the exit handler's child C: {panics:?} (handler 0 finished: {finished})"
        );
        assert!(
            finished,
            "exit handler 0's join never returned (its half was lost)"
        );
    }));
}
