//! Every kind of wait across pools, probed at random and one by one. Found by the adversarial
//! review of the layered core (issue 25: `worker::wait`'s one loop with
//! `Policy::AnyAdmitted` and `Policy::OwnItems`, wake targets of other pools through
//! `SleepingPool`, the opaque ticket, the global pool's statics beside the builder, and
//! `build_scoped` beside the pool).
//!
//! * `random_trees_with_streams_try_scopes_and_broadcasts_across_pools`: random trees over 2–3
//!   pools that mix what `tests/cross_pool.rs`'s generator leaves out: ordered streams consumed
//!   by every kind of consumer (a worker of the stream's pool inside a job, a worker of another
//!   pool through an in-place scope, a plain thread), fallible scopes that cancel, broadcasts,
//!   detached spawns and panics, each tree under a deadline. After each tree every pool must be
//!   idle (B4) and no pool may ever have used more tokens than its cap (B1).
//!   `TREEPOOL_REVIEW_TREES` (default 400) and `TREEPOOL_REVIEW_SEED` pick the trees.
//! * the other tests each probe one wait site or one moved piece (see their doc comments).

use crate::common;

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::common::{assert_idle, watchdog, Rng};

const PANIC_PREFIX: &str = "review-core leaf panic ";
const STACK_SIZE: usize = 16 << 20;
const TREE_TIMEOUT: Duration = Duration::from_secs(30);

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|t| {
            let t = t.trim().replace('_', "");
            match t.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).expect("hex seed"),
                None => t.parse().expect("number"),
            }
        })
        .unwrap_or(default)
}

/// The pools of one set and what the trees share.
struct Cx {
    pools: Vec<treepool::ThreadPool>,
    caps: Vec<usize>,
    errors: Mutex<Vec<String>>,
    detached: AtomicUsize,
    /// The pool set, for failure messages.
    describe: String,
}

impl Cx {
    fn new(seed: u64) -> Arc<Self> {
        let mut rng = Rng::new(mix(seed));
        let n = rng.range(2, 3) as usize;
        let mut caps = Vec::new();
        // Half the pool sets make the runner's thread (named `rc0-0`) worker 0 of pool 0
        // (`use_current_thread`, with a thread of its own at least: a one-thread pool runs
        // nothing while its builder's thread is outside a call, by design).
        let current = rng.range(0, 1) == 0;
        let mut describe = format!("pool set {seed:#x} (pool 0 borrows the runner: {current}):");
        let pools = (0..n)
            .map(|p| {
                let borrowed = current && p == 0;
                let threads = rng.range(1 + u64::from(borrowed), 3) as usize;
                let cap = rng.range(1, 4) as usize;
                caps.push(cap);
                describe += &format!(" pool {p} = {threads} threads/cap {cap};");
                let builder = treepool::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .max_inflight(cap)
                    .stack_size(STACK_SIZE)
                    .thread_name(move |i| format!("rc{p}-{i}"))
                    .panic_handler(|_| {});
                let builder = if borrowed {
                    builder.use_current_thread()
                } else {
                    builder
                };
                builder.build().expect("build a pool")
            })
            .collect();
        Arc::new(Cx {
            pools,
            caps,
            errors: Mutex::new(Vec::new()),
            detached: AtomicUsize::new(0),
            describe,
        })
    }

    fn fail(&self, e: String) {
        self.errors.lock().unwrap().push(e);
    }

    /// The pool whose worker this thread is (from its name).
    fn here(&self) -> Option<usize> {
        let t = std::thread::current();
        let name = t.name()?;
        name.strip_prefix("rc")?.split('-').next()?.parse().ok()
    }

    fn other(&self, p: usize, rng: &mut Rng) -> usize {
        let k = rng.range(0, self.pools.len() as u64 - 2) as usize;
        if k >= p {
            k + 1
        } else {
            k
        }
    }

    fn sample(&self) {
        for (q, pool) in self.pools.iter().enumerate() {
            let stats = pool.stats();
            if stats.tokens_in_use > self.caps[q] {
                self.fail(format!("pool {q}: tokens_in_use > cap: {stats:?}"));
            }
        }
    }
}

fn split(rng: &mut Rng, total: usize, parts: usize) -> Vec<usize> {
    let parts = parts.clamp(1, total.max(1));
    let mut sizes = vec![usize::from(total != 0); parts];
    for _ in parts..total {
        sizes[rng.range(0, parts as u64 - 1) as usize] += 1;
    }
    sizes
}

/// The items of a stream: `(seed, size)` each.
fn stream_items(rng: &mut Rng, rest: usize) -> Vec<(u64, usize)> {
    let parts = rng.range(1, 6) as usize;
    split(rng, rest, parts)
        .into_iter()
        .map(|size| (rng.next(), size))
        .collect()
}

/// Consumes an ordered stream of `items` on scope `s`, each item a subtree; checks the order.
fn consume(
    cx: &Arc<Cx>,
    s: &treepool::Scope<'_>,
    items: Vec<(u64, usize)>,
    window: usize,
    take: usize,
) {
    let n = items.len();
    let cx2 = cx.clone();
    let out: Vec<usize> = s
        .map_ordered(items.into_iter().enumerate(), move |(i, (seed, size))| {
            node(&cx2, seed, size);
            i
        })
        .window(window)
        .take(take)
        .collect();
    let want: Vec<usize> = (0..n.min(take)).collect();
    if out != want {
        cx.fail(format!("stream out of order: {out:?}, want {want:?}"));
    }
}

/// The body of a fallible scope: spawns `kids`, of which those marked fail after their subtree.
fn try_kids<'s>(
    cx: &'s Arc<Cx>,
    s: &treepool::TryScope<'s, u64>,
    kids: &'s [(u64, usize, bool)],
    failed: &'s Mutex<Vec<u64>>,
) -> Result<(), u64> {
    for &(seed, size, fails) in kids {
        s.spawn(move |_| {
            node(cx, seed, size);
            if fails {
                failed.lock().unwrap().push(seed);
                return Err(seed);
            }
            Ok(())
        });
    }
    Ok(())
}

fn node(cx: &Arc<Cx>, seed: u64, size: usize) {
    if size == 0 {
        return;
    }
    let Some(p) = cx.here() else {
        cx.fail("a node ran on a thread that is no pool's worker".into());
        return;
    };
    let mut rng = Rng::new(mix(seed));
    if rng.range(0, 3) == 0 {
        cx.sample();
    }
    if size == 1 {
        if rng.range(0, 99) < 2 {
            panic::panic_any(format!("{PANIC_PREFIX}{seed:#x}"));
        }
        std::hint::black_box((0..rng.range(0, 2000)).sum::<u64>());
        if rng.range(0, 3) == 0 {
            std::thread::yield_now();
        }
        return;
    }
    let rest = size - 1;
    let q = cx.other(p, &mut rng);
    let action = rng.range(0, 99);
    if std::env::var_os("TREEPOOL_REVIEW_TRACE").is_some() {
        let t = std::thread::current();
        println!(
            "[{}] node {seed:#x} size {size} pool {p} action {action} other {q}",
            t.name().unwrap_or("?")
        );
    }
    match action {
        0..=11 => {
            let sz = split(&mut rng, rest, 2);
            let (a, b) = (rng.next(), rng.next());
            let sb = sz.get(1).copied().unwrap_or(0);
            treepool::join(|| node(cx, a, sz[0]), || node(cx, b, sb));
        }
        12..=21 => {
            let kids = stream_items(&mut rng, rest);
            treepool::scope(|s| {
                for (seed, size) in kids {
                    s.spawn(move |_| node(cx, seed, size));
                }
            });
        }
        22..=31 => {
            // A stream of this pool consumed by this worker, inside its job (OwnItems).
            let items = stream_items(&mut rng, rest);
            let (w, t) = (rng.range(1, 4) as usize, rng.range(0, 6) as usize);
            treepool::scope(|s| consume(cx, s, items, w, t));
        }
        32..=39 => {
            // A stream of another pool's in-place scope: this worker consumes it as a worker
            // of another pool (AnyAdmitted in its own pool, woken as a Foreign target).
            let items = stream_items(&mut rng, rest);
            let (w, t) = (rng.range(1, 4) as usize, rng.range(0, 6) as usize);
            cx.pools[q].in_place_scope(|s| consume(cx, s, items, w, t));
        }
        40..=45 => {
            // A stream of another pool's scope (the consumer is a root of that pool).
            let items = stream_items(&mut rng, rest);
            let (w, t) = (rng.range(1, 4) as usize, rng.range(0, 6) as usize);
            cx.pools[q].scope(|s| consume(cx, s, items, w, t));
        }
        46..=55 => {
            // A fallible scope here or in another pool; some children fail.
            let kids: Vec<(u64, usize, bool)> = stream_items(&mut rng, rest)
                .into_iter()
                .map(|(seed, size)| (seed, size, mix(seed) % 3 == 0))
                .collect();
            let failed = Mutex::new(Vec::new());
            let result = if rng.range(0, 1) == 0 {
                treepool::try_scope(|s| try_kids(cx, s, &kids, &failed))
            } else {
                cx.pools[q].try_scope(|s| try_kids(cx, s, &kids, &failed))
            };
            let failed = failed.into_inner().unwrap();
            match result {
                Ok(()) if !failed.is_empty() => {
                    cx.fail(format!("try_scope Ok while {failed:?} failed"))
                }
                Err(e) if !failed.contains(&e) => {
                    cx.fail(format!("try_scope Err({e:#x}) not among {failed:?}"))
                }
                _ => {}
            }
        }
        56..=65 => {
            let s2 = rng.next();
            cx.pools[q].install(|| node(cx, s2, rest));
        }
        66..=72 => {
            let kids = stream_items(&mut rng, rest);
            cx.pools[q].in_place_scope(|s| {
                for (seed, size) in kids {
                    s.spawn(move |_| node(cx, seed, size));
                }
            });
        }
        73..=78 => {
            let target = if rng.range(0, 1) == 0 { p } else { q };
            let pool = &cx.pools[target];
            let parts: Vec<(u64, usize)> = split(&mut rng, rest, pool.current_num_threads())
                .into_iter()
                .map(|size| (rng.next(), size))
                .collect();
            pool.broadcast(|ctx| {
                let (seed, size) = parts.get(ctx.index()).copied().unwrap_or((0, 0));
                node(cx, seed, size)
            });
        }
        79..=87 => {
            let sz = split(&mut rng, rest, 2);
            let target = if rng.range(0, 1) == 0 { p } else { q };
            let (s1, s2) = (rng.next(), rng.next());
            cx.detached.fetch_add(1, Ordering::SeqCst);
            let cx1 = cx.clone();
            let size = sz[0];
            cx.pools[target].spawn(move || {
                let _ = panic::catch_unwind(AssertUnwindSafe(|| node(&cx1, s1, size)));
                cx1.detached.fetch_sub(1, Ordering::SeqCst);
            });
            node(cx, s2, sz.get(1).copied().unwrap_or(0));
        }
        _ => {
            let sz = split(&mut rng, rest, 2);
            let (a, b) = (rng.next(), rng.next());
            let sb = sz.get(1).copied().unwrap_or(0);
            cx.pools[q].join(|| node(cx, a, sz[0]), || node(cx, b, sb));
        }
    }
}

/// One tree from the test's own thread: a root in a pool, or (a quarter of them) a stream of an
/// in-place scope consumed by this plain thread.
fn run_tree(cx: &Arc<Cx>, seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(mix(seed ^ 0x5EED));
    let size = rng.range(1, 80) as usize;
    let p = rng.range(0, cx.pools.len() as u64 - 1) as usize;
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        if rng.range(0, 3) == 0 {
            let items = stream_items(&mut rng, size);
            let (w, t) = (rng.range(1, 4) as usize, rng.range(0, 6) as usize);
            cx.pools[p].in_place_scope(|s| consume(cx, s, items, w, t));
        } else {
            cx.pools[p].install(|| node(cx, seed, size));
        }
    }));
    if let Err(payload) = result {
        let m = common::panic_message(payload.as_ref());
        if !m.starts_with(PANIC_PREFIX) {
            return Err(format!("tree {seed:#x} raised a foreign panic: {m}"));
        }
    }
    let deadline = Instant::now() + TREE_TIMEOUT;
    while cx.detached.load(Ordering::SeqCst) != 0 {
        if Instant::now() > deadline {
            let stats: Vec<_> = cx.pools.iter().map(|p| p.stats()).collect();
            let stuck = cx.detached.load(Ordering::SeqCst);
            // On the runner's thread: whether, as worker 0 of pool 0 (if it is one), it has
            // jobs in its own deque (entering for the question hands them over on the way out).
            let own_deque = cx.pools[0].current_thread_has_pending_tasks();
            let until = Instant::now() + Duration::from_secs(5);
            while cx.detached.load(Ordering::SeqCst) != 0 && Instant::now() < until {
                std::thread::yield_now();
            }
            let after_hand_over = cx.detached.load(Ordering::SeqCst);
            // A nudge: a job injected into every pool from a plain thread wakes a sleeper,
            // which looks at the injector and steals from every deque. Did the stuck job run?
            std::thread::scope(|t| {
                t.spawn(|| cx.pools.iter().for_each(|p| p.spawn(|| ())));
            });
            let until = Instant::now() + Duration::from_secs(5);
            while cx.detached.load(Ordering::SeqCst) != 0 && Instant::now() < until {
                std::thread::yield_now();
            }
            let after_nudge = cx.detached.load(Ordering::SeqCst);
            return Err(format!(
                "tree {seed:#x}: {stuck} detached jobs never finished (the runner's own deque \
                 as worker 0 of pool 0 holds jobs: {own_deque:?}; {after_hand_over} left after \
                 it handed them over, {after_nudge} after a wake-up nudge); {}; stats {stats:#?}",
                cx.describe
            ));
        }
        std::thread::yield_now();
    }
    for (q, pool) in cx.pools.iter().enumerate() {
        loop {
            let st = pool.stats();
            if st.inflight == 0 && st.executing == 0 && st.tokens_in_use == 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("tree {seed:#x}: pool {q} never idle: {st:?}"));
            }
            std::thread::yield_now();
        }
        assert_idle(&pool.stats());
    }
    let errors = std::mem::take(&mut *cx.errors.lock().unwrap());
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("tree {seed:#x}: {errors:?}"))
    }
}

/// See the module doc. A hang is reported with the seed of the tree that hung.
#[test]
fn random_trees_with_streams_try_scopes_and_broadcasts_across_pools() {
    let trees = env_u64("TREEPOOL_REVIEW_TREES", 400);
    let base = env_u64("TREEPOOL_REVIEW_SEED", 0xC0DE_0000);
    run_trees(base, trees, 1);
}

/// Tree 0xcafe08cb of pool set 0xcafe08ca (pool 0 = the runner's thread as worker 0 via
/// `use_current_thread` + 2 workers, cap 3), repeated: it left about 1 run in 30–50 a detached
/// job of pool 0 in its injector while every worker slept. The wake-up for that job had gone to
/// the runner's thread, asleep in a wait inside a call, whose wait then ended without the job
/// and which left the call: a thread that stops running pool work passes such a wake-up on
/// (`Sleep::pass_on`; loom model `a_leaving_worker_passes_a_spent_wake_up_on`). Checks that
/// every detached job runs.
#[test]
fn borrowed_pool_tree_0xcafe08cb_runs_all_its_detached_jobs() {
    let repeat = env_u64("TREEPOOL_REVIEW_REPEAT", 150);
    run_trees(0xcafe_08ca, 2, repeat);
}

/// Runs trees `base .. base + trees` (a new pool set every 25 trees), `repeat` times over.
fn run_trees(base: u64, trees: u64, repeat: u64) {
    common::quiet_panics_starting_with(PANIC_PREFIX);
    // Ok(Some(seed)): a tree starts; Ok(None): all done; Err: a failure. A runner that dies
    // without saying it is done (a panic outside `run_tree`'s checks) fails the test too.
    let (tx, rx) = mpsc::channel::<Result<Option<u64>, String>>();
    let runner = std::thread::Builder::new()
        .name("rc0-0".into())
        .stack_size(STACK_SIZE);
    let _ = runner.spawn(move || {
        let report = tx.clone();
        let outcome = panic::catch_unwind(AssertUnwindSafe(move || {
            let mut cx = Cx::new(base);
            for t in (0..repeat).flat_map(|_| 0..trees) {
                let seed = base + t;
                if t % 25 == 0 {
                    // Dropped here, on the builder's thread, once no detached job holds it.
                    common::spin_until(|| Arc::strong_count(&cx) == 1);
                    drop(cx);
                    cx = Cx::new(seed);
                }
                let _ = tx.send(Ok(Some(seed)));
                if let Err(e) = run_tree(&cx, seed) {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
            common::spin_until(|| Arc::strong_count(&cx) == 1);
            drop(cx);
            let _ = tx.send(Ok(None));
        }));
        if let Err(payload) = outcome {
            let _ = report.send(Err(format!(
                "the runner panicked: {}",
                common::panic_message(payload.as_ref())
            )));
        }
    });
    let mut current = base;
    loop {
        match rx.recv_timeout(TREE_TIMEOUT * 2) {
            Ok(Ok(Some(seed))) => current = seed,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => panic!("{e} (last tree started: {current:#x})"),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the runner died"),
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "hang: tree {current:#x} (pool set from {:#x}) did not finish; rerun with \
                 TREEPOOL_REVIEW_SEED={current:#x} TREEPOOL_REVIEW_TREES=1",
                current - (current - base) % 25
            ),
        }
    }
    println!("{trees} trees from {base:#x}: all finished, every pool idle after each");
}

fn spin_us(us: u64) {
    let until = Instant::now() + Duration::from_micros(us);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Passing probe of `Policy::OwnItems` (wait site "stream consumer"): a consumer on a worker of
/// the stream's pool, inside a job, runs nothing but the stream's items while `next` waits: not
/// the detached jobs in its own deque, nor those in the injector.
#[test]
fn own_items_consumer_runs_no_deque_or_injected_job() {
    watchdog(120, || {
        let pool = Arc::new(common::pool(2, 4));
        let violations = Arc::new(AtomicUsize::new(0));
        let detached_ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..40 {
            let (pool2, violations2, ran2) =
                (pool.clone(), violations.clone(), detached_ran.clone());
            pool.install(move || {
                let me = std::thread::current().id();
                let in_next = Arc::new(AtomicBool::new(false));
                treepool::scope(|s| {
                    let mut it = s
                        .map_ordered(0..8u32, |i| {
                            spin_us(300);
                            i
                        })
                        .window(2);
                    for want in 0..8 {
                        for inject in [false, true] {
                            let (in_next, violations, ran) =
                                (in_next.clone(), violations2.clone(), ran2.clone());
                            let probe = move || {
                                if in_next.load(Ordering::SeqCst)
                                    && std::thread::current().id() == me
                                {
                                    violations.fetch_add(1, Ordering::SeqCst);
                                }
                                ran.fetch_add(1, Ordering::SeqCst);
                            };
                            if inject {
                                // From a plain thread: a root through the injector.
                                let p = pool2.clone();
                                std::thread::spawn(move || p.spawn(probe)).join().unwrap();
                            } else {
                                treepool::spawn(probe);
                            }
                        }
                        in_next.store(true, Ordering::SeqCst);
                        let got = it.next();
                        in_next.store(false, Ordering::SeqCst);
                        assert_eq!(got, Some(want));
                    }
                });
            });
        }
        common::spin_until(|| detached_ran.load(Ordering::SeqCst) == 40 * 16);
        assert_eq!(
            violations.load(Ordering::SeqCst),
            0,
            "a consumer ran a pool job in next()"
        );
        common::wait_idle(&pool);
        assert_idle(&pool.stats());
    });
}

/// Passing probe of `WakeTarget::Foreign` (now an `Arc<dyn SleepingPool>`): a worker of pool A
/// consumes a stream of pool B's in-place scope with nothing else to do in A, so it sleeps in
/// A's wait loop; B's carriers must wake it. Both directions, one-thread pools, cap 1.
#[test]
fn foreign_consumer_on_a_sleeping_worker_is_woken() {
    watchdog(120, || {
        let a = common::pool(1, 1);
        let b = common::pool(1, 1);
        for round in 0..60 {
            let (x, y) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let out: Vec<u32> = x.install(|| {
                y.in_place_scope(|s| {
                    s.map_ordered(0..12u32, |i| {
                        spin_us(if i % 3 == 0 { 2000 } else { 50 });
                        i
                    })
                    .window(1 + round % 3)
                    .collect()
                })
            });
            assert_eq!(out, (0..12).collect::<Vec<_>>());
        }
        for pool in [&a, &b] {
            common::wait_idle(pool);
            assert_idle(&pool.stats());
        }
    });
}

/// Passing probe: the builder's thread of a `use_current_thread` pool P consumes streams of P
/// and of another pool Q, in every kind it can be (no worker; P's worker 0 inside P's calls;
/// a worker of P consuming Q's stream, items calling back into P), alternating.
#[test]
fn builders_thread_consumes_streams_of_both_pools() {
    watchdog(120, || {
        let p = treepool::ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(1)
            .use_current_thread()
            .build()
            .unwrap();
        let q = common::pool(1, 1);
        let want: Vec<u32> = (0..10).collect();
        for round in 0..30u32 {
            let item = |i: u32| {
                if i % 4 == 0 {
                    p.install(|| spin_us(100));
                }
                i
            };
            let out: Vec<u32> = match round % 4 {
                0 => p.in_place_scope(|s| s.map_ordered(0..10, item).window(2).collect()),
                1 => q.in_place_scope(|s| s.map_ordered(0..10, item).window(2).collect()),
                2 => p.install(|| q.in_place_scope(|s| s.map_ordered(0..10, item).collect())),
                _ => p.scope(|s| s.map_ordered(0..10, item).window(1).collect()),
            };
            assert_eq!(out, want, "round {round}");
        }
        drop(q);
        drop(p);
    });
}

/// Passing probe of the global pool's statics (now in `api::builder`): `build_global` races
/// the first use of the global pool from four threads. Either wins; all threads see the same
/// pool afterwards, and a losing `build_global` leaves none of its workers running (B6).
#[test]
fn build_global_races_first_use() {
    common::isolated!(60, || {
        let barrier = Arc::new(Barrier::new(5));
        let users: Vec<_> = (0..4)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let (a, b) = treepool::join(|| 1, || 2);
                    assert_eq!((a, b), (1, 2));
                    treepool::current_num_threads()
                })
            })
            .collect();
        barrier.wait();
        let built = treepool::ThreadPoolBuilder::new()
            .num_threads(3)
            .thread_name(|i| format!("raceglobal-{i}"))
            .build_global();
        let seen: Vec<usize> = users.into_iter().map(|t| t.join().unwrap()).collect();
        let n = treepool::current_num_threads();
        assert!(seen.iter().all(|&s| s == n), "{seen:?} vs {n}");
        let named = || {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|c| c.starts_with("raceglobal"))
                .count()
        };
        match built {
            Ok(()) => {
                assert_eq!(n, 3);
                assert_eq!(named(), 3);
            }
            Err(_) => common::spin_until(|| named() == 0),
        }
    },);
}

/// Passing probe of `build_scoped` (now beside the pool): it returns once every worker has
/// exited, after the detached jobs admitted before the pool was dropped ran; a panic of
/// `with_pool` is raised after the workers exit too.
#[test]
fn build_scoped_runs_admitted_jobs_and_joins_workers() {
    watchdog(120, || {
        for _ in 0..20 {
            let ran = Arc::new(AtomicUsize::new(0));
            let exited = Arc::new(AtomicUsize::new(0));
            let ex = exited.clone();
            let value = treepool::ThreadPoolBuilder::new()
                .num_threads(2)
                .max_inflight(2)
                .exit_handler(move |_| {
                    ex.fetch_add(1, Ordering::SeqCst);
                })
                .build_scoped(
                    |thread| thread.run(),
                    |pool| {
                        for _ in 0..50 {
                            let ran = ran.clone();
                            pool.spawn(move || {
                                spin_us(20);
                                ran.fetch_add(1, Ordering::SeqCst);
                            });
                        }
                        7
                    },
                )
                .unwrap();
            assert_eq!(value, 7);
            assert_eq!(ran.load(Ordering::SeqCst), 50);
            assert_eq!(exited.load(Ordering::SeqCst), 2);
        }
        let exited = Arc::new(AtomicUsize::new(0));
        let ex = exited.clone();
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            treepool::ThreadPoolBuilder::new()
                .num_threads(2)
                .exit_handler(move |_| {
                    ex.fetch_add(1, Ordering::SeqCst);
                })
                .build_scoped(
                    |thread| thread.run(),
                    |pool| {
                        pool.install(|| panic!("with_pool panics"));
                    },
                )
        }));
        assert_eq!(
            common::panic_message(result.unwrap_err().as_ref()),
            "with_pool panics"
        );
        assert_eq!(exited.load(Ordering::SeqCst), 2);
    });
}

/// The single-thread workloads of `one_thread_stats_are_deterministic`.
fn stats_workloads(cap: usize) -> Vec<(&'static str, treepool::Stats)> {
    fn fib(n: u32) -> u64 {
        if n < 2 {
            return u64::from(n);
        }
        let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
        a + b
    }
    let run = |name: &'static str, f: &(dyn Fn(&treepool::ThreadPool) + Sync)| {
        let pool = common::pool(1, cap);
        f(&pool);
        common::wait_idle(&pool);
        // Whether the worker has counted itself idle yet is timing, not schedule.
        let mut stats = pool.stats();
        stats.idle_workers = 0;
        (name, stats)
    };
    vec![
        run("join tree", &|pool| {
            assert_eq!(pool.install(|| fib(14)), 377)
        }),
        run("scope fan-out", &|pool| {
            pool.scope(|s| {
                for _ in 0..30 {
                    s.spawn(|s| {
                        for _ in 0..3 {
                            s.spawn(|_| spin_us(1));
                        }
                    });
                }
            })
        }),
        run("detached", &|pool| {
            pool.install(|| {
                for _ in 0..20 {
                    treepool::spawn(|| spin_us(1));
                }
            })
        }),
        run("try_scope", &|pool| {
            let r: Result<(), usize> = pool.try_scope(|s| {
                for i in 0..30 {
                    s.spawn(move |_| if i == 5 { Err(i) } else { Ok(()) });
                }
                Ok(())
            });
            assert_eq!(r, Err(5));
        }),
        run("stream", &|pool| {
            let out: Vec<u32> =
                pool.scope(|s| s.map_ordered(0..20u32, |i| i * 2).window(3).collect());
            assert_eq!(out, (0..20).map(|i| i * 2).collect::<Vec<_>>());
        }),
        run("broadcast", &|pool| {
            pool.install(|| treepool::broadcast(|ctx| ctx.index()));
        }),
        run("nested scopes and joins", &|pool| {
            pool.install(|| {
                treepool::scope(|s| {
                    for _ in 0..5 {
                        s.spawn(|_| {
                            let _ = treepool::join(
                                || fib(6),
                                || treepool::scope(|s2| s2.spawn(|_| ())),
                            );
                        });
                    }
                })
            })
        }),
    ]
}

/// Passing probe (and a fingerprint to compare the old and the new core by): on one thread the
/// schedule is fixed, so each workload's `Stats` are the same on every run. Prints them.
#[test]
fn one_thread_stats_are_deterministic() {
    watchdog(120, || {
        for cap in 1..=3 {
            let first = stats_workloads(cap);
            let second = stats_workloads(cap);
            for ((name, a), (_, b)) in first.iter().zip(&second) {
                println!("cap {cap} {name}: {a:?}");
                assert_eq!(a, b, "cap {cap}, {name}: Stats differ between two runs");
            }
        }
    });
}

/// A pool of two threads, the calling thread as worker 0 (`use_current_thread`), and where its
/// exit handler reports the index of each worker that exits (worker 1 only: the handlers do not
/// run for the builder's thread).
fn two_threads_with_this_one() -> (treepool::ThreadPool, mpsc::Receiver<usize>) {
    let (exited_tx, exited) = mpsc::channel();
    let exited_tx = Mutex::new(exited_tx);
    let pool = treepool::ThreadPoolBuilder::new()
        .num_threads(2)
        .use_current_thread()
        .exit_handler(move |i| exited_tx.lock().unwrap().send(i).unwrap())
        .build()
        .unwrap();
    (pool, exited)
}

/// A `use_current_thread` pool is `Send`; dropped on another thread, it leaves its builder's
/// thread a plain thread again (`borrowed::release` there cannot reach this thread's state: the
/// rule is that a terminated pool has no borrowed worker). A free `spawn` from the builder's
/// thread then runs in the global pool; it used to go into the dead pool and never run.
#[test]
fn builders_thread_spawns_after_its_pool_was_dropped_elsewhere() {
    common::isolated!(60, || {
        let (pool, exited) = two_threads_with_this_one();
        assert_eq!(pool.install(|| 1 + 1), 2);
        std::thread::spawn(move || drop(pool)).join().unwrap();
        // Worker 1 (the pool's one thread of its own) has exited.
        assert_eq!(exited.recv_timeout(Duration::from_secs(10)), Ok(1));
        let (tx, rx) = mpsc::channel();
        treepool::spawn(move || tx.send(()).unwrap());
        rx.recv_timeout(Duration::from_secs(10)).expect(
            "a spawn from the builder's thread, after its pool was dropped on another \
                 thread, never ran",
        );
    },);
}

/// Passing probe of the credit counters (`Stats::calls_in`, `admitted_on_credit`), which the
/// move of `Registry::admit_on_credit` into `worker::thread` touched: a call from a worker of
/// A into B holds one credit token of B while it runs (two when nested through A again), a
/// plain thread's call none, an in-place scope of B on A's worker one (its credit root).
#[test]
fn credit_counters_follow_calls_between_pools() {
    watchdog(60, || {
        let a = common::pool(1, 1);
        let b = common::pool(2, 2);
        let inside = a.install(|| b.install(|| b.stats()));
        assert_eq!((inside.calls_in, inside.tokens_in_use), (1, 0));
        let nested = a.install(|| b.install(|| a.install(|| b.install(|| b.stats()))));
        assert_eq!(nested.calls_in, 2);
        let in_place = a.install(|| b.in_place_scope(|_| b.stats()));
        assert_eq!((in_place.calls_in, in_place.tokens_in_use), (1, 0));
        let plain = b.install(|| b.stats());
        assert_eq!((plain.calls_in, plain.tokens_in_use), (0, 1));
        common::wait_idle(&b);
        let after = b.stats();
        assert_idle(&after);
        assert_eq!(after.calls_in, 0);
        assert_eq!(after.peak_calls_in, 2);
        assert_eq!(after.admitted_on_credit, 4);
        assert_eq!(after.admitted_from_pool, 1);
    });
}

/// Passing probe of `Policy::OwnItems`' one exception: a consumer waiting by it runs the jobs
/// pinned to its worker, so an item that broadcasts on another worker (waiting for this one)
/// finishes. Without it: the item waits for the consumer, the consumer for the item.
#[test]
fn own_items_consumer_runs_a_broadcast_its_item_waits_for() {
    watchdog(120, || {
        let pool = common::pool(2, 4);
        let broadcasts = AtomicUsize::new(0);
        for _ in 0..50 {
            let out: Vec<u32> = pool.install(|| {
                treepool::scope(|s| {
                    s.map_ordered(0..6u32, |i| {
                        spin_us(500);
                        if treepool::current_thread_index() == Some(1) {
                            let hits = treepool::broadcast(|ctx| ctx.index());
                            assert_eq!(hits, [0, 1]);
                            broadcasts.fetch_add(1, Ordering::Relaxed);
                        }
                        i
                    })
                    .window(3)
                    .collect()
                })
            });
            assert_eq!(out, (0..6).collect::<Vec<_>>());
        }
        println!(
            "broadcasts from items on worker 1: {}",
            broadcasts.into_inner()
        );
        common::wait_idle(&pool);
        assert_idle(&pool.stats());
    });
}

/// Found by the review (it hung at 9d75117, fixed since): `spawn_fifo` (free and
/// `ThreadPool::spawn_fifo`) on the builder's thread of a `use_current_thread` pool, outside a
/// call, must enter the thread as worker 0 as `spawn` does. Admitting its job as a plain thread,
/// it parked for a pool token. On a one-thread pool whose token is held by a job that only
/// this thread can run (an earlier `spawn` from it), nobody ever frees it: a hang. `spawn` in the
/// same place enters as worker 0, runs that job while it waits, and returns.
#[test]
fn builders_thread_spawn_fifo_waits_like_spawn() {
    common::isolated!(30, || builders_thread_spawns_thrice(true));
}

/// The control of `builders_thread_spawn_fifo_waits_like_spawn` (passes): the same with `spawn`.
#[test]
fn builders_thread_spawn_waits_as_worker_0() {
    common::isolated!(30, || builders_thread_spawns_thrice(false));
}

fn builders_thread_spawns_thrice(fifo: bool) {
    let pool = treepool::ThreadPoolBuilder::new()
        .num_threads(1)
        .max_inflight(1)
        .use_current_thread()
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let (tx1, tx2, tx3) = (tx.clone(), tx.clone(), tx);
    // Admitted on the one token; runs when the builder's thread next calls in.
    treepool::spawn(move || tx1.send(1).unwrap());
    // Waits for the token as worker 0, running the job above meanwhile.
    treepool::spawn(move || tx2.send(2).unwrap());
    let third = move || tx3.send(3).unwrap();
    if fifo {
        // Hangs: parks as a plain thread for the token the job of `spawn(2)` holds.
        pool.spawn_fifo(third);
    } else {
        pool.spawn(third);
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 3 && Instant::now() < deadline {
        pool.install(treepool::yield_now);
        got.extend(rx.try_iter());
    }
    got.sort_unstable();
    assert_eq!(got, [1, 2, 3]);
}

/// Passing probe of `build_scoped` with `use_current_thread`: the calling thread is worker 0
/// inside `with_pool`, the scoped threads the others; when `build_scoped` returns the pool was
/// dropped on the calling thread, which is a plain thread again.
#[test]
fn build_scoped_with_the_current_thread_releases_it() {
    common::isolated!(60, || {
        let started = AtomicUsize::new(0);
        let sum = treepool::ThreadPoolBuilder::new()
            .num_threads(3)
            .max_inflight(2)
            .use_current_thread()
            .build_scoped(
                |thread| {
                    started.fetch_add(1, Ordering::SeqCst);
                    thread.run()
                },
                |pool| {
                    assert_eq!(treepool::current_thread_index(), Some(0));
                    let (tx, rx) = mpsc::channel();
                    for i in 0..20u64 {
                        let tx = tx.clone();
                        pool.spawn(move || tx.send(i).unwrap());
                    }
                    drop(tx);
                    let joined: u64 = pool.install(|| {
                        let (a, b) = treepool::join(|| 1u64, || 2u64);
                        a + b
                    });
                    joined + rx.iter().sum::<u64>()
                },
            )
            .unwrap();
        assert_eq!(sum, 3 + (0..20).sum::<u64>());
        assert_eq!(
            started.load(Ordering::SeqCst),
            2,
            "the scoped threads: workers 1, 2"
        );
        assert_eq!(treepool::current_thread_index(), None);
        // A plain thread again: free calls go to the global pool.
        let (tx, rx) = mpsc::channel();
        treepool::spawn(move || tx.send(()).unwrap());
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    },);
}

/// A `use_current_thread` pool dropped on another thread while its builder's thread is inside
/// a call, after the pool's other worker has exited: a detached job spawned in that call, still
/// in the thread's own deque when the call returns, runs (the thread drains the terminated pool
/// as it leaves the call, as every worker of a dropped pool drains it before it exits).
#[test]
fn builders_thread_in_a_call_while_its_pool_is_dropped_elsewhere() {
    common::isolated!(60, || {
        let (pool, exited) = two_threads_with_this_one();
        let (tx, rx) = mpsc::channel();
        treepool::scope(move |_| {
            assert_eq!(treepool::current_thread_index(), Some(0));
            std::thread::spawn(move || drop(pool)).join().unwrap();
            assert_eq!(exited.recv_timeout(Duration::from_secs(10)), Ok(1));
            treepool::spawn(move || tx.send(()).unwrap());
        });
        rx.recv_timeout(Duration::from_secs(10)).expect(
            "a spawn of the builder's thread in a call, while its pool was dropped on another \
             thread, never ran",
        );
        assert_eq!(treepool::current_thread_index(), None);
    },);
}

/// The companion of `builders_thread_spawns_after_its_pool_was_dropped_elsewhere`: after its
/// pool was dropped on another thread, the builder's thread is no worker (index `None`), its
/// calls (a `join`, a `scope` with spawns, a `broadcast`) run in the global pool, and it may
/// build a `use_current_thread` pool again.
#[test]
fn builders_thread_calls_after_its_pool_was_dropped_elsewhere() {
    common::isolated!(60, || {
        let (pool, exited) = two_threads_with_this_one();
        std::thread::spawn(move || drop(pool)).join().unwrap();
        assert_eq!(exited.recv_timeout(Duration::from_secs(10)), Ok(1));
        assert_eq!(treepool::current_thread_index(), None);
        assert_eq!(treepool::join(|| 1, || 2), (1, 2));
        let hits = AtomicUsize::new(0);
        treepool::scope(|s| {
            for _ in 0..10 {
                s.spawn(|_| {
                    hits.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(hits.into_inner(), 10);
        let global: Vec<usize> = (0..treepool::current_num_threads()).collect();
        assert_eq!(treepool::broadcast(|ctx| ctx.index()), global);
        let again = treepool::ThreadPoolBuilder::new()
            .num_threads(2)
            .use_current_thread()
            .build()
            .expect("the thread is no worker any more");
        assert_eq!(treepool::current_thread_index(), Some(0));
        drop(again);
        assert_eq!(treepool::current_thread_index(), None);
    },);
}
