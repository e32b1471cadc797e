//! `dirhash`: hash every regular file under a directory tree with BLAKE3, in
//! parallel on a [`treepool`] thread pool, printing exactly what
//! `find PATH -type f -print0 | LC_ALL=C sort -z | xargs -0 b3sum` prints.
//!
//! # Usage
//!
//! ```text
//! cargo run --release --example dirhash -- [OPTIONS] [PATH]...
//!
//!   PATH                  files or directories to hash (default: `.`)
//!   --threads N           worker threads (0 = one per core; default: one per
//!                         core but at least 16, see "Cold cache")
//!   --max-inflight N      admission tokens of the pool (default: the pool's
//!                         default, 4 per thread)
//!   --piece-size BYTES    split granularity and read-buffer size (default 1 MiB;
//!                         suffixes K, M, G are accepted; at least 1024)
//!   --check FILE          verify a b3sum-format list (FILE `-` is stdin), like `b3sum --check`
//!   --progress            progress bar on stderr (files, bytes, rate); the default
//!                         only when stderr is a terminal. `--no-progress` turns it off
//!   --stats               print the pool's Stats and the peak RSS on stderr at the end
//!   --mmap                hash through memory maps instead of `read()`
//! ```
//!
//! Each line of output is `HASH  PATH` (64 lowercase hex digits, two spaces, the
//! path), sorted bytewise by path, so that the output is accepted by
//! `b3sum --check` and by `dirhash --check`.
//!
//! # How it runs in parallel
//!
//! Every directory is a job that lists its entries (and closes the directory
//! again before spawning, so open directory handles are not multiplied by the
//! depth of the tree), then spawns one job per subdirectory and one per regular
//! file with `Scope::spawn`. In a real treepool `spawn` *waits for admission*
//! (backpressure), and nothing here assumes that it returns at once.
//!
//! A file longer than the piece size is split recursively with
//! [`blake3::hazmat::left_subtree_len`], so every piece is a valid BLAKE3
//! subtree. The two halves of every split run under `join`, the pieces are
//! hashed with `HasherExt::set_input_offset` + `finalize_non_root`, and the
//! chaining values are combined with `merge_subtrees_non_root` and, at the top,
//! `merge_subtrees_root`. The result is the same hash as `blake3::hash` of the
//! whole file (the integration tests check that against the crate's own
//! single-threaded hash).
//!
//! The hidden `--engine rayon` runs the very same walker on `rayon::scope` and
//! `rayon::join`, for the speed comparison in `benches/dirhash.sh`.
//!
//! # Cold cache: how it reaches the disk's parallelism
//!
//! A first run over a tree finds the page cache cold, and then a walk is bound
//! by the latency of each `open` and `read`, not by hashing: a worker that
//! waits for the disk hashes nothing, so the reads in flight are the workers
//! that are not hashing. With one worker per core, a 2-core machine keeps at
//! most two reads in flight and the disk is mostly idle. So, unless `--threads` says
//! otherwise, dirhash runs **one worker per core, but at least 16**
//! (`cli::MIN_DEFAULT_THREADS`; `TREEPOOL_NUM_THREADS` still overrides it), and
//! the pool's default cap of 4 tokens per thread. On a machine with 16 cores or
//! more that is the old default; below it, the extra threads cost a warm run
//! nothing measurable (they block or hash; the kernel shares the cores), and
//! they keep up to 16 reads in flight on a cold one.
//!
//! Chosen by measurement on the Rust sysroot (52,073 files, 1.2 GiB) on a
//! 2-core shared VM, page cache dropped before every run, medians of 3–5
//! alternating runs (`benches/dirhash.sh` has the full table, with the b3sum
//! pipelines):
//!
//! ```text
//!                                                          cold     warm
//! one thread per core (the old default)                 5.4–6.0 s  0.51–0.64 s
//! --threads 8                                           2.95–3.1 s 0.52 s
//! --threads 16 (the default now)                        2.5–2.8 s  0.54 s
//! --threads 24 / 32                                     2.8 / 3.0 s
//! 2 threads + posix_fadvise(WILLNEED) on every file
//!   of a directory before spawning its jobs             3.0–4.4 s
//! 16 threads + the same hints                           2.5–2.7 s  (no gain)
//! 2 hashing threads + an I/O pool of 16 threads (below) 4.3–5.1 s  0.53 s
//! ```
//!
//! The I/O pool design was: every read first tries `preadv2(RWF_NOWAIT)` on
//! the CPU worker (a warm cache answers at once, no hand-off), and a read that
//! would wait goes to a second treepool pool of 16 threads with `install`,
//! admitted on the caller's credit, while the CPU worker runs other jobs of its
//! pool on top (buffers in flight bounded by the CPU pool's tokens). It kept up
//! to 19 reads in flight (the I/O pool's `peak_calls_in`) and was still slower,
//! most likely because it paid two thread wake-ups per cold file (the I/O
//! thread's and the waiting CPU worker's) on two busy shared cores; moving
//! `open` to the I/O pool as well was slower still (6.3 s). Read-ahead hints
//! gave nothing on top of 16 threads and cost an extra `open` per file when
//! warm. Neither prototype is kept: more threads is the simplest design that
//! wins, so that is the default. Every figure above is from the same session,
//! with other people compiling on the machine, so compare rows, not runs. In
//! the full run of `benches/dirhash.sh` (docs/benchmarks-notes.md) the defaults took
//! 3.1 s cold, 0.34× the b3sum pipeline's 8.7 s and 0.60× the 5.1 s of
//! `xargs -P16 b3sum`, where one thread per core took 6.8 s; warm, 0.61 s,
//! 0.45× the pipeline's 1.31 s (one thread per core: 0.64 s, 0.47×).
//!
//! # Memory
//!
//! Files are read with positional reads (`FileExt::read_at`) into bounded
//! buffers; nothing reads a whole file and nothing is memory mapped unless
//! `--mmap` is given. A job holds at most one buffer of at most `piece_size`
//! bytes, and only while it is reading and hashing one piece; it makes no pool
//! call during that time (no spawn, no join), so it never helps another job
//! while its buffer is live. Buffers are kept per worker thread and reused. So:
//!
//! ```text
//! peak memory ≈ piece_size × min(threads, max_inflight × levels)   (read buffers)
//!             + files × (path length + ~60 bytes)                   (results, sorted at the end)
//!             + the largest directory listing being spawned         (names of one directory)
//!             + a small constant (binary, pool, stacks, progress bar)
//! ```
//!
//! `max_inflight × levels` is the bound the pool itself guarantees for jobs in
//! flight (the treepool contract, invariant B2), so even a job that held its
//! buffer across pool calls would stay within `piece_size × max_inflight ×
//! levels`; with this code the tighter `piece_size × threads` holds. With the
//! defaults on a machine of up to 16 cores (16 threads, `max_inflight` 64,
//! 1 MiB pieces) the read buffers take at most 1 MiB × min(16, 64 × levels) =
//! 16 MiB, so a 192 MB file is hashed well under 100 MB of RSS (the
//! `bounded_rss_192mb_file` test checks it: about 20 MB with the defaults, in
//! a debug build; `--stats` prints this bound for the run). With `--mmap` the mapped
//! pages of the file count toward the RSS as the kernel faults them in (they
//! are page cache, reclaimable, but `ru_maxrss` counts them), so the bound
//! above is for the default `read()` path only.
//!
//! # Output format and escaping (matches b3sum 1.x)
//!
//! The path is printed the way `find PATH -type f` prints it: `PATH` as given,
//! then `/` unless `PATH` already ends with `/`, then the names below it
//! (`find d/` prints `d/x`, `find d//` prints `d//x`, `find .` prints `./x`).
//!
//! b3sum turns the path into text with `Path::to_string_lossy`, then, if that
//! text holds a backslash or a newline, starts the line with a `\` and writes
//! `\` as `\\` and a newline as `\n` in the path. dirhash does exactly the same,
//! so:
//!
//! * names that are not UTF-8 are walked, opened and **sorted as raw bytes**
//!   (`OsStrExt`), exactly like `find -print0 | sort -z`, but **printed** the
//!   way b3sum prints them: each invalid sequence becomes U+FFFD. This keeps
//!   the output byte-identical to the b3sum pipeline. Like b3sum, `--check`
//!   refuses lines whose path holds U+FFFD ("Unicode replacement character in
//!   path"), because such a line cannot name a file unambiguously: files with
//!   such names can be hashed and listed, but not checked by name. (Printing
//!   raw bytes instead would break both byte-identity with b3sum and UTF-8
//!   output, so dirhash does what b3sum does.)
//! * `--check` follows b3sum's format: `PATH: OK`, `PATH: FAILED`, or
//!   `PATH: FAILED (reason)` on stdout with PATH as written in the list (an
//!   escaped line keeps its leading `\`), unparsable lines as `dirhash: reason`
//!   on stderr (b3sum's reasons: `Short line`, `Invalid hex`, ...), and
//!   `dirhash: WARNING: N computed checksum(s) did NOT match` on stderr at the
//!   end when something failed (as b3sum >= 1.4 does); the exit code is then 1.
//!   The listed files are hashed in parallel (one job each) and reported in the
//!   list's order. Two deliberate differences from b3sum: a listed path `-` is
//!   a file named `-`, not stdin, and a line that is not UTF-8 fails on its own
//!   (`Invalid UTF-8 in line`) instead of aborting the whole list. A listed
//!   FIFO or device fails (`not a regular file`) instead of blocking. Listed
//!   paths are opened following symlinks, as b3sum does.
//!
//! # Bad input
//!
//! Symlinks are never followed (as `find -P`): they are not regular files, so
//! they are skipped silently, and a PATH that is a symlink prints nothing, like
//! `find` (spelled `link/`, with a trailing slash, it names the directory and is
//! walked, again like `find`). FIFOs, sockets and devices are skipped without being opened (the
//! type comes from `DirEntry::file_type`/`symlink_metadata`; files are opened
//! with `O_NONBLOCK | O_NOFOLLOW` and checked again with `fstat`, so a file that
//! is swapped for a FIFO mid-walk cannot block either). Unreadable files and
//! directories, files that vanish, and files that shrink while they are read
//! print `dirhash: PATH: reason` on stderr; everything else is still hashed
//! and printed, and the exit code is 1. A file that grows while it is hashed is
//! hashed up to the length it had when it was opened if it was split, and to
//! its end otherwise; a split file that delivers fewer bytes than its size
//! (it shrank, or it is a sysfs-like file) fails with `file shrank while it
//! was being hashed`. A closed stdout (`dirhash | head`) ends the program
//! quietly: no message, and the exit code is what it would have been.
//!
//! # Layout
//!
//! `main.rs` (this file: the shared state and `main`), `cli` (options and
//! defaults), `engine` (the treepool and rayon pools behind one `Spawner`
//! trait), `walk` (directories and `find`'s rules), `hasher` (opening, reading
//! and splitting one file), `output` (b3sum's line format), `check`
//! (`--check`), `report` (progress bar and `--stats`).
mod check;
mod cli;
mod engine;
mod hasher;
mod output;
mod report;
mod walk;

use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use blake3::Hash;
use clap::Parser;
use indicatif::ProgressBar;

use crate::check::run_check;
use crate::cli::Args;
use crate::engine::Pool;
use crate::output::print_results;
use crate::report::{make_progress, print_stats};
use crate::walk::Walk;

const NAME: &str = "dirhash";

struct Ctx {
    piece: u64,
    mmap: bool,
    failed: AtomicBool,
    results: Mutex<Vec<(Vec<u8>, Hash)>>,
    files: AtomicU64,
    bytes: AtomicU64,
    progress: Option<ProgressBar>,
}

impl Ctx {
    fn new(args: &Args, progress: Option<ProgressBar>) -> Ctx {
        Ctx {
            piece: args.piece_size,
            mmap: args.mmap,
            failed: AtomicBool::new(false),
            results: Mutex::new(Vec::new()),
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            progress,
        }
    }

    /// `dirhash: PATH: reason` on stderr (above the progress bar), and exit 1.
    fn error(&self, path: &[u8], err: &io::Error) {
        self.failed.store(true, Ordering::Relaxed);
        let msg = format!("{NAME}: {}: {err}", String::from_utf8_lossy(path));
        self.eprint(&msg);
    }

    fn eprint(&self, msg: &str) {
        let print = || {
            let _ = writeln!(io::stderr().lock(), "{msg}");
        };
        match &self.progress {
            Some(pb) => pb.suspend(print),
            None => print(),
        }
    }

    fn add_bytes(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(pb) = &self.progress {
            pb.inc(n as u64);
        }
    }

    fn file_done(&self) {
        let n = self.files.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(pb) = &self.progress {
            // Cheap enough for every file at first, then every 64th.
            if n < 64 || n % 64 == 0 {
                pb.set_message(format!("{n} files"));
            }
        }
    }

    fn push(&self, path: Vec<u8>, hash: Hash) {
        self.results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((path, hash));
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let pool = match Pool::build(&args) {
        Ok(pool) => pool,
        Err(e) => {
            let _ = writeln!(io::stderr(), "{NAME}: cannot build the thread pool: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ctx = Ctx::new(&args, make_progress(&args));
    let start = Instant::now();

    let written = if let Some(list) = &args.check {
        match run_check(&pool, &ctx, list) {
            Ok(true) => Ok(()),
            Ok(false) => {
                ctx.failed.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(e),
        }
    } else {
        let roots: Vec<Vec<u8>> = if args.paths.is_empty() {
            vec![b".".to_vec()]
        } else {
            args.paths
                .iter()
                .map(|p| p.clone().into_os_string().into_vec())
                .collect()
        };
        pool.run(&ctx, Walk(roots));
        if let Some(pb) = &ctx.progress {
            pb.finish_and_clear();
        }
        let results = std::mem::take(&mut *ctx.results.lock().unwrap_or_else(|e| e.into_inner()));
        print_results(results)
    };
    if let Err(e) = written {
        if e.kind() != io::ErrorKind::BrokenPipe {
            let _ = writeln!(io::stderr(), "{NAME}: writing the output: {e}");
            ctx.failed.store(true, Ordering::Relaxed);
        }
    }
    if args.stats {
        print_stats(&pool, &ctx, &args, start.elapsed());
    }
    if ctx.failed.load(Ordering::Relaxed) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
