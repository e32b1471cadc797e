//! Shared helpers for the treepool benchmark suite (issue 4).
//!
//! Every bench binary includes this module with `#[macro_use] mod common;`. It holds:
//!
//! * the environment knobs (`TREEPOOL_BENCH_THREADS`, `TREEPOOL_BENCH_CAP`,
//!   `TREEPOOL_BENCH_CAPS`, `TREEPOOL_BENCH_QUICK`, `TREEPOOL_BENCH_MEM_RUNS`),
//! * pool construction (a treepool, a rayon and a chili pool of the same size),
//! * the `for_both_pools!` macro, which writes a workload once and instantiates it for
//!   `treepool` (module `tp`) and `rayon` (module `ry`); chili's `join` takes a `&mut Scope`,
//!   so its workloads are written on their own (module `ch` in the binaries that measure it),
//! * `shapes`: spawn shapes written once for both pools (issue 27's, the deep chains and the
//!   fan-outs), used by several binaries and by `examples/callgrind_shapes.rs`,
//! * `timed`, the loop timed inside one `install` (or one chili scope) per criterion sample,
//! * a counting `GlobalAlloc` wrapper around `System` (installed only by the binaries that
//!   report heap figures), one that counts allocation calls only while asked to (the fan-out
//!   bench's allocations per spawn), a peak counter for "items alive", and
//! * JSON-lines output under `<target>/treepool-bench/` for the figures criterion can't record.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs::{self, File};
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;

/// Writes the items once and expands them in two modules: `tp` (with `pl` = `treepool`) and
/// `ry` (with `pl` = `rayon`). Inside, use `pl::join`, `pl::scope`, `s.spawn(|_| ..)`: the two
/// crates share these signatures, so one body serves both pools. The modules are `pub` so that
/// a module below the crate root (`shapes`) can share its items.
macro_rules! for_both_pools {
    ($($body:tt)*) => {
        #[allow(unused_imports)]
        pub mod tp {
            use super::*;
            use treepool as pl;
            $($body)*
        }
        #[allow(unused_imports)]
        pub mod ry {
            use super::*;
            use rayon as pl;
            $($body)*
        }
    };
}

// After the macro, which it uses.
pub mod shapes;

// ---------------------------------------------------------------------------------------------
// Environment knobs

fn env_str(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `available_parallelism()`, 1 if unknown.
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Worker threads for both pools: `TREEPOOL_BENCH_THREADS` (a number, or `max`/`0` for
/// `available_parallelism()`); default 2.
pub fn bench_threads() -> usize {
    match env_str("TREEPOOL_BENCH_THREADS").as_deref() {
        None => 2,
        Some("max") | Some("0") | Some("avail") => available(),
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("TREEPOOL_BENCH_THREADS={v:?} is not a number or `max`")),
    }
}

/// `max_inflight` for the treepool under test: `TREEPOOL_BENCH_CAP`, else the builder's default.
pub fn bench_cap() -> Option<usize> {
    env_str("TREEPOOL_BENCH_CAP").map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("TREEPOOL_BENCH_CAP={v:?} is not a number"))
    })
}

/// Caps for the `max_inflight` sweep: `TREEPOOL_BENCH_CAPS=1,2,4,8,16,64`; empty = no sweep.
pub fn sweep_caps() -> Vec<usize> {
    env_str("TREEPOOL_BENCH_CAPS")
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse()
                        .unwrap_or_else(|_| panic!("TREEPOOL_BENCH_CAPS: {s:?} is not a number"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `TREEPOOL_BENCH_QUICK=1`: short warm-up and measurement, for smoke runs.
pub fn quick() -> bool {
    matches!(env_str("TREEPOOL_BENCH_QUICK").as_deref(), Some(v) if v != "0")
}

/// How the bench binary was invoked (criterion's own flags, read here too).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// `--list`: print names only; no memory runs.
    List,
    /// `--test`, or run by `cargo test --benches`: everything once.
    Test,
    /// `cargo bench`.
    Bench,
}

pub fn mode() -> Mode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |f: &str| args.iter().any(|a| a == f);
    if has("--list") {
        Mode::List
    } else if has("--test") || !has("--bench") {
        Mode::Test
    } else {
        Mode::Bench
    }
}

/// Untimed repetitions for the memory/time figures written as JSON (median time, max peaks):
/// `TREEPOOL_BENCH_MEM_RUNS`, default 3 (1 in test mode).
pub fn mem_runs() -> usize {
    if mode() == Mode::Test {
        return 1;
    }
    env_str("TREEPOOL_BENCH_MEM_RUNS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// `TREEPOOL_BENCH_CALLGRIND=<workload>:<runs>`: instead of the benchmarks, run one workload
/// `runs` times on a one-thread treepool pool (after one warm-up run) and exit, for
/// `valgrind --tool=callgrind`: half the difference between `runs` = 2 and `runs` = 0 is the
/// instructions of one run, startup and warm-up subtracted. Returns the request, if any.
pub fn callgrind_request() -> Option<(String, usize)> {
    let spec = env_str("TREEPOOL_BENCH_CALLGRIND")?;
    let (workload, runs) = spec
        .split_once(':')
        .and_then(|(w, r)| Some((w.to_owned(), r.parse().ok()?)))
        .unwrap_or_else(|| panic!("TREEPOOL_BENCH_CALLGRIND={spec:?}: expected <workload>:<runs>"));
    Some((workload, runs))
}

/// Runs `run` once, then `runs` times (see [`callgrind_request`]).
pub fn callgrind_runs(runs: usize, run: impl Fn()) {
    run();
    for _ in 0..runs {
        run();
    }
}

/// The criterion driver: CLI flags win; `TREEPOOL_BENCH_QUICK` shortens the defaults.
pub fn criterion() -> Criterion {
    criterion_from(Criterion::default())
}

/// [`criterion`] with `base`'s settings as the defaults (`TREEPOOL_BENCH_QUICK` and the CLI
/// flags still win): a binary's own times and sample size, where group settings would
/// override both.
pub fn criterion_from(base: Criterion) -> Criterion {
    let c = if quick() {
        base.warm_up_time(Duration::from_millis(50))
            .measurement_time(Duration::from_millis(200))
            .sample_size(10)
    } else {
        base
    };
    c.configure_from_args()
}

/// Group name carrying the thread count, e.g. `fib_25_t2`, so both settings keep their own
/// `target/criterion/<group>/` directory.
pub fn group_name(workload: &str, threads: usize) -> String {
    format!("{workload}_t{threads}")
}

// ---------------------------------------------------------------------------------------------
// Pools

pub fn treepool_pool(threads: usize, cap: Option<usize>) -> treepool::ThreadPool {
    let b = treepool::ThreadPoolBuilder::new().num_threads(threads);
    let b = match cap {
        Some(c) => b.max_inflight(c),
        None => b,
    };
    b.build().expect("build treepool pool")
}

pub fn rayon_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("build rayon pool")
}

/// A chili pool with `threads` threads running joins, the same count as the treepool and rayon
/// pools: chili's `Config::thread_count` counts the thread that holds the `Scope`
/// (`ThreadPool::with_config` spawns `thread_count - 1` workers; the caller runs the scope's
/// work itself and workers take the jobs it shares). chili also spawns one heartbeat thread,
/// which runs no jobs: it sleeps and sets each scope's heartbeat flag every
/// `heartbeat_interval` (default 100 µs, kept here).
pub fn chili_pool(threads: usize) -> chili::ThreadPool {
    chili::ThreadPool::with_config(chili::Config {
        thread_count: Some(NonZeroUsize::new(threads).expect("chili pool of 0 threads")),
        ..chili::Config::default()
    })
}

/// Runs `f` `iters` times and returns the elapsed time; called inside one `install` (or with one
/// chili scope) per criterion sample (`iter_custom`), so the install round-trip is not timed.
pub fn timed(iters: u64, mut f: impl FnMut() -> u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(f());
    }
    start.elapsed()
}

// ---------------------------------------------------------------------------------------------
// Counting allocator

static HEAP_CURRENT: AtomicUsize = AtomicUsize::new(0);
static HEAP_PEAK: AtomicUsize = AtomicUsize::new(0);

/// `System`, counting live heap bytes and their peak. Install it in a bench binary with
/// `#[global_allocator] static ALLOC: common::CountingAlloc = common::CountingAlloc;`.
pub struct CountingAlloc;

impl CountingAlloc {
    #[inline]
    fn added(size: usize) {
        let now = HEAP_CURRENT.fetch_add(size, Ordering::Relaxed) + size;
        HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
    }
    #[inline]
    fn removed(size: usize) {
        HEAP_CURRENT.fetch_sub(size, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the counters have no effect on memory.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            Self::added(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            Self::added(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        Self::removed(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            Self::removed(layout.size());
            Self::added(new_size);
        }
        p
    }
}

static CALLS_COUNTED: AtomicBool = AtomicBool::new(false);
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// `System`, counting allocation calls between [`count_allocations`] and its result, and
/// nothing otherwise: a timed run pays one relaxed load per allocation. Install it with
/// `#[global_allocator] static ALLOC: common::CallCountingAlloc = common::CallCountingAlloc;`.
pub struct CallCountingAlloc;

// SAFETY: every call is forwarded to `System` unchanged; the counter has no effect on memory.
unsafe impl GlobalAlloc for CallCountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a tally, read once the measured work has returned (its jobs' latches order
        // every allocation they made before that); the flag only needs to be seen eventually.
        if CALLS_COUNTED.load(Ordering::Relaxed) {
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
    }
}

/// The allocation calls `f` makes, on any thread (where `CallCountingAlloc` is the global
/// allocator; one measurement at a time).
pub fn count_allocations(f: impl FnOnce()) -> usize {
    // Relaxed: the tally's reset and read are ordered around `f` by the flag's SeqCst stores.
    CALLS.store(0, Ordering::Relaxed);
    CALLS_COUNTED.store(true, Ordering::SeqCst);
    f();
    CALLS_COUNTED.store(false, Ordering::SeqCst);
    CALLS.load(Ordering::Relaxed)
}

/// Live heap bytes (meaningful only where `CountingAlloc` is the global allocator).
pub fn heap_current() -> usize {
    HEAP_CURRENT.load(Ordering::Relaxed)
}

/// Resets the heap peak to the current level and returns that level (the baseline).
pub fn heap_reset_peak() -> usize {
    let now = HEAP_CURRENT.load(Ordering::Relaxed);
    HEAP_PEAK.store(now, Ordering::Relaxed);
    now
}

pub fn heap_peak() -> usize {
    HEAP_PEAK.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------
// Items alive

/// A live count with its maximum, e.g. file buffers alive.
pub struct PeakCounter {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl PeakCounter {
    pub const fn new() -> Self {
        Self {
            now: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }
    pub fn inc(&self) {
        let n = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(n, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.now.fetch_sub(1, Ordering::Relaxed);
    }
    pub fn now(&self) -> usize {
        self.now.load(Ordering::Relaxed)
    }
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
    pub fn reset(&self) {
        self.now.store(0, Ordering::Relaxed);
        self.peak.store(0, Ordering::Relaxed);
    }
}

/// A buffer of `len` bytes, allocated and filled on creation (the "read"), counted in `counter`
/// from allocation until drop.
pub struct Buffer {
    pub data: Vec<u8>,
    counter: &'static PeakCounter,
}

impl Buffer {
    pub fn read(seed: usize, len: usize, counter: &'static PeakCounter) -> Self {
        let mut data = Vec::with_capacity(len);
        counter.inc();
        let s = seed as u8;
        data.extend((0..len).map(|j| (j as u8).wrapping_mul(31) ^ s));
        Self { data, counter }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.data = Vec::new(); // free first, then count it gone
        self.counter.dec();
    }
}

/// A cheap, order-dependent checksum (one multiply per 8 bytes, not vectorisable away).
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap());
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------------------------
// Untimed figures

/// Time and peaks of an untimed run (or the median/max over several).
#[derive(Clone, Copy, Debug, Default)]
pub struct MemFigures {
    pub runs: usize,
    pub median_ns: u128,
    pub peak_alive: usize,
    pub peak_heap_bytes: usize,
}

/// Runs `f` `runs` times; resets `alive` and the heap peak before each. Heap bytes are above the
/// level before the run. Returns the median time and the largest peaks.
pub fn measure(runs: usize, alive: &PeakCounter, mut f: impl FnMut()) -> MemFigures {
    let mut times = Vec::with_capacity(runs);
    let mut out = MemFigures {
        runs,
        ..MemFigures::default()
    };
    for _ in 0..runs {
        alive.reset();
        let base = heap_reset_peak();
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_nanos());
        assert_eq!(alive.now(), 0, "an item outlived the run");
        out.peak_alive = out.peak_alive.max(alive.peak());
        out.peak_heap_bytes = out.peak_heap_bytes.max(heap_peak().saturating_sub(base));
    }
    times.sort_unstable();
    out.median_ns = times[times.len() / 2];
    out
}

/// The directory for JSON figures: `$CARGO_TARGET_DIR/treepool-bench`, else
/// `<crate>/target/treepool-bench`.
pub fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("treepool-bench")
}

/// A JSON value, rendered by hand (no serde in the dev-dependencies).
pub enum J {
    S(String),
    U(u128),
    F(f64),
    B(bool),
    Null,
}

impl J {
    fn render(&self) -> String {
        match self {
            J::S(s) => {
                let mut o = String::from("\"");
                for ch in s.chars() {
                    match ch {
                        '"' => o.push_str("\\\""),
                        '\\' => o.push_str("\\\\"),
                        c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                        c => o.push(c),
                    }
                }
                o.push('"');
                o
            }
            J::U(n) => n.to_string(),
            J::F(x) if x.is_finite() => format!("{x}"),
            J::F(_) | J::Null => "null".into(),
            J::B(b) => b.to_string(),
        }
    }
}

/// JSON-lines file `<out_dir>/<workload>_t<threads>.json`, truncated when opened.
pub struct JsonLines {
    file: File,
    pub path: PathBuf,
}

impl JsonLines {
    /// In test mode (`--test`, `cargo test --benches`) the file goes to `treepool-bench/test/`
    /// instead, so a test run never overwrites the figures of a benchmark run.
    pub fn create(workload: &str, threads: usize) -> Self {
        let dir = match mode() {
            Mode::Test => out_dir().join("test"),
            _ => out_dir(),
        };
        fs::create_dir_all(&dir).expect("create target/treepool-bench");
        let path = dir.join(format!("{workload}_t{threads}.json"));
        let file = File::create(&path).expect("create figures file");
        Self { file, path }
    }

    pub fn line(&mut self, fields: &[(&str, J)]) {
        self.raw_line(fields, "{}");
    }

    /// A line of `fields` followed by the fields of `object`, a JSON object another process
    /// wrote (the deep-tree bench's memory children).
    pub fn raw_line(&mut self, fields: &[(&str, J)], object: &str) {
        let mut body: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{}:{}", J::S((*k).to_owned()).render(), v.render()))
            .collect();
        let inner = object
            .trim()
            .trim_start_matches('{')
            .trim_end_matches('}')
            .trim();
        if !inner.is_empty() {
            body.push(inner.to_owned());
        }
        writeln!(self.file, "{{{}}}", body.join(",")).expect("write figures");
    }
}

/// The standard fields of one memory row.
pub fn mem_fields(
    workload: &str,
    pool: &str,
    kind: &str,
    threads: usize,
    cap: Option<usize>,
    m: &MemFigures,
) -> Vec<(&'static str, J)> {
    vec![
        ("workload", J::S(workload.to_owned())),
        ("pool", J::S(pool.to_owned())),
        ("kind", J::S(kind.to_owned())),
        ("threads", J::U(threads as u128)),
        ("max_inflight", cap.map_or(J::Null, |c| J::U(c as u128))),
        ("runs", J::U(m.runs as u128)),
        ("median_ns", J::U(m.median_ns)),
        ("peak_alive", J::U(m.peak_alive as u128)),
        ("peak_heap_bytes", J::U(m.peak_heap_bytes as u128)),
    ]
}

/// Appends treepool's stats to a row.
pub fn stats_fields(fields: &mut Vec<(&'static str, J)>, s: &treepool::Stats) {
    fields.push(("peak_inflight", J::U(s.peak_inflight as u128)));
    fields.push(("peak_executing", J::U(s.peak_executing as u128)));
    fields.push(("peak_depth", J::U(s.peak_depth as u128)));
    fields.push(("admitted_on_loan", J::U(u128::from(s.admitted_on_loan))));
    fields.push(("admitted_from_pool", J::U(u128::from(s.admitted_from_pool))));
    fields.push(("admission_waits", J::U(u128::from(s.admission_waits))));
    fields.push(("steals", J::U(u128::from(s.steals))));
}

pub fn print_mem(workload: &str, pool: &str, cap: Option<usize>, m: &MemFigures) {
    let cap = cap.map_or_else(|| "-".to_owned(), |c| c.to_string());
    eprintln!(
        "[{workload}] {pool:>8} cap {cap:>4}: {:>9.3} ms, peak alive {:>5}, peak heap {:>8.1} KiB",
        m.median_ns as f64 / 1e6,
        m.peak_alive,
        m.peak_heap_bytes as f64 / 1024.0
    );
}

/// Writes `<workload>_t<threads>.json` for an allocation-heavy workload: one untimed `main`
/// row per pool (treepool at `TREEPOOL_BENCH_CAP` or its default cap, rayon), then one `sweep`
/// row per cap in `TREEPOOL_BENCH_CAPS`. Each row: median time over `mem_runs()` runs, peak
/// items alive (`alive`), peak heap bytes above the pre-run level, and treepool's stats.
/// Fresh pools are built for these runs, so the stats' peaks belong to them alone.
pub fn write_figures(
    workload: &str,
    threads: usize,
    alive: &PeakCounter,
    tp_run: impl Fn(&treepool::ThreadPool),
    ry_run: impl Fn(&rayon::ThreadPool),
) {
    if mode() == Mode::List {
        return;
    }
    let mut out = JsonLines::create(workload, threads);
    let runs = mem_runs();

    let mut tp_row = |kind: &str, cap: Option<usize>| {
        let pool = treepool_pool(threads, cap);
        let cap = Some(pool.max_inflight());
        let m = measure(runs, alive, || tp_run(&pool));
        print_mem(workload, "treepool", cap, &m);
        let mut f = mem_fields(workload, "treepool", kind, threads, cap, &m);
        stats_fields(&mut f, &pool.stats());
        out.line(&f);
    };
    tp_row("main", bench_cap());
    for cap in sweep_caps() {
        tp_row("sweep", Some(cap));
    }

    let pool = rayon_pool(threads);
    let m = measure(runs, alive, || ry_run(&pool));
    print_mem(workload, "rayon", None, &m);
    out.line(&mem_fields(workload, "rayon", "main", threads, None, &m));
    eprintln!("[{workload}] figures written to {}", out.path.display());
}
