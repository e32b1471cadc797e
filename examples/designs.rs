//! Five ways to bound a tree of jobs, on one workload.
//!
//! This is the seed article's `compare.py` ("Five designs compared") redone on Rust threads. The
//! workload has the shape of an indexer: a walk starts `--files` file jobs (default 2,000); each
//! file "reads" its contents (allocates a `Vec<u8>` of `--file-bytes`, default 100,000, and fills
//! it) and then starts `--chunks` chunk jobs (default 2); each chunk checksums its part of the
//! file and then does the slow step, a sleep of `--chunk-us` microseconds (default 1,000) that
//! stands for an embedding call. The cap is `--cap` (default 4).
//!
//! Why a 1 ms sleep: the slow step of an indexer is a call that waits (a model, a network), not
//! CPU, and a sleep keeps the example cheap on a small shared machine. 4,000 chunks of 1 ms under
//! a cap of 4 take about 1 s per design, so the five rows (one of them waits `--stuck-ms` to
//! declare itself stuck) finish in a few seconds in a release build.
//!
//! The designs, one row each:
//!
//! 1. `hold`: one counting semaphore of `cap`, held by every job for its whole run, children
//!    included. It deadlocks as soon as waiting parents hold every permit.
//! 2. `release`: the same semaphore, but a job gives its permit back before it waits for its
//!    children (CocoIndex through 1.0.25). No deadlock, and nothing bounds the files in flight.
//! 3. `per_level`: one semaphore of `cap` per level (walk, files, chunks), each held for the
//!    whole run. Bounded, but only because the number of levels is known in advance.
//! 4. `helping`: rayon's `scope`/`spawn` on a pool of `--threads` threads (default 4, the same
//!    as the cap, so it gets the same parallelism). No admission at all: the cap is ignored, and
//!    a waiting thread runs other jobs instead of blocking.
//! 5. `lend`: treepool with `max_inflight(cap)` on `--threads` threads: a parent lends its token
//!    to one child at a time.
//!
//! Designs 1 to 3 give every job its own OS thread (small stack), joined by its parent. That is
//! what an asyncio task is in the seed: a job that waits blocks only itself. On a fixed pool with
//! blocking waits, designs 2 and 3 would also stall once every pool thread waits for children
//! still queued behind them (the `ThreadPoolExecutor` warning), which would hide the behaviour
//! the table is about. Designs 4 and 5 run on fixed pools whose waiting threads help.
//!
//! A watchdog declares a design `stuck` when it makes no progress for `--stuck-ms` (default
//! 2,000). It then cancels the run: every semaphore wakes its waiters and makes them give up
//! (acquire also has a 60 s timeout of its own as a last resort), jobs that have not started
//! return at once, and the threads are joined. A design that still does not wind down is
//! abandoned and reported as such; the example never hangs.
//!
//! Each row prints the wall time (or `stuck`), the peak number of files in flight (contents
//! allocated and not yet dropped, counted by the workload, not by the pool), the memory those
//! files held, and the peak number of chunks in their slow step at once. The checksums of all
//! finished designs are checked against the expected value.
//!
//! Designs 1 to 3 skip a workload that could need more than 16,384 job threads at once
//! (`files × (1 + chunks)`); run bigger ones with `--designs helping,lend`.
//!
//! ```text
//! cargo run --release --example designs
//! cargo run --release --example designs -- --files 200 --cap 2 --designs hold,lend
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, ValueEnum};
use parking_lot::{Condvar, Mutex};

/// Designs 1 to 3 refuse a workload that could need more job threads than this at once.
const MAX_JOB_THREADS: usize = 16_384;
/// Stack of the per-job OS threads of designs 1 to 3.
const TASK_STACK: usize = 256 * 1024;
/// Last-resort timeout on a semaphore acquire, in case the watchdog never cancels.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a cancelled design gets to wind down before it is abandoned.
const GRACE: Duration = Duration::from_secs(5);

#[derive(Parser, Debug, Clone)]
#[command(
    name = "designs",
    about = "Five ways to bound a tree of jobs (the seed's compare.py on threads)"
)]
struct Args {
    /// File jobs the walk starts.
    #[arg(long, default_value_t = 2000)]
    files: usize,
    /// Bytes each file holds while it is in flight.
    #[arg(
        long,
        default_value_t = 100_000,
        value_parser = clap::value_parser!(u64).range(0..=100_000_000)
    )]
    file_bytes: u64,
    /// Chunk jobs per file.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    chunks: u64,
    /// Length of each chunk's slow step (a sleep), in microseconds.
    #[arg(long, default_value_t = 1000)]
    chunk_us: u64,
    /// The cap: semaphore permits (per level for per_level), or treepool's max_inflight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=4096))]
    cap: u64,
    /// Worker threads of the rayon and treepool pools.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: u64,
    /// A design that makes no progress for this long is reported stuck, in milliseconds.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..))]
    stuck_ms: u64,
    /// Designs to run, comma-separated, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "hold,release,per-level,helping,lend"
    )]
    designs: Vec<Design>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Design {
    Hold,
    Release,
    #[value(alias = "per_level")]
    PerLevel,
    Helping,
    Lend,
}

impl Design {
    fn label(self) -> &'static str {
        match self {
            Design::Hold => "hold",
            Design::Release => "release",
            Design::PerLevel => "per_level",
            Design::Helping => "helping",
            Design::Lend => "lend",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A counting semaphore that can be cancelled.

/// Why an acquire gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GaveUp {
    Cancelled,
    TimedOut,
}

struct Semaphore {
    state: Mutex<SemState>,
    cv: Condvar,
}

struct SemState {
    free: usize,
    cancelled: bool,
}

/// A permit; dropping it gives it back.
struct Permit<'a>(&'a Semaphore);

impl Semaphore {
    fn new(permits: usize) -> Self {
        Semaphore {
            state: Mutex::new(SemState {
                free: permits,
                cancelled: false,
            }),
            cv: Condvar::new(),
        }
    }

    /// Waits for a permit, at most `timeout`; gives up at once if the semaphore is cancelled.
    fn acquire_timeout(&self, timeout: Duration) -> Result<Permit<'_>, GaveUp> {
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock();
        loop {
            if st.cancelled {
                return Err(GaveUp::Cancelled);
            }
            if st.free > 0 {
                st.free -= 1;
                return Ok(Permit(self));
            }
            if self.cv.wait_until(&mut st, deadline).timed_out() && st.free == 0 {
                return Err(if st.cancelled {
                    GaveUp::Cancelled
                } else {
                    GaveUp::TimedOut
                });
            }
        }
    }

    /// Makes every current and future waiter give up.
    fn cancel(&self) {
        self.state.lock().cancelled = true;
        self.cv.notify_all();
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.state.lock().free += 1;
        self.0.cv.notify_one();
    }
}

// ---------------------------------------------------------------------------------------------
// The shared harness: the workload, its counters and cancellation.

/// A current value and its peak.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// One run of the workload: what every design calls, and what the table reads.
struct Workload {
    files: usize,
    file_bytes: usize,
    chunks: usize,
    chunk_work: Duration,
    files_in_flight: Gauge,
    chunks_running: Gauge,
    /// Bumped by every read, chunk and file end; the watchdog watches it.
    progress: AtomicU64,
    checksum: AtomicU64,
    cancelled: AtomicBool,
    /// The first reason the run was cancelled from inside (a timeout, a failed thread spawn).
    failure: Mutex<Option<String>>,
    semaphores: Mutex<Vec<Arc<Semaphore>>>,
}

impl Workload {
    fn new(args: &Args) -> Self {
        Workload {
            files: args.files,
            file_bytes: args.file_bytes as usize,
            chunks: args.chunks as usize,
            chunk_work: Duration::from_micros(args.chunk_us),
            files_in_flight: Gauge::default(),
            chunks_running: Gauge::default(),
            progress: AtomicU64::new(0),
            checksum: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
            failure: Mutex::new(None),
            semaphores: Mutex::new(Vec::new()),
        }
    }

    /// File `i` holds the bytes `offset(i) + j` (mod 256), `j` its position.
    fn offset(i: usize) -> usize {
        i.wrapping_mul(31)
    }

    /// Reads file `i`: allocates and fills its contents. The file is in flight from here
    /// until [`Workload::file_done`].
    fn read(&self, i: usize) -> Vec<u8> {
        self.files_in_flight.enter();
        let o = Self::offset(i);
        let mut text = vec![0u8; self.file_bytes];
        for (j, b) in text.iter_mut().enumerate() {
            *b = o.wrapping_add(j) as u8;
        }
        self.progress.fetch_add(1, Ordering::SeqCst);
        text
    }

    /// The parts of a file that its chunk jobs work on.
    fn parts<'t>(&self, text: &'t [u8]) -> impl Iterator<Item = &'t [u8]> {
        let len = text.len().div_ceil(self.chunks).max(1);
        let mut parts: Vec<&[u8]> = text.chunks(len).collect();
        parts.resize(self.chunks, &[]); // a short file still gets `chunks` jobs
        parts.into_iter()
    }

    /// One chunk job's work: a checksum, then the slow step.
    fn chunk(&self, part: &[u8]) {
        if self.is_cancelled() {
            return;
        }
        self.chunks_running.enter();
        let sum: u64 = part.iter().map(|&b| u64::from(b)).sum();
        thread::sleep(self.chunk_work);
        self.chunks_running.leave();
        self.checksum.fetch_add(sum, Ordering::SeqCst);
        self.progress.fetch_add(1, Ordering::SeqCst);
    }

    /// Drops a file's contents once its chunks are done.
    fn file_done(&self, text: Vec<u8>) {
        drop(text);
        self.files_in_flight.leave();
        self.progress.fetch_add(1, Ordering::SeqCst);
    }

    /// The checksum a complete run must reach.
    fn expected_checksum(&self) -> u64 {
        (0..self.files)
            .map(|i| {
                let o = Self::offset(i) % 256;
                let full = (self.file_bytes / 256) as u64 * (0..256u64).sum::<u64>();
                let rest: u64 = (0..self.file_bytes % 256)
                    .map(|k| ((o + k) % 256) as u64)
                    .sum();
                full + rest
            })
            .sum()
    }

    /// A semaphore that [`Workload::cancel`] reaches.
    fn semaphore(&self, permits: usize) -> Arc<Semaphore> {
        let s = Arc::new(Semaphore::new(permits));
        self.semaphores.lock().push(Arc::clone(&s));
        s
    }

    fn acquire<'s>(&self, sem: &'s Semaphore) -> Option<Permit<'s>> {
        match sem.acquire_timeout(ACQUIRE_TIMEOUT) {
            Ok(p) => Some(p),
            Err(GaveUp::Cancelled) => None,
            Err(GaveUp::TimedOut) => {
                self.fail("a semaphore acquire timed out");
                None
            }
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Stops the run: every semaphore waiter gives up, and no new job starts its work.
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        for s in self.semaphores.lock().iter() {
            s.cancel();
        }
    }

    /// Cancels the run from inside, remembering the first reason.
    fn fail(&self, why: impl Into<String>) {
        self.failure.lock().get_or_insert_with(|| why.into());
        self.cancel();
    }
}

// ---------------------------------------------------------------------------------------------
// Designs 1 to 3: one OS thread per job, semaphores around the jobs.

/// Spawns one job on its own scoped thread.
fn spawn_job<'scope, 'env, F>(ts: &'scope thread::Scope<'scope, 'env>, w: &Workload, f: F)
where
    F: FnOnce() + Send + 'scope,
{
    let spawned = thread::Builder::new()
        .stack_size(TASK_STACK)
        .spawn_scoped(ts, f);
    if let Err(e) = spawned {
        w.fail(format!("could not spawn a job thread: {e}"));
    }
}

/// Runs the tree with a semaphore per level (`levels[0]` walk, `[1]` files, `[2]` chunks; the
/// same one three times for a single cap). With `release_early`, a job gives its permit back
/// before it waits for its children; otherwise it holds it for its whole run.
fn run_semaphores(w: &Workload, levels: [&Semaphore; 3], release_early: bool) {
    let Some(walk_permit) = w.acquire(levels[0]) else {
        return;
    };
    let walk_permit = (!release_early).then_some(walk_permit);
    thread::scope(|ts| {
        for i in 0..w.files {
            if w.is_cancelled() {
                break;
            }
            spawn_job(ts, w, move || {
                let Some(file_permit) = w.acquire(levels[1]) else {
                    return;
                };
                let text = w.read(i);
                let file_permit = (!release_early).then_some(file_permit);
                thread::scope(|ts| {
                    for part in w.parts(&text) {
                        spawn_job(ts, w, move || {
                            if let Some(_chunk_permit) = w.acquire(levels[2]) {
                                w.chunk(part);
                            }
                        });
                    }
                });
                w.file_done(text);
                drop(file_permit);
            });
        }
    });
    drop(walk_permit);
}

// ---------------------------------------------------------------------------------------------
// Designs 4 and 5: the same tree with `scope`/`spawn` on a pool whose waiting threads help.

/// The walk written once for any rayon-shaped API (`$rt::scope`, `Scope::spawn`).
macro_rules! walk_on {
    ($rt:ident, $w:expr) => {{
        let w: &Workload = $w;
        $rt::scope(|s| {
            for i in 0..w.files {
                if w.is_cancelled() {
                    break;
                }
                s.spawn(move |_| {
                    let text = w.read(i);
                    $rt::scope(|s| {
                        for part in w.parts(&text) {
                            s.spawn(move |_| w.chunk(part));
                        }
                    });
                    w.file_done(text);
                });
            }
        })
    }};
}

/// Runs one design to completion (or until cancelled). Returns treepool's stats for `lend`.
fn run_design(design: Design, w: &Workload, args: &Args) -> Option<treepool::Stats> {
    let cap = args.cap as usize;
    let threads = args.threads as usize;
    match design {
        Design::Hold | Design::Release => {
            let s = w.semaphore(cap);
            run_semaphores(w, [&s, &s, &s], design == Design::Release);
        }
        Design::PerLevel => {
            let (a, b, c) = (w.semaphore(cap), w.semaphore(cap), w.semaphore(cap));
            run_semaphores(w, [&a, &b, &c], false);
        }
        Design::Helping => match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
            Ok(pool) => pool.install(|| walk_on!(rayon, w)),
            Err(e) => w.fail(format!("rayon pool: {e}")),
        },
        Design::Lend => {
            let built = treepool::ThreadPoolBuilder::new()
                .num_threads(threads)
                .max_inflight(cap)
                .build();
            match built {
                Ok(pool) => {
                    pool.install(|| walk_on!(treepool, w));
                    return Some(pool.stats());
                }
                Err(e) => w.fail(format!("treepool pool: {e}")),
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// The table.

enum Outcome {
    Finished(Duration),
    /// Stuck, failed or skipped: what to print instead of a time.
    Stuck(String),
}

struct Row {
    design: Design,
    outcome: Outcome,
    peak_files: usize,
    peak_chunks: usize,
    checksum_ok: Option<bool>,
    stats: Option<treepool::Stats>,
}

impl Row {
    fn not_run(design: Design, why: String) -> Row {
        Row {
            design,
            outcome: Outcome::Stuck(why),
            peak_files: 0,
            peak_chunks: 0,
            checksum_ok: None,
            stats: None,
        }
    }
}

/// Runs a design on its own thread under the watchdog.
fn measure(design: Design, args: &Args) -> Row {
    let w = Arc::new(Workload::new(args));
    let job_threads = 1 + args.files.saturating_mul(1 + w.chunks);
    if matches!(design, Design::Hold | Design::Release | Design::PerLevel)
        && job_threads > MAX_JOB_THREADS
    {
        return Row::not_run(design, format!("skipped (> {MAX_JOB_THREADS} threads)"));
    }
    let stuck_after = Duration::from_millis(args.stuck_ms);
    let start = Instant::now();
    let runner = {
        let (w, args) = (Arc::clone(&w), args.clone());
        thread::Builder::new()
            .name(format!("design-{}", design.label()))
            .spawn(move || run_design(design, &w, &args))
    };
    let runner = match runner {
        Ok(h) => h,
        Err(e) => return Row::not_run(design, format!("error: could not start: {e}")),
    };

    let (mut seen, mut last_change) = (w.progress.load(Ordering::SeqCst), Instant::now());
    let mut cancelled_at = None;
    let mut elapsed = Duration::ZERO;
    let mut abandoned = false;
    while !runner.is_finished() {
        thread::sleep(Duration::from_millis(10));
        let now = w.progress.load(Ordering::SeqCst);
        if now != seen {
            (seen, last_change) = (now, Instant::now());
        }
        match cancelled_at {
            None if last_change.elapsed() >= stuck_after => {
                elapsed = start.elapsed();
                cancelled_at = Some(Instant::now());
                w.cancel();
            }
            Some(t) if t.elapsed() >= GRACE => {
                abandoned = true; // leave the thread behind; the process exit ends it
                break;
            }
            _ => {}
        }
    }
    if cancelled_at.is_none() {
        elapsed = start.elapsed();
    }
    let stats = if abandoned {
        None
    } else {
        runner.join().unwrap_or_else(|_| {
            w.fail("a job panicked");
            None
        })
    };

    let failure = w.failure.lock().clone();
    let outcome = match (cancelled_at, failure, abandoned) {
        (None, None, _) => Outcome::Finished(elapsed),
        (_, Some(why), _) => Outcome::Stuck(format!("error: {why}")),
        (Some(_), None, false) => {
            Outcome::Stuck(format!("stuck ({} s no progress)", secs(stuck_after)))
        }
        (Some(_), None, true) => Outcome::Stuck(format!(
            "stuck ({} s no progress, abandoned)",
            secs(stuck_after)
        )),
    };
    let checksum_ok = matches!(outcome, Outcome::Finished(_))
        .then(|| w.checksum.load(Ordering::SeqCst) == w.expected_checksum());
    Row {
        design,
        outcome,
        peak_files: w.files_in_flight.peak(),
        peak_chunks: w.chunks_running.peak(),
        checksum_ok,
        stats,
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

fn main() {
    let args = Args::parse();
    if args.chunk_us.saturating_mul(2) >= args.stuck_ms.saturating_mul(1000) {
        Args::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--stuck-ms must be more than twice the chunk time (--chunk-us), \
                 or a slow chunk would read as no progress",
            )
            .exit();
    }
    println!(
        "{} files x {} bytes, {} chunks per file of {} us, cap {}, {} pool threads \
         (rayon, treepool), stuck after {} ms without progress",
        args.files,
        args.file_bytes,
        args.chunks,
        args.chunk_us,
        args.cap,
        args.threads,
        args.stuck_ms
    );
    let mut bad_checksum = false;
    let mut notes = Vec::new();
    for &design in &args.designs {
        let row = measure(design, &args);
        let result = match &row.outcome {
            Outcome::Finished(t) => format!("{:.2} s", t.as_secs_f64()),
            Outcome::Stuck(s) => s.clone(),
        };
        println!(
            "{:>9}: {:>24}, peak files in flight {:>4} ({:>5.1} MB), peak chunks running {}",
            row.design.label(),
            result,
            row.peak_files,
            row.peak_files as f64 * args.file_bytes as f64 / 1e6,
            row.peak_chunks
        );
        if row.checksum_ok == Some(false) {
            bad_checksum = true;
            notes.push(format!("{}: WRONG CHECKSUM", row.design.label()));
        }
        if let Some(s) = row.stats {
            notes.push(format!(
                "{}: treepool stats: peak_inflight {}, peak_executing {}, peak_depth {}, \
                 admitted_on_loan {}, admitted_from_pool {}, admission_waits {}, steals {}",
                row.design.label(),
                s.peak_inflight,
                s.peak_executing,
                s.peak_depth,
                s.admitted_on_loan,
                s.admitted_from_pool,
                s.admission_waits,
                s.steals
            ));
        }
    }
    for n in &notes {
        println!("{n}");
    }
    if bad_checksum {
        std::process::exit(1);
    }
}
