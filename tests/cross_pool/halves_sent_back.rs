//! Join halves that come back unrun to their joiner's thread (named policy HalfReturnsToItsJob):
//! the joiner's job runs them in whatever wait it is in, also an ordered stream's consumer, and
//! also with its inbox closed (a worker's drain and exit handler). Found by the adversarial
//! review of issues 35 and 36 (both failed: the first hung, the second aborted a debug build
//! on an assertion that a sent-back half's inbox is open).

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

/// Shape 2 (`x` waits for its own `y`), where `x` first spawns (its
/// admission wait meets `y`, promoted at the join because A's other worker counts idle while it
/// runs the coarse leaf C, and keeps it in `ReturnedHalves`), then waits for `y` through an
/// ordered stream: item 1 runs in a carrier on A's other worker and waits (through B) for `y`,
/// while the consumer waits by OwnItems, which took no returned half (a hang, 1 round in 2 to
/// 16) before it ran the current job's own halves.
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

/// A promoted half of a job run by an exit handler (its worker's inbox is closed: main_loop
/// closes it before the drain and the handler) is taken by the other worker, in a wait of C (a
/// child of the handler's root holding its only token), and cannot be admitted:
/// `Inboxes::send_back` to a closed inbox, which the handler's wait still looks at (a debug
/// assertion that the inbox was open aborted the process here).
#[test]
fn a_half_of_an_exit_handlers_join_sent_back_to_its_closed_inbox_runs() {
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
