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
//!   --threads N           worker threads (0 = one per core, the default)
//!   --max-inflight N      admission tokens of the pool (default: the pool's default)
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
//! defaults (1 MiB pieces) a 192 MB file is hashed in well under 100 MB of RSS
//! (the `bounded_rss_192mb_file` test checks it). With `--mmap` the mapped
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
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufWriter, IsTerminal, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode,
};
use blake3::Hash;
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

const NAME: &str = "dirhash";
/// Files shorter than this are read rather than mapped even with `--mmap`
/// (b3sum's threshold: mapping small files is not worth it).
const MMAP_MIN: u64 = 16 * 1024;

#[derive(Parser, Debug)]
#[command(
    name = NAME,
    version,
    about = "Hash every regular file under PATHs with BLAKE3, in b3sum's format, in parallel",
    after_help = "Output is byte-identical to `find PATH -type f -print0 | LC_ALL=C sort -z | xargs -0 b3sum`."
)]
struct Args {
    /// Files or directories to hash [default: .]
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,

    /// Worker threads (0 = one per core)
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,

    /// Admission tokens of the pool: jobs in flight stay <= N x levels
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_inflight: Option<u64>,

    /// Split granularity and per-job read buffer, in bytes (K, M, G suffixes ok)
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_size)]
    piece_size: u64,

    /// Verify a b3sum-format checksum list (`-` = stdin) instead of hashing PATHs
    #[arg(long, value_name = "FILE", conflicts_with = "paths")]
    check: Option<PathBuf>,

    /// Show a progress bar on stderr (default: only when stderr is a terminal)
    #[arg(long, overrides_with = "no_progress")]
    progress: bool,

    /// Never show a progress bar
    #[arg(long, overrides_with = "progress")]
    no_progress: bool,

    /// Print the pool's Stats and the peak RSS on stderr at the end
    #[arg(long)]
    stats: bool,

    /// Hash through memory maps instead of read() (RSS then includes mapped pages)
    #[arg(long)]
    mmap: bool,

    /// Which pool runs the walk (for benchmarks)
    #[arg(long, value_enum, default_value_t = Engine::Treepool, hide = true)]
    engine: Engine,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Engine {
    Treepool,
    Rayon,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|e| format!("invalid size {s:?}: {e}"))?;
    let n = n
        .checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))?;
    if n < blake3::CHUNK_LEN as u64 {
        return Err(format!("piece size must be at least {}", blake3::CHUNK_LEN));
    }
    if n > isize::MAX as u64 / 2 {
        return Err(format!("piece size {s:?} is too large"));
    }
    Ok(n)
}

// ---------------------------------------------------------------------------
// Engines: the walker is written once against this trait and runs on either
// treepool's or rayon's scope.

trait Spawner<'s>: Sync + Sized {
    fn spawn_job<F: FnOnce(&Self) + Send + 's>(&self, f: F);
    fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send;
}

impl<'s> Spawner<'s> for treepool::Scope<'s> {
    fn spawn_job<F: FnOnce(&Self) + Send + 's>(&self, f: F) {
        self.spawn(f)
    }
    fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        treepool::join(a, b)
    }
}

impl<'s> Spawner<'s> for rayon::Scope<'s> {
    fn spawn_job<F: FnOnce(&Self) + Send + 's>(&self, f: F) {
        self.spawn(f)
    }
    fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        rayon::join(a, b)
    }
}

enum Pool {
    Treepool(treepool::ThreadPool),
    Rayon(rayon::ThreadPool),
}

impl Pool {
    fn build(args: &Args) -> Result<Pool, String> {
        match args.engine {
            Engine::Treepool => {
                let mut b = treepool::ThreadPoolBuilder::new().num_threads(args.threads);
                if let Some(cap) = args.max_inflight {
                    let cap = usize::try_from(cap).map_err(|e| e.to_string())?;
                    b = b.max_inflight(cap);
                }
                b.build().map(Pool::Treepool).map_err(|e| e.to_string())
            }
            Engine::Rayon => rayon::ThreadPoolBuilder::new()
                .num_threads(args.threads)
                .build()
                .map(Pool::Rayon)
                .map_err(|e| e.to_string()),
        }
    }

    /// Runs `jobs` inside a scope of the chosen pool and returns when every
    /// job spawned in it has finished.
    fn run<'a, T: Jobs<'a>>(&self, ctx: &'a Ctx, jobs: T) {
        match self {
            Pool::Treepool(p) => p.scope(|s| jobs.start(s, ctx)),
            Pool::Rayon(p) => p.scope(|s| jobs.start(s, ctx)),
        }
    }
}

/// The work to start in a scope, generic over the engine's scope type.
trait Jobs<'a>: Send {
    fn start<S: Spawner<'a>>(self, s: &S, ctx: &'a Ctx);
}

// ---------------------------------------------------------------------------
// Shared state: results, errors, progress.

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

// ---------------------------------------------------------------------------
// Hashing one file.

thread_local! {
    /// The read buffer of the job running on this thread (see "Memory").
    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's buffer, grown to at least `len` bytes. `f` must
/// not call into the pool (it would not be wrong, only unbounded in memory).
fn with_buf<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            f(&mut buf[..len])
        }
        // Not reachable with the code below (no pool call while borrowed), but
        // a fresh buffer is a safe answer rather than a panic.
        Err(_) => f(&mut vec![0; len]),
    })
}

fn path_of(bytes: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(bytes))
}

/// Where the bytes of a file come from: positional reads, or a memory map.
enum Source<'a> {
    Read(&'a File),
    Map(&'a [u8]),
}

impl Source<'_> {
    /// Calls `f` with exactly the bytes `[off, off + len)`.
    fn with_range<R>(&self, off: u64, len: u64, f: impl FnOnce(&[u8]) -> R) -> io::Result<R> {
        match self {
            Source::Map(map) => {
                let end = off.checked_add(len).filter(|&e| e <= map.len() as u64);
                match end {
                    Some(end) => Ok(f(&map[off as usize..end as usize])),
                    None => Err(shrank()),
                }
            }
            Source::Read(file) => with_buf(len as usize, |buf| {
                let mut done = 0;
                while done < buf.len() {
                    match file.read_at(&mut buf[done..], off + done as u64) {
                        Ok(0) => return Err(shrank()),
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(f(buf))
            }),
        }
    }
}

fn shrank() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "file shrank while it was being hashed",
    )
}

/// Opens a file for hashing without ever blocking (FIFOs) and, when walking,
/// without following a symlink that replaced it. Fails unless it is a regular file.
fn open_regular(path: &Path, follow: bool) -> io::Result<(File, u64)> {
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok((file, meta.len()))
}

/// The BLAKE3 hash of one file, splitting it into subtrees when it is longer
/// than a piece.
fn hash_file<'s, S: Spawner<'s>>(ctx: &Ctx, path: &[u8], follow: bool) -> io::Result<Hash> {
    let (file, len) = open_regular(path_of(path), follow)?;
    if ctx.mmap && len >= MMAP_MIN && len <= isize::MAX as u64 {
        // SAFETY: the map is read-only and private to this call. If another
        // process truncates the file meanwhile, reading the map can fault
        // (SIGBUS); that is the documented risk of `--mmap`, as in b3sum.
        let map = unsafe { memmap2::MmapOptions::new().len(len as usize).map(&file)? };
        return hash_source::<S>(ctx, &Source::Map(&map), len);
    }
    if len <= ctx.piece {
        return hash_small(ctx, &file, len);
    }
    hash_source::<S>(ctx, &Source::Read(&file), len)
}

/// A file that fits in one piece: read it to its end (it may have grown).
fn hash_small(ctx: &Ctx, file: &File, len: u64) -> io::Result<Hash> {
    // One byte more than the size, so that EOF usually shows in the same call.
    let cap = (len + 1).max(64 * 1024).min(ctx.piece) as usize;
    with_buf(cap, |buf| {
        let mut hasher = blake3::Hasher::new();
        let mut off = 0u64;
        loop {
            match file.read_at(buf, off) {
                Ok(0) => return Ok(hasher.finalize()),
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    off += n as u64;
                    ctx.add_bytes(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })
}

fn hash_source<'s, S: Spawner<'s>>(ctx: &Ctx, src: &Source, len: u64) -> io::Result<Hash> {
    if len <= ctx.piece || len <= blake3::CHUNK_LEN as u64 {
        let hash = src.with_range(0, len, blake3::hash)?;
        ctx.add_bytes(len as usize);
        return Ok(hash);
    }
    let left = left_subtree_len(len);
    let (l, r) = S::join(
        || subtree_cv::<S>(ctx, src, 0, left),
        || subtree_cv::<S>(ctx, src, left, len - left),
    );
    Ok(merge_subtrees_root(&l?, &r?, Mode::Hash))
}

/// The chaining value of the subtree `[off, off + len)`: `off` is a multiple of
/// a power of two >= `len` rounded up, as `left_subtree_len` splits guarantee.
fn subtree_cv<'s, S: Spawner<'s>>(
    ctx: &Ctx,
    src: &Source,
    off: u64,
    len: u64,
) -> io::Result<ChainingValue> {
    if len <= ctx.piece || len <= blake3::CHUNK_LEN as u64 {
        let cv = src.with_range(off, len, |bytes| {
            blake3::Hasher::new()
                .set_input_offset(off)
                .update(bytes)
                .finalize_non_root()
        })?;
        ctx.add_bytes(len as usize);
        return Ok(cv);
    }
    let left = left_subtree_len(len);
    let (l, r) = S::join(
        || subtree_cv::<S>(ctx, src, off, left),
        || subtree_cv::<S>(ctx, src, off + left, len - left),
    );
    Ok(merge_subtrees_non_root(&l?, &r?, Mode::Hash))
}

// ---------------------------------------------------------------------------
// The walk.

/// `find`'s way of joining: `d` + `/` + name, but `d/` + name.
fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if !dir.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

struct Walk(Vec<Vec<u8>>);

impl<'a> Jobs<'a> for Walk {
    fn start<S: Spawner<'a>>(self, s: &S, ctx: &'a Ctx) {
        for root in self.0 {
            s.spawn_job(move |s| visit_root(s, ctx, root));
        }
    }
}

fn visit_root<'s, S: Spawner<'s>>(s: &S, ctx: &'s Ctx, path: Vec<u8>) {
    match std::fs::symlink_metadata(path_of(&path)) {
        Err(e) => ctx.error(&path, &e),
        Ok(m) if m.is_dir() => walk_dir(s, ctx, path),
        Ok(m) if m.is_file() => file_job::<S>(ctx, path),
        // A symlink, FIFO, socket or device: `find -P PATH -type f` lists nothing.
        Ok(_) => {}
    }
}

fn file_job<'s, S: Spawner<'s>>(ctx: &Ctx, path: Vec<u8>) {
    match hash_file::<S>(ctx, &path, false) {
        Ok(hash) => {
            ctx.push(path, hash);
            ctx.file_done();
        }
        Err(e) => ctx.error(&path, &e),
    }
}

fn walk_dir<'s, S: Spawner<'s>>(s: &S, ctx: &'s Ctx, dir: Vec<u8>) {
    // List first and close the directory, then spawn: spawning may wait for
    // admission, and an open handle per waiting directory would add up.
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    match std::fs::read_dir(path_of(&dir)) {
        Err(e) => {
            ctx.error(&dir, &e);
            return;
        }
        Ok(entries) => {
            for entry in entries {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        ctx.error(&dir, &e);
                        break;
                    }
                };
                let path = child_path(&dir, entry.file_name().as_bytes());
                match entry.file_type() {
                    Ok(t) if t.is_dir() => dirs.push(path),
                    Ok(t) if t.is_file() => files.push(path),
                    // Symlinks (never followed), FIFOs, sockets, devices: not
                    // listed by `find -type f`, and never opened.
                    Ok(_) => {}
                    Err(e) => ctx.error(&path, &e),
                }
            }
        }
    }
    for path in dirs {
        s.spawn_job(move |s| walk_dir(s, ctx, path));
    }
    for path in files {
        s.spawn_job(move |_: &S| file_job::<S>(ctx, path));
    }
}

// ---------------------------------------------------------------------------
// Output.

/// b3sum's rendering of a path: lossy UTF-8, then `\` -> `\\` and newline ->
/// `\n`, with the line starting with `\` when anything was escaped.
fn escape_path(path: &[u8]) -> (bool, String) {
    let text = String::from_utf8_lossy(path);
    if text.contains(['\\', '\n']) {
        (true, text.replace('\\', "\\\\").replace('\n', "\\n"))
    } else {
        (false, text.into_owned())
    }
}

fn write_line(out: &mut impl Write, path: &[u8], hash: &Hash) -> io::Result<()> {
    let (escaped, text) = escape_path(path);
    if escaped {
        out.write_all(b"\\")?;
    }
    writeln!(out, "{}  {}", hash.to_hex(), text)
}

/// Writes the sorted results; a closed pipe just stops the output.
fn print_results(mut results: Vec<(Vec<u8>, Hash)>) -> io::Result<()> {
    results.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    for (path, hash) in &results {
        write_line(&mut out, path, hash)?;
    }
    out.flush()
}

// ---------------------------------------------------------------------------
// --check

struct CheckLine {
    /// The path as written in the list (with the leading `\` if escaped).
    shown: String,
    path: PathBuf,
    expected: Hash,
}

fn hex_nibble(c: u8) -> Result<u8, String> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err("Invalid hex".into()),
    }
}

fn unescape(path: &str) -> Result<String, String> {
    let mut out = String::with_capacity(path.len());
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            _ => return Err("Invalid backslash escape".into()),
        }
    }
    Ok(out)
}

/// Parses one line of a b3sum checkfile, with b3sum's rules and messages.
fn parse_check_line(line: &str) -> Result<CheckLine, String> {
    let mut line = line.trim_end_matches('\n');
    let escaped = line.starts_with('\\');
    if line.is_empty() {
        return Err("Empty line".into());
    }
    if escaped {
        line = &line[1..];
    }
    let hex_len = 2 * blake3::OUT_LEN;
    let prefix = hex_len + 2;
    let bytes = line.as_bytes();
    if bytes.len() <= prefix {
        return Err("Short line".into());
    }
    if !bytes[..prefix].is_ascii() {
        return Err("Non-ASCII prefix".into());
    }
    if &bytes[hex_len..prefix] != b"  " {
        return Err("Invalid space".into());
    }
    let mut hash = [0u8; blake3::OUT_LEN];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = 16 * hex_nibble(bytes[2 * i])? + hex_nibble(bytes[2 * i + 1])?;
    }
    let file_string = &line[prefix..];
    let path = if escaped {
        unescape(file_string)?
    } else {
        file_string.to_string()
    };
    if path.contains('\0') {
        return Err("Null character in path".into());
    }
    if path.contains('\u{FFFD}') {
        return Err("Unicode replacement character in path".into());
    }
    let shown = if escaped {
        format!("\\{file_string}")
    } else {
        file_string.to_string()
    };
    Ok(CheckLine {
        shown,
        path: PathBuf::from(path),
        expected: Hash::from(hash),
    })
}

type CheckSlot = Mutex<Option<io::Result<Hash>>>;

struct Check<'a> {
    lines: &'a [Result<CheckLine, String>],
    slots: &'a [CheckSlot],
}

impl<'a> Jobs<'a> for Check<'a> {
    fn start<S: Spawner<'a>>(self, s: &S, ctx: &'a Ctx) {
        for (line, slot) in self.lines.iter().zip(self.slots) {
            if let Ok(line) = line {
                s.spawn_job(move |_: &S| {
                    let hash = hash_file::<S>(ctx, line.path.as_os_str().as_bytes(), true);
                    if hash.is_ok() {
                        ctx.file_done();
                    }
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(hash);
                });
            }
        }
    }
}

fn read_check_list(file: &Path) -> io::Result<Vec<Result<CheckLine, String>>> {
    let reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(io::BufReader::new(io::stdin()))
    } else {
        Box::new(io::BufReader::new(File::open(file)?))
    };
    let mut lines = Vec::new();
    for raw in reader.split(b'\n') {
        let raw = raw?;
        lines.push(match String::from_utf8(raw) {
            Ok(text) => parse_check_line(&text),
            Err(_) => Err("Invalid UTF-8 in line".into()),
        });
    }
    Ok(lines)
}

fn run_check(pool: &Pool, ctx: &Ctx, list: &Path) -> io::Result<bool> {
    let lines = match read_check_list(list) {
        Ok(lines) => lines,
        Err(e) => {
            ctx.error(list.as_os_str().as_bytes(), &e);
            return Ok(false);
        }
    };
    let slots: Vec<CheckSlot> = lines.iter().map(|_| Mutex::new(None)).collect();
    pool.run(
        ctx,
        Check {
            lines: &lines,
            slots: &slots,
        },
    );
    if let Some(pb) = &ctx.progress {
        pb.finish_and_clear();
    }
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = 0u64;
    for (line, slot) in lines.iter().zip(slots) {
        let line = match line {
            Ok(line) => line,
            Err(msg) => {
                failed += 1;
                out.flush()?;
                let _ = writeln!(io::stderr(), "{NAME}: {msg}");
                continue;
            }
        };
        match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(found)) if found == line.expected => writeln!(out, "{}: OK", line.shown)?,
            Some(Ok(_)) => {
                failed += 1;
                writeln!(out, "{}: FAILED", line.shown)?;
            }
            Some(Err(e)) => {
                failed += 1;
                writeln!(out, "{}: FAILED ({e})", line.shown)?;
            }
            None => {
                failed += 1;
                writeln!(out, "{}: FAILED (not hashed)", line.shown)?;
            }
        }
    }
    out.flush()?;
    if failed > 0 {
        let _ = writeln!(
            io::stderr(),
            "{NAME}: WARNING: {failed} computed checksum{} did NOT match",
            if failed == 1 { "" } else { "s" }
        );
    }
    Ok(failed == 0)
}

// ---------------------------------------------------------------------------
// Progress bar and stats.

/// A minimal terminal for `--progress` when stderr is not a terminal
/// (indicatif hides itself there, but the user asked for the bar).
#[derive(Debug)]
struct ForcedStderr;

impl indicatif::TermLike for ForcedStderr {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}A")?;
        }
        Ok(())
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}B")?;
        }
        Ok(())
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}C")?;
        }
        Ok(())
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}D")?;
        }
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        writeln!(io::stderr(), "{s}")
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        write!(io::stderr(), "{s}")
    }
    fn clear_line(&self) -> io::Result<()> {
        write!(io::stderr(), "\r\x1b[2K")
    }
    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}

fn make_progress(args: &Args) -> Option<ProgressBar> {
    let tty = io::stderr().is_terminal();
    let want = if args.no_progress {
        false
    } else {
        args.progress || tty
    };
    if !want {
        return None;
    }
    let target = if tty {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::term_like_with_hz(Box::new(ForcedStderr), 5)
    };
    let style = ProgressStyle::with_template(
        "{spinner} {msg}, {binary_bytes} hashed, {binary_bytes_per_sec}, {elapsed}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let pb = ProgressBar::with_draw_target(None, target).with_style(style);
    pb.set_message("0 files");
    pb.enable_steady_tick(Duration::from_millis(200));
    Some(pb)
}

fn peak_rss_kib() -> Option<i64> {
    // SAFETY: getrusage only writes the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    (rc == 0).then_some(usage.ru_maxrss)
}

fn print_stats(pool: &Pool, ctx: &Ctx, args: &Args, elapsed: Duration) {
    let files = ctx.files.load(Ordering::Relaxed);
    let bytes = ctx.bytes.load(Ordering::Relaxed);
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut msg = format!(
        "{NAME}: {files} file{}, {bytes} bytes in {secs:.3} s ({:.1} MiB/s), piece size {} bytes{}\n",
        if files == 1 { "" } else { "s" },
        bytes as f64 / secs / (1 << 20) as f64,
        ctx.piece,
        if args.mmap { ", mmap" } else { "" },
    );
    match pool {
        Pool::Treepool(p) => {
            let st = p.stats();
            let threads = p.current_num_threads();
            let cap = p.max_inflight();
            // The documented bound on read buffers (see the module doc, "Memory").
            let jobs = threads.min(cap.saturating_mul(st.peak_depth.max(1)));
            msg += &format!(
                "{NAME}: treepool: threads {threads} max_inflight {cap}\n\
                 {NAME}: stats: {st:?}\n\
                 {NAME}: read buffers <= piece_size x min(threads, max_inflight x levels) = {} x {jobs} = {} KiB\n",
                ctx.piece,
                ctx.piece.saturating_mul(jobs as u64) / 1024,
            );
        }
        Pool::Rayon(p) => {
            msg += &format!("{NAME}: rayon: threads {}\n", p.current_num_threads());
        }
    }
    match peak_rss_kib() {
        Some(kib) => msg += &format!("{NAME}: peak RSS {kib} KiB\n"),
        None => msg += &format!("{NAME}: peak RSS unknown\n"),
    }
    let _ = io::stderr().lock().write_all(msg.as_bytes());
}

// ---------------------------------------------------------------------------

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
