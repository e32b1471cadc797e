//! Deep spawn trees run to the end and never overflow a worker's stack (issue 17).
//!
//! A thread that waits (for a spawn's admission, a `join` half, a scope's end) runs other jobs
//! above its waiting frame, and those can wait and help in turn, so a thread's nesting follows
//! the depth of the spawn tree. Before the fix a chain of 100,000 spawns on one token, or a
//! work-queue program such as rayon-demo's TSP, aborted the process with "has overflowed its
//! stack". Now every job starts with at least half of its worker's stack free, on a new
//! heap-allocated segment where the stack it would start on has less (`Stats::stack_segments`).
//!
//! An overflow aborts the process: nothing to catch. So every case runs in a child process of its
//! own (this binary re-executed with `--exact <test>` and `TREEPOOL_DEEP_CHILD=<config>`), one
//! per pool configuration (`threads/cap`, `default` for the default cap), under a watchdog in
//! the child and a deadline in the parent, which kills it. The parent reports every
//! configuration that failed, with the child's output (its last `deep:` line names the case that
//! was running). Each case checks that every job ran exactly once, B1 and B2 (sampled every
//! millisecond while it runs, and on the peaks), and that the pool is idle afterwards (B4);
//! where one thread and one token force the tree's levels to stay in flight, it checks that the
//! tree really went that deep (`peak_depth`) and that jobs started on new segments.
//!
//! `random_deep_trees_run_to_the_end` runs `TREEPOOL_DEEP_TREES` random trees (default
//! [`DEFAULT_TREES`]) per configuration from the seed `TREEPOOL_DEEP_SEED` (decimal; tree `i`
//! has seed `base + i`). Each tree prints its seed before it starts, so a failure, an abort
//! included, names it; rerun it on every configuration with
//!
//! ```text
//! TREEPOOL_DEEP_SEED=<seed> TREEPOOL_DEEP_TREES=1 cargo test --test deep_trees random
//! ```
//!
//! Sizes: the issue's (100,000 links, 200,000 queue jobs, 100,000 detached levels) in release
//! builds; builds with debug assertions (plain `cargo test`, and the release builds with debug
//! assertions of the chaos and AddressSanitizer runs) run smaller trees, each still many times
//! deeper than what a 2 MiB worker stack held before the fix (see [`scaled`]).

use crate::common;
use crate::common::{
    assert_bounds, assert_idle, assert_peak_bounds, child_outcome, spin_until, wait_idle, watchdog,
    Rng,
};

#[allow(dead_code)]
mod tsp {
    use treepool as pl;
    include!("../common/tsp.rs");
}

use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use treepool::{Scope, Stats, ThreadPool};

/// Set in the child processes: the configuration the child runs, as [`Config`] displays it.
const CHILD_ENV: &str = "TREEPOOL_DEEP_CHILD";
/// How long one configuration of one test may take in its child, in seconds (the child's
/// watchdog; the parent kills the child 10 s later).
const CHILD_SECS: u64 = 120;

/// A pool configuration: threads and tokens (`None`: the default cap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Config {
    threads: usize,
    cap: Option<usize>,
}

/// The configurations of the issue's shapes: one thread and one token (which forces every level
/// of a chain to stay in flight), two threads with the default cap, four threads with a small and
/// a large cap.
const SHAPE_CONFIGS: [Config; 4] = [
    Config::new(1, Some(1)),
    Config::new(2, None),
    Config::new(4, Some(2)),
    Config::new(4, Some(16)),
];

/// The configurations of the random trees: those of the shapes, and two threads on one token.
const RANDOM_CONFIGS: [Config; 5] = [
    Config::new(1, Some(1)),
    Config::new(2, Some(1)),
    Config::new(2, None),
    Config::new(4, Some(2)),
    Config::new(4, Some(16)),
];

impl Config {
    const fn new(threads: usize, cap: Option<usize>) -> Self {
        Config { threads, cap }
    }

    /// One thread, one token: a chain's levels must all stay in flight on that thread.
    fn forced(self) -> bool {
        self.threads == 1 && self.cap == Some(1)
    }

    fn build(self) -> ThreadPool {
        let builder = treepool::ThreadPoolBuilder::new().num_threads(self.threads);
        match self.cap {
            Some(cap) => builder.max_inflight(cap),
            None => builder,
        }
        .build()
        .expect("build a pool")
    }

    fn parse(text: &str) -> Config {
        let parsed = text.split_once('/').and_then(|(threads, cap)| {
            let cap = match cap {
                "default" => None,
                cap => Some(cap.parse().ok()?),
            };
            Some(Config::new(threads.parse().ok()?, cap))
        });
        parsed.unwrap_or_else(|| panic!("{CHILD_ENV}={text:?} is no configuration"))
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cap {
            Some(cap) => write!(f, "{}/{cap}", self.threads),
            None => write!(f, "{}/default", self.threads),
        }
    }
}

/// `release` in release builds; with debug assertions (larger frames, slower code) `debug`,
/// which must still be many times what a worker's 2 MiB stack held before the fix. Measured on
/// the code before the fix at one thread and one token, the largest sizes that ran were, in
/// debug and in release builds: 766 and 9,335 links of the spawn-first chain, 1,400 and 12,996
/// queue jobs, 772 and 9,335 detached levels, 1,265 and 8,699 jobs of the 38-city TSP; one more
/// link (or a few more jobs) aborted. In debug builds a level of these trees takes about 5 KiB
/// of stack.
fn scaled(release: usize, debug: usize) -> usize {
    if cfg!(debug_assertions) {
        debug
    } else {
        release
    }
}

/// In a child (`CHILD_ENV` set): runs `case` on the child's configuration under a watchdog. In
/// the parent: runs the test `name` in one child per configuration of `configs` and fails, with
/// each failing child's report, if any of them did not pass.
fn in_children(name: String, configs: &'static [Config], case: fn(Config)) {
    if let Ok(config) = std::env::var(CHILD_ENV) {
        let config = Config::parse(&config);
        return watchdog(CHILD_SECS, move || case(config));
    }
    let parent_secs = (CHILD_SECS + 15) * configs.len() as u64;
    watchdog(parent_secs, move || {
        let mut failures = Vec::new();
        for config in configs {
            match child_outcome(&name, CHILD_ENV, &config.to_string(), CHILD_SECS + 10) {
                // libtest starts the first line with "test <name> ... ".
                Ok(stdout) => stdout
                    .lines()
                    .filter_map(|line| line.find("deep: ").map(|at| &line[at..]))
                    .for_each(|line| println!("{line}")),
                Err(report) => failures.push(format!("=== configuration {config}: {report}")),
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} configurations failed:\n{}",
            failures.len(),
            configs.len(),
            failures.join("\n")
        );
    });
}

/// Sets its flag when dropped, also while unwinding.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `f` while a sampler thread asserts B1 and B2 on `pool.stats()` every millisecond (a
/// failed assertion fails the test once `f` has returned), then asserts them on the peaks.
/// Returns `f`'s result, the stats afterwards and the time `f` took.
fn sampled<R: Send>(pool: &ThreadPool, f: impl FnOnce() -> R + Send) -> (R, Stats, Duration) {
    let cap = pool.max_inflight();
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let result = std::thread::scope(|threads| {
        threads.spawn(|| {
            while !done.load(Ordering::Acquire) {
                assert_bounds(&pool.stats(), cap);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let _done = SetOnDrop(&done);
        f()
    });
    let elapsed = start.elapsed();
    let stats = pool.stats();
    assert_peak_bounds(&stats, cap);
    (result, stats, elapsed)
}

/// Prints what a case did, for the parent to pass on (`--nocapture` shows it).
fn report(case: &str, config: Config, stats: &Stats, elapsed: Duration) {
    println!(
        "deep: {case} at {config}: {:.0} ms, peak_depth {}, stack_segments {}, peak_inflight {}, \
         admission_waits {}, steals {}",
        elapsed.as_secs_f64() * 1e3,
        stats.peak_depth,
        stats.stack_segments,
        stats.peak_inflight,
        stats.admission_waits,
        stats.steals
    );
}

/// Where one thread and one token force the levels of a chain `depth` long to stay in flight,
/// asserts that the tree went that deep (`peak_depth` within a few levels of `depth`) and that
/// jobs started on stack segments: the case did what it is there to test.
fn assert_forced_depth(config: Config, stats: &Stats, depth: usize) {
    if !config.forced() {
        return;
    }
    assert!(
        (depth..=depth + 2).contains(&stats.peak_depth),
        "at {config} the tree should be {depth} levels deep: {stats:?}"
    );
    assert!(
        stats.stack_segments > 0,
        "{depth} levels at {config} started no job on a new segment: {stats:?}"
    );
}

// ---- The spawn-first chain --------------------------------------------------------------------

/// Links in the spawn-first chain.
fn chain_links() -> usize {
    scaled(100_000, 20_000)
}

/// What the spawn-first chain counts.
#[derive(Default)]
struct Chain {
    links: AtomicUsize,
    leaves: AtomicUsize,
}

/// A link spawns the rest of the chain first, then a leaf: at one token the leaf's spawn waits
/// for admission while the rest of the chain holds the token's loan, and helps by running it.
fn link<'s>(s: &Scope<'s>, links: usize, chain: &'s Chain) {
    if links == 0 {
        return;
    }
    s.spawn(move |s| {
        chain.links.fetch_add(1, Ordering::Relaxed);
        link(s, links - 1, chain)
    });
    s.spawn(move |_| {
        chain.leaves.fetch_add(1, Ordering::Relaxed);
    });
}

fn spawn_first_chain_case(config: Config) {
    let links = chain_links();
    println!("deep: spawn-first chain of {links} links at {config}");
    let pool = config.build();
    let chain = Chain::default();
    let ((), stats, elapsed) = sampled(&pool, || pool.scope(|s| link(s, links, &chain)));
    report("spawn-first chain", config, &stats, elapsed);
    assert_eq!(chain.links.load(Ordering::Relaxed), links, "links run");
    assert_eq!(chain.leaves.load(Ordering::Relaxed), links, "leaves run");
    assert_idle(&stats);
    // The scope's body is level 1, the last link level `links + 1`.
    assert_forced_depth(config, &stats, links + 1);
}

/// The spawn-first chain of the issue (`s.spawn(rest); s.spawn(leaf)`, 100,000 links; 20,000 in
/// debug builds) runs to the end at 1 thread / cap 1 (every link stays in flight: `peak_depth`
/// is the chain's length and jobs start on new segments), 2 threads / default cap, and 4 threads
/// with caps 2 and 16: every link and leaf runs once, B1 and B2 hold, and the pool is idle after.
#[test]
fn spawn_first_chain_runs_to_the_end() {
    in_children(common::test_name!(), &SHAPE_CONFIGS, spawn_first_chain_case);
}

// ---- The work queue ---------------------------------------------------------------------------

/// Jobs the work queue spawns.
fn queue_jobs() -> usize {
    scaled(200_000, 40_000)
}

/// A work-queue program (the shape of rayon-demo's TSP): a shared priority queue of items.
struct Queue {
    heap: Mutex<BinaryHeap<u64>>,
    /// Jobs spawned so far (at most `limit`).
    spawned: AtomicUsize,
    /// Calls of `work` that ran: the scope's body and every spawned job.
    ran: AtomicUsize,
    limit: usize,
}

/// Takes the best item of the queue (not necessarily the one its spawner pushed for it), then
/// pushes three and spawns one job for each, until `limit` jobs have been spawned.
fn work<'s>(s: &Scope<'s>, queue: &'s Queue) {
    queue.ran.fetch_add(1, Ordering::Relaxed);
    let item = queue.heap.lock().unwrap().pop().expect("one item per job");
    for k in 1..=3u64 {
        let counted = queue
            .spawned
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < queue.limit).then_some(n + 1)
            });
        if counted.is_err() {
            return;
        }
        let child = item.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(k) >> 1;
        queue.heap.lock().unwrap().push(child);
        s.spawn(move |s| work(s, queue));
    }
}

fn work_queue_case(config: Config) {
    let limit = queue_jobs();
    println!("deep: work queue of {limit} jobs at {config}");
    let pool = config.build();
    let queue = Queue {
        heap: Mutex::new(BinaryHeap::from([1u64])),
        spawned: AtomicUsize::new(0),
        ran: AtomicUsize::new(0),
        limit,
    };
    let ((), stats, elapsed) = sampled(&pool, || pool.scope(|s| work(s, &queue)));
    report("work queue", config, &stats, elapsed);
    assert_eq!(queue.spawned.load(Ordering::Relaxed), limit, "jobs spawned");
    assert_eq!(queue.ran.load(Ordering::Relaxed), limit + 1, "jobs run");
    assert!(queue.heap.lock().unwrap().is_empty(), "items left");
    assert_idle(&stats);
    // Each job's first spawn takes its token's loan, and the second one (counted before it
    // waits) waits and runs the first on its thread: at one token every level below the root
    // costs two of the `limit` spawns.
    assert_forced_depth(config, &stats, limit / 2 + 1);
}

/// The work queue of the issue (each job pops the best item of a shared `BinaryHeap`, pushes 3
/// and spawns 3; 200,000 jobs, 40,000 in debug builds) runs to the end at 1 thread / cap 1
/// (where it goes one level deeper per two spawns, `peak_depth` half the job count, and starts
/// jobs on new segments), 2 threads / default cap, and 4 threads with caps 2 and 16: every job
/// runs once and takes one item, B1 and B2 hold, and the pool is idle after.
#[test]
fn work_queue_runs_to_the_end() {
    in_children(common::test_name!(), &SHAPE_CONFIGS, work_queue_case);
}

// ---- The detached chain -----------------------------------------------------------------------

/// Levels of the detached chain.
fn detached_levels() -> usize {
    scaled(100_000, 20_000)
}

/// What the detached chain counts.
#[derive(Default)]
struct Detached {
    links: AtomicUsize,
    sides: AtomicUsize,
}

/// A detached link spawns the rest of the chain, then a side job (`treepool::spawn` on a worker
/// is `pool.spawn` on its pool: a child of the current job); the last link reports on `done`.
fn detached_link(levels: usize, counts: Arc<Detached>, done: mpsc::Sender<()>) {
    counts.links.fetch_add(1, Ordering::Relaxed);
    if levels == 0 {
        done.send(()).expect("the test waits for the chain's end");
        return;
    }
    let rest = counts.clone();
    treepool::spawn(move || detached_link(levels - 1, rest, done));
    treepool::spawn(move || {
        counts.sides.fetch_add(1, Ordering::Relaxed);
    });
}

fn detached_chain_case(config: Config) {
    let levels = detached_levels();
    println!("deep: detached chain of {levels} levels at {config}");
    let pool = config.build();
    let counts = Arc::new(Detached::default());
    let ((), stats, elapsed) = sampled(&pool, || {
        let (done, ended) = mpsc::channel();
        let root = counts.clone();
        pool.spawn(move || detached_link(levels, root, done));
        ended.recv().expect("the chain's end");
        spin_until(|| counts.sides.load(Ordering::Relaxed) >= levels);
        wait_idle(&pool);
    });
    report("detached chain", config, &stats, elapsed);
    assert_eq!(
        counts.links.load(Ordering::Relaxed),
        levels + 1,
        "links run"
    );
    assert_eq!(
        counts.sides.load(Ordering::Relaxed),
        levels,
        "side jobs run"
    );
    assert_idle(&stats);
    assert_forced_depth(config, &stats, levels + 1);
}

/// The detached chain of the issue (`pool.spawn(rest); pool.spawn(side)`, 100,000 deep; 20,000
/// in debug builds) runs to the end at 1 thread / cap 1 (every level stays in flight, jobs start
/// on new segments), 2 threads / default cap, and 4 threads with caps 2 and 16: every link and
/// side job runs once, B1 and B2 hold, and the pool becomes idle.
#[test]
fn detached_chain_runs_to_the_end() {
    in_children(common::test_name!(), &SHAPE_CONFIGS, detached_chain_case);
}

// ---- Random deep trees ------------------------------------------------------------------------

/// Random trees per configuration when `TREEPOOL_DEEP_TREES` is not set.
const DEFAULT_TREES: u64 = 4;
/// The seed of the first tree when `TREEPOOL_DEEP_SEED` is not set.
const DEFAULT_SEED: u64 = 17_000;

/// A decimal environment variable, or `default` if it is not set.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |text| {
        let text = text.trim().replace('_', "");
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a decimal number"))
    })
}

/// A stateless mixer (splitmix64's finaliser): a link's decisions and its child's state.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How a link spawns the rest of its tree's spine.
#[derive(Clone, Copy, Debug)]
enum Next {
    /// `s.spawn` in the link's scope (a new nested scope if the link is a detached job).
    Scoped,
    /// `treepool::spawn`: a detached child of the link's job.
    Detached,
    /// A new scope (`treepool::scope`) inside the link, which spawns the rest in it and waits.
    Nested,
    /// `join(spawn the rest, leaf)`: the spawn inside `a`.
    JoinFirst,
    /// `join(leaf, spawn the rest)`: the spawn inside `b`, which may be stolen.
    JoinSecond,
}

/// A leaf that a link adds beside its spine.
#[derive(Clone, Copy, Debug)]
enum Side {
    /// Spawned in the link's scope (detached if the link is a detached job).
    Scoped,
    /// Spawned detached.
    Detached,
    /// Run inline by the link.
    Inline,
    /// Two leaves joined (`join(leaf, leaf)`).
    Join,
}

const NEXTS: [Next; 5] = [
    Next::Scoped,
    Next::Detached,
    Next::Nested,
    Next::JoinFirst,
    Next::JoinSecond,
];
const SIDES: [Side; 4] = [Side::Scoped, Side::Detached, Side::Inline, Side::Join];

/// A tree's mix of shapes, drawn from its seed: how often a link spawns the rest first, and the
/// weights of the ways to spawn it and of the side leaves.
#[derive(Clone, Debug)]
struct Mix {
    /// Links that spawn the rest of the spine before their sides, out of 256.
    first: u64,
    next: [u64; 5],
    side: [u64; 4],
    /// The fewest side leaves a link adds.
    min_sides: u64,
    /// The most side leaves a link adds (at most 2).
    max_sides: u64,
}

/// What one link does, a function of its state alone, so the tree is the same however it runs.
struct Plan {
    first: bool,
    next: Next,
    sides: [Side; 2],
    side_count: usize,
}

/// The index drawn from `weights` by `r`.
fn pick(weights: &[u64], r: u64) -> usize {
    let mut x = r % weights.iter().sum::<u64>();
    for (i, &w) in weights.iter().enumerate() {
        if x < w {
            return i;
        }
        x -= w;
    }
    unreachable!("x < the sum of the weights")
}

impl Mix {
    /// The mix of the tree with seed `seed`, whose family is `seed % 4`: 0, every link spawns
    /// the rest first in its scope, then one or two spawned leaves (the deepest shape at one
    /// token: each leaf's spawn waits and runs the rest on its thread); 1, any mix of ways to
    /// spawn the rest, half the links spawn-first; 2, any mix, any share of spawn-first links; 3,
    /// one way to spawn the rest, drawn from the five, any share of spawn-first links. Side leaves
    /// are any mix in families 1–3.
    fn random(seed: u64, rng: &mut Rng) -> Mix {
        let mut weights = |n: usize| -> Vec<u64> {
            let mut w: Vec<u64> = (0..n).map(|_| rng.range(0, 4)).collect();
            if w.iter().all(|&w| w == 0) {
                w[0] = 1;
            }
            w
        };
        let (next, side) = (weights(5), weights(4));
        let mut mix = Mix {
            first: [0, 128, 224, 256][rng.range(0, 3) as usize],
            next: next.try_into().expect("5 weights"),
            side: side.try_into().expect("4 weights"),
            min_sides: 0,
            max_sides: rng.range(0, 2),
        };
        match seed % 4 {
            0 => {
                (mix.first, mix.next) = (256, [1, 0, 0, 0, 0]);
                (mix.min_sides, mix.max_sides) = (1, rng.range(1, 2));
                mix.side = [rng.range(0, 4), rng.range(1, 4), 0, 0];
            }
            1 => mix.first = 128,
            2 => {}
            _ => {
                mix.next = [0; 5];
                mix.next[rng.range(0, 4) as usize] = 1;
            }
        }
        mix
    }

    /// Every link spawns the rest first in its scope, then spawns a leaf: at one token the leaf's
    /// spawn waits and runs the rest, so every level nests on one thread.
    fn forces_depth(&self) -> bool {
        let spawned_sides_only = self.side[2] == 0 && self.side[3] == 0;
        self.first == 256
            && self.next == [1, 0, 0, 0, 0]
            && self.min_sides > 0
            && spawned_sides_only
    }

    fn plan(&self, state: u64) -> Plan {
        let mut h = state;
        let mut draw = || {
            h = splitmix(h);
            h
        };
        let first = draw() % 256 < self.first;
        let next = NEXTS[pick(&self.next, draw())];
        let spread = self.max_sides - self.min_sides + 1;
        let side_count = (self.min_sides + draw() % spread) as usize;
        let sides = [(); 2].map(|()| SIDES[pick(&self.side, draw())]);
        Plan {
            first,
            next,
            sides,
            side_count,
        }
    }

    /// The nodes (links and leaves) of the tree whose spine of `links` links starts at `state`,
    /// counted without running it.
    fn nodes(&self, mut state: u64, links: u64) -> u64 {
        let mut nodes = 0;
        for left in (1..=links).rev() {
            let plan = self.plan(state);
            nodes += 1;
            for side in &plan.sides[..plan.side_count] {
                nodes += if let Side::Join = side { 2 } else { 1 };
            }
            if left > 1 && matches!(plan.next, Next::JoinFirst | Next::JoinSecond) {
                nodes += 1;
            }
            state = child_state(state);
        }
        nodes
    }
}

/// The state of a link's successor on the spine.
fn child_state(state: u64) -> u64 {
    splitmix(state ^ 0x5EED_CAFE)
}

/// A random tree in progress.
struct Tree {
    mix: Mix,
    /// Links and leaves that ran.
    nodes: AtomicU64,
}

fn leaf(tree: &Tree) {
    tree.nodes.fetch_add(1, Ordering::Relaxed);
}

/// A link of the spine, `left` links from its end, in the scope `s` (`None`: a detached job).
fn tree_link<'s>(s: Option<&Scope<'s>>, tree: &Arc<Tree>, state: u64, left: u64) {
    tree.nodes.fetch_add(1, Ordering::Relaxed);
    let plan = tree.mix.plan(state);
    if plan.first {
        rest(s, tree, plan.next, state, left);
    }
    for &side in &plan.sides[..plan.side_count] {
        side_leaf(s, tree, side);
    }
    if !plan.first {
        rest(s, tree, plan.next, state, left);
    }
}

/// Spawns the rest of the spine after the link `left` links from its end, the `next` way.
fn rest<'s>(s: Option<&Scope<'s>>, tree: &Arc<Tree>, next: Next, state: u64, left: u64) {
    if left <= 1 {
        return;
    }
    let (child, left) = (child_state(state), left - 1);
    match (next, s) {
        (Next::Scoped, Some(s)) => {
            let tree = tree.clone();
            s.spawn(move |s| tree_link(Some(s), &tree, child, left));
        }
        (Next::Scoped, None) | (Next::Nested, _) => treepool::scope(|s| {
            let tree = tree.clone();
            s.spawn(move |s| tree_link(Some(s), &tree, child, left));
        }),
        (Next::Detached, _) => {
            let tree = tree.clone();
            treepool::spawn(move || tree_link(None, &tree, child, left));
        }
        (Next::JoinFirst, _) => {
            treepool::join(
                || rest(s, tree, Next::Scoped, state, left + 1),
                || leaf(tree),
            );
        }
        (Next::JoinSecond, _) => {
            treepool::join(
                || leaf(tree),
                || rest(s, tree, Next::Scoped, state, left + 1),
            );
        }
    }
}

fn side_leaf<'s>(s: Option<&Scope<'s>>, tree: &Arc<Tree>, side: Side) {
    match (side, s) {
        (Side::Scoped, Some(s)) => {
            let tree = tree.clone();
            s.spawn(move |_| leaf(&tree));
        }
        (Side::Scoped, None) | (Side::Detached, _) => {
            let tree = tree.clone();
            treepool::spawn(move || leaf(&tree));
        }
        (Side::Inline, _) => leaf(tree),
        (Side::Join, _) => {
            treepool::join(|| leaf(tree), || leaf(tree));
        }
    }
}

fn random_trees_case(config: Config) {
    let base = env_u64("TREEPOOL_DEEP_SEED", DEFAULT_SEED);
    let trees = env_u64("TREEPOOL_DEEP_TREES", DEFAULT_TREES);
    let (lo, hi) = (
        scaled(10_000, 10_000) as u64,
        scaled(100_000, 25_000) as u64,
    );
    for seed in base..base + trees {
        let mut rng = Rng::new(splitmix(seed));
        let mix = Mix::random(seed, &mut rng);
        let links = rng.range(lo, hi);
        let root = rng.next();
        let expected = mix.nodes(root, links);
        // Printed first: an abort has no panic message to name the tree.
        println!(
            "deep: tree seed {seed} at {config}: {links} links, {expected} nodes, {mix:?} \
             (rerun: TREEPOOL_DEEP_SEED={seed} TREEPOOL_DEEP_TREES=1 cargo test --test \
             deep_trees random)"
        );
        let pool = config.build();
        let tree = Arc::new(Tree {
            mix,
            nodes: AtomicU64::new(0),
        });
        let ((), stats, elapsed) = sampled(&pool, || {
            pool.scope(|s| tree_link(Some(s), &tree, root, links));
            // Detached parts may still run: wait for every node, then for the pool.
            spin_until(|| tree.nodes.load(Ordering::Relaxed) >= expected);
            wait_idle(&pool);
        });
        report(&format!("tree seed {seed}"), config, &stats, elapsed);
        assert_eq!(
            tree.nodes.load(Ordering::Relaxed),
            expected,
            "nodes run, tree seed {seed} at {config}"
        );
        assert_idle(&stats);
        if tree.mix.forces_depth() {
            // The last link's side leaves are one level deeper.
            assert_forced_depth(config, &stats, links as usize);
        }
    }
}

/// Random deep trees (`TREEPOOL_DEEP_TREES` per configuration, default 4, from
/// `TREEPOOL_DEEP_SEED`): spines of 10,000–100,000 links (10,000–25,000 in debug builds) that
/// mix spawn-first and spawn-last links, scoped and detached spawns, nested scopes, joins inside
/// links (the rest of the spine spawned in either half) and side leaves, each tree's mix drawn
/// from its seed, at 1 thread / cap 1, 2 threads with caps 1 and default, and 4 threads with
/// caps 2 and 16. Every tree runs to the end: the nodes that ran equal the nodes it has, counted
/// without running it; B1 and B2 hold; the pool is idle after. A tree whose links all spawn the
/// rest first in their scope (every fourth seed) is as deep as its spine at 1 thread / cap 1,
/// and starts jobs on new segments there.
#[test]
fn random_deep_trees_run_to_the_end() {
    in_children(common::test_name!(), &RANDOM_CONFIGS, random_trees_case);
}

// ---- rayon-demo's TSP -------------------------------------------------------------------------

/// The length of a shortest tour of `cities` (from city 0 back to it), by Held and Karp's
/// dynamic program over the subsets of the other cities: a sequential reference for the solver.
fn shortest_tour(cities: &tsp::Cities) -> u64 {
    let m = cities.count() - 1; // cities 1..=m, bit i-1 of a subset for city i
    let full = 1usize << m;
    // best[subset * m + last]: the shortest path from city 0 through `subset`, ending at `last`.
    let mut best = vec![u64::MAX; full * m];
    for last in 0..m {
        best[(1 << last) * m + last] = cities.d(0, last + 1);
    }
    for subset in 1..full {
        for last in (0..m).filter(|&l| subset & (1 << l) != 0) {
            let here = best[subset * m + last];
            if here == u64::MAX {
                continue;
            }
            for next in (0..m).filter(|&n| subset & (1 << n) == 0) {
                let slot = &mut best[(subset | 1 << next) * m + next];
                *slot = (*slot).min(here + cities.d(last + 1, next + 1));
            }
        }
    }
    (0..m)
        .map(|last| best[(full - 1) * m + last] + cities.d(last + 1, 0))
        .min()
        .expect("two cities or more")
}

/// Asserts that `tour` visits every city of `cities` once, from city 0 back to it, and is
/// `length` long.
fn assert_tour(cities: &tsp::Cities, tour: &[usize], length: u64) {
    let n = cities.count();
    assert_eq!(tour.len(), n + 1, "a tour of {n} cities: {tour:?}");
    assert_eq!(
        (tour[0], tour[n]),
        (0, 0),
        "from city 0 back to it: {tour:?}"
    );
    let mut visited = tour[..n].to_vec();
    visited.sort_unstable();
    assert!(visited.iter().copied().eq(0..n), "each city once: {tour:?}");
    let walked: u64 = tour.windows(2).map(|w| cities.d(w[0], w[1])).sum();
    assert_eq!(walked, length, "the tour's length: {tour:?}");
}

/// Solves `cities` on `pool` (with a job budget if given); asserts that every job ran once and
/// took one partial tour, that the tour found (if any: see `Solver::solve`) is valid, and that
/// the pool is idle after. Returns the tour's length, the jobs spawned, the pool's stats and
/// the time the search took.
fn solve_on(
    pool: &ThreadPool,
    cities: &tsp::Cities,
    seq_threshold: usize,
    budget: Option<usize>,
) -> (Option<u64>, usize, Stats, Duration) {
    let solver = tsp::Solver::new(cities, seq_threshold);
    let solver = match budget {
        Some(jobs) => solver.with_budget(jobs),
        None => solver,
    };
    let (found, stats, elapsed) = sampled(pool, || pool.install(|| solver.solve()));
    let jobs = solver.jobs.load(Ordering::Relaxed);
    assert_eq!(solver.steps.load(Ordering::Relaxed), jobs + 1, "steps run");
    assert_eq!(solver.pending(), 0, "partial tours left in the queue");
    if let Some((length, tour)) = &found {
        assert_tour(cities, tour, *length);
    }
    assert_idle(&stats);
    (found.map(|(length, _)| length), jobs, stats, elapsed)
}

/// The small instances: (cities, seed of their coordinates).
const SMALL_TSP: [(usize, u64); 3] = [(10, 1), (10, 38), (11, 2024)];

fn tsp_small_case(config: Config) {
    for (n, seed) in SMALL_TSP {
        let cities = tsp::Cities::random(n, seed);
        let optimal = shortest_tour(&cities);
        println!("deep: tsp {n} cities (seed {seed}) at {config}: optimal {optimal}");
        let pool = config.build();
        let (length, jobs, stats, elapsed) = solve_on(&pool, &cities, 4, None);
        report(
            &format!("tsp {n} cities, {jobs} jobs"),
            config,
            &stats,
            elapsed,
        );
        assert_eq!(
            length,
            Some(optimal),
            "{n} cities (seed {seed}) at {config}: the solver's tour is not a shortest one"
        );
    }
}

/// The TSP port (rayon-demo's branch and bound: each job takes the best partial tour from a
/// shared priority queue and spawns one job per extension of it) finds a shortest tour of three
/// small random instances (10 and 11 cities, `seq_threshold` 4), equal to a sequential
/// Held–Karp solve, at 1 thread / cap 1, 2 threads / default cap and 4 threads with caps 2 and
/// 16; every job runs once and takes one partial tour, B1 and B2 hold, the pool is idle after.
#[test]
fn tsp_small_instances_find_a_shortest_tour() {
    in_children(common::test_name!(), &SHAPE_CONFIGS, tsp_small_case);
}

/// Jobs the 38-city search may spawn.
fn tsp_budget() -> usize {
    scaled(50_000, 10_000)
}

fn tsp_38_case(config: Config) {
    let budget = tsp_budget();
    println!("deep: tsp 38 cities, budget {budget} jobs, at {config}");
    let cities = tsp::Cities::random(38, 38);
    let pool = config.build();
    let (length, jobs, stats, elapsed) = solve_on(&pool, &cities, 10, Some(budget));
    report(
        &format!("tsp 38 cities, {jobs} jobs, best tour found {length:?}"),
        config,
        &stats,
        elapsed,
    );
    assert_eq!(jobs, budget, "the search was cut short by its budget");
    // As in the work queue, each level below the root costs two spawns at one token.
    assert_forced_depth(config, &stats, budget / 2 + 1);
}

/// The TSP port on 38 random cities (the size of rayon-demo's dj38 input, on which the pool
/// aborted within 50 ms before the fix), cut short after 50,000 jobs (10,000 in debug builds),
/// runs to the end at 1 thread / cap 1 (one level deeper per two spawns: `peak_depth` is half
/// the job count, and jobs start on new segments) and at 2 threads / default cap; every job runs
/// once, the tour found (if the budget let it complete one) is valid, B1 and B2 hold, the pool
/// is idle after.
#[test]
fn tsp_38_cities_runs_to_the_end() {
    const CONFIGS: [Config; 2] = [Config::new(1, Some(1)), Config::new(2, None)];
    in_children(common::test_name!(), &CONFIGS, tsp_38_case);
}
