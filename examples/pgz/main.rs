//! `pgz`: a parallel gzip on a [`treepool`] pool, with pigz's method, written
//! through the pool's ordered streaming map.
//!
//! # Usage
//!
//! ```text
//! cargo run --release --example pgz -- [OPTIONS] [FILE]...
//!
//!   -0 ... -9          compression level (default 6)
//!   -p, --processes N  compression threads (default: one per core)
//!   -b, --blocksize K  block size in KiB (default 128, at least 32)
//!   -c, --stdout       write to standard output, keep the input
//!   -d, --decompress   decompress (sequentially, as pigz does)
//!   -k, --keep         keep the input file (default: remove it, like gzip)
//!   -f, --force        overwrite an existing output; write to a terminal
//!   -q, --quiet        no progress bar (shown only when stderr is a terminal)
//! ```
//!
//! With no FILE, or `-`, it reads standard input and writes standard output.
//! `FILE` becomes `FILE.gz`; `-d` needs the `.gz` suffix and writes `FILE`.
//!
//! # The method (pigz's, and what it promises)
//!
//! The input is cut into blocks of `-b` KiB. Each block is compressed on its
//! own as raw deflate, primed with the previous block's last 32 KiB as the
//! dictionary and ended with a sync flush (the last block with a finish), so
//! the blocks' outputs concatenate into one deflate stream; the whole is ONE
//! gzip member whose CRC-32 is combined from the blocks' CRCs
//! (`crc32fast::Hasher::combine`) and whose ISIZE is the length mod 2³². `gzip
//! -d` and `pigz -d` restore the input byte for byte. The header stores no
//! name and no time (like `gzip -n`), so the output depends only on the input,
//! the level and the block size: it is the same for every `-p` and every run
//! (a stronger promise than pigz's; `tests/pgz.rs` checks it).
//!
//! # How it runs in parallel
//!
//! The main thread (in `Job::compress`, inside the pool's `in_place_scope`)
//! reads the blocks, in [`codec::Blocks`], each carrying a copy of its
//! predecessor's last 32 KiB, and writes the results; the pool's `-p` workers
//! compress (the main thread is no worker: it sleeps on a condition variable,
//! [`Finished`], until the next block is done). The blocks go through
//! `Scope::try_map_ordered`, which hands the compressed
//! blocks back in input order, pulls the input only as fast as the window of
//! blocks allows (hidden `--window N`; default [`BLOCKS_PER_WORKER`] blocks
//! a worker), and ends at the first error (a read error of the input, or
//! of the compressor), dropping the blocks not yet started; the writer
//! combines the CRCs as the blocks come back, in order.
//!
//! # The deflate backend: zlib-rs, with zlib's match finder at every level
//!
//! zlib-rs 0.6 (pure Rust, a port of zlib-ng; it picks AVX2/SSE4.2 code at
//! run time), through its C API (`libz-rs-sys`): `deflateSetDictionary`
//! primes each block, and `deflateTune` sets the match finder's parameters,
//! which flate2 does not expose. zlib-rs's own levels 1 and 3–6 use finders
//! of zlib-ng's that are faster than classic zlib's (what pigz uses) and
//! larger: 2–3 % at level 6 on a tar of the Rust sysroot, 18–20 % at level 1.
//! So each pgz level runs zlib's finder for that level (`codec`'s `Tuning`):
//! `deflate_slow` with zlib's rolling hash and zlib's parameters at `-4` …
//! `-9` (within 0.2 % of pigz's size), `deflate_fast` at `-1` … `-3` (within
//! 0.5 % on machine code, smaller than pigz's on text). Measured sizes and
//! times: `docs/benchmarks-notes.md` ("CPU pipelines").
//!
//! # Memory
//!
//! A block in the window holds one buffer: its dictionary (32 KiB) and input
//! (`B` = `-b` KiB) until it is compressed, then its output (at most `B`
//! plus 0.03 % and 18 bytes, usually much less) until it is written; while
//! it is compressed it holds both. The reader holds one block read ahead, and
//! the writer the block it writes. Each block is compressed by a deflate state
//! made for it (about 370 KiB with zlib-rs) on one of the `p` workers, so at
//! most `p` at once (512 KiB each in the bound below, with one more 512 KiB
//! for the writer's 256 KiB buffer). The buffers and the states' memory are
//! recycled ([`codec::Recycler`]): a block takes a buffer given back by an
//! earlier one, so they are allocated, mapped and touched once, and their
//! number never exceeds what was in use at once. With `W` the window (by
//! default [`BLOCKS_PER_WORKER`], 4, blocks a worker):
//!
//! ```text
//! peak RSS ≤ 4 MiB + (W + p + 2) × (B + 32 KiB) + (p + 1) × 512 KiB
//! ```
//!
//! where 4 MiB is the binary, the runtime and the pool's threads (a run on an
//! empty input peaks at 3.5 MiB). With the defaults on 2 threads (W = 8,
//! B = 128 KiB) that is 7.4 MiB; the benchmark's runs stay under it
//! (`docs/benchmarks-notes.md`, "CPU pipelines"), and `tests/pgz.rs` (`bounded_rss`) checks it on
//! 32 MiB for several W, B and p with the hidden `--peak-rss`, which prints
//! the process's own peak (VmHWM) on stderr at the end. pgz also sets glibc's
//! `M_MMAP_THRESHOLD` to 64 KiB ([`big_buffers_from_mmap`]), so that each
//! buffer is a mapping of its own that leaves no fragmented arena behind.
//! Before the buffers were recycled, that made every block's buffers fresh
//! mappings, zeroed on first touch: 49,599 page faults on 64 MB where pigz
//! takes 610, and 1.0 s of system time against pigz's 0.2 s on 256 MB.
//!
//! # Errors
//!
//! Every failure prints one line, `pgz: what: why`, on stderr and makes the
//! exit code 1; the other FILEs are still processed. Output files are written
//! under a temporary name beside the target and renamed only when complete
//! (`output`), so a corrupt or truncated input, a read error or a full disk
//! never leave a partial `FILE.gz` (or `FILE`) behind, and the input is removed
//! only after the rename. An existing output needs `-f`; compressed data is
//! not written to a terminal without `-f`.
//!
//! # Layout
//!
//! `main.rs` (this file: files, options and the parallel driver), `cli` (the
//! command line), `codec` (blocks and their compression), `gzip` (the
//! container: header, trailer, CRC combination), `decompress` (`-d`), `output`
//! (standard output, or a file that appears only when complete).
mod cli;
mod codec;
mod decompress;
mod gzip;
mod output;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt::Display;
use std::fs::{self, File};
use std::io::{self, IsTerminal, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Condvar, Mutex, MutexGuard};

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use treepool::{ThreadPool, ThreadPoolBuilder};

use crate::cli::Args;
use crate::codec::{Blocks, Recycler};
use crate::gzip::Checksum;
use crate::output::{AtomicFile, Stdout};

/// The program's name in messages.
const NAME: &str = "pgz";

/// The window's default, in blocks a worker (blocks read and not yet written). pgz was
/// measured with it (docs/benchmarks-notes.md, "CPU pipelines") when it was also the ordered
/// stream's own default (twice the pool's `max_inflight`, then 2 tokens a thread); the pool's
/// default cap is sized for trees, pgz's window for its memory bound.
const BLOCKS_PER_WORKER: u64 = 4;

/// `e` with `what` before its message (`what: e`), keeping its kind; an OS
/// error's message loses its `(os error N)` suffix.
pub(crate) fn ctx(e: io::Error, what: impl Display) -> io::Error {
    let msg = e.to_string();
    let msg = match (e.raw_os_error(), msg.rfind(" (os error ")) {
        (Some(_), Some(i)) => &msg[..i],
        _ => &msg[..],
    };
    io::Error::new(e.kind(), format!("{what}: {msg}"))
}

/// What one run needs besides the file names.
struct Job<'a> {
    args: &'a Args,
    pool: &'a ThreadPool,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            // --help and --version are no failure; a bad option is exit 1,
            // as in gzip and pigz.
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    output::install_signal_handlers();
    big_buffers_from_mmap();
    let pool = match ThreadPoolBuilder::new()
        .num_threads(args.threads())
        .thread_name(|i| format!("pgz-{i}"))
        .build()
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("{NAME}: cannot start {} threads: {e}", args.threads());
            return ExitCode::FAILURE;
        }
    };
    let job = Job {
        args: &args,
        pool: &pool,
    };
    let files = if args.files.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.files.clone()
    };
    let mut failed = false;
    for file in &files {
        let result = if file.as_os_str() == "-" {
            job.stdin_to_stdout()
        } else {
            job.file(file)
        };
        if let Err(e) = result {
            if e.kind() == io::ErrorKind::BrokenPipe {
                // `pgz -dc x.gz | head`: a closed reader is no error to report.
                return ExitCode::FAILURE;
            }
            eprintln!("{NAME}: {e}");
            failed = true;
        }
    }
    if args.peak_rss {
        eprintln!("{NAME}: peak RSS {} KiB", peak_rss_kib().unwrap_or(0));
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// This process's peak RSS since it was exec'd (`VmHWM` in
/// /proc/self/status), for the hidden `--peak-rss`. Unlike the `ru_maxrss`
/// its parent gets from `wait4`, it does not count what the parent held
/// when it forked.
fn peak_rss_kib() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Job<'_> {
    /// Standard input to standard output, in either direction.
    fn stdin_to_stdout(&self) -> io::Result<()> {
        let mut out = Stdout::new();
        if self.args.decompress {
            let progress = self.progress(None);
            decompress::decompress(io::stdin(), "stdin", &mut out, progress.get())?;
        } else {
            self.refuse_terminal()?;
            let progress = self.progress(None);
            self.compress(Box::new(io::stdin()), "stdin", &mut out, progress.get())?;
        }
        out.finish()
    }

    /// One named file: to `FILE.gz` (or from it, with `-d`), or to standard
    /// output with `-c`; the input is removed after success unless `-k`/`-c`.
    fn file(&self, path: &Path) -> io::Result<()> {
        let shown = path.display().to_string();
        let target = if self.args.decompress {
            match path.as_os_str().as_bytes().strip_suffix(b".gz") {
                Some(stem) if !stem.is_empty() && !stem.ends_with(b"/") => {
                    Some(PathBuf::from(OsStr::from_bytes(stem)))
                }
                _ if self.args.stdout => None,
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{shown}: unknown suffix (expected .gz); -c writes it to stdout"),
                    ))
                }
            }
        } else {
            if !self.args.stdout && path.extension().is_some_and(|e| e == "gz") {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{shown}: already has the .gz suffix; unchanged"),
                ));
            }
            let mut name = path.as_os_str().to_owned();
            name.push(".gz");
            Some(PathBuf::from(name))
        };
        let input = File::open(path).map_err(|e| ctx(e, &shown))?;
        let meta = input.metadata().map_err(|e| ctx(e, &shown))?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{shown}: not a regular file"),
            ));
        }
        let progress = self.progress(Some(meta.len()));
        match target {
            Some(target) if !self.args.stdout => {
                let mut out = AtomicFile::create(&target, self.args.force)?;
                self.run(input, &shown, &mut out, progress.get())?;
                out.commit(Some(&meta))?;
                if !self.args.keep {
                    fs::remove_file(path).map_err(|e| ctx(e, format!("{shown}: cannot remove")))?;
                }
                Ok(())
            }
            _ => {
                if !self.args.decompress {
                    self.refuse_terminal()?;
                }
                let mut out = Stdout::new();
                self.run(input, &shown, &mut out, progress.get())?;
                out.finish()
            }
        }
    }

    /// Compresses or decompresses `input` into `out`.
    fn run(
        &self,
        input: File,
        name: &str,
        out: &mut impl Write,
        progress: Option<&ProgressBar>,
    ) -> io::Result<()> {
        if self.args.decompress {
            decompress::decompress(input, name, out, progress)
        } else {
            self.compress(Box::new(input), name, out, progress)
        }
    }

    /// gzip's rule: compressed data is not written to a terminal without -f.
    fn refuse_terminal(&self) -> io::Result<()> {
        if !self.args.force && io::stdout().is_terminal() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "compressed data not written to a terminal (use -f to force)",
            ));
        }
        Ok(())
    }

    /// A progress bar on stderr when it is a terminal (and not `-q`), over
    /// `len` input bytes when known.
    fn progress(&self, len: Option<u64>) -> Bar {
        if self.args.quiet || !io::stderr().is_terminal() {
            return Bar(None);
        }
        let pb = match len {
            Some(len) => ProgressBar::new(len).with_style(
                ProgressStyle::with_template(
                    "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {bytes} {binary_bytes_per_sec}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        pb.set_draw_target(ProgressDrawTarget::stderr());
        Bar(Some(pb))
    }

    /// Compresses all of `input` (named `name` in messages) into one gzip
    /// member in `out`: the header, the blocks in input order, the trailer.
    fn compress(
        &self,
        input: Box<dyn Read + Send>,
        name: &str,
        out: &mut impl Write,
        progress: Option<&ProgressBar>,
    ) -> io::Result<()> {
        let level = self.args.level();
        out.write_all(&gzip::header(level))?;
        let mut sum = Checksum::default();
        let (buffers, states) = (Recycler::default(), Recycler::default());
        let (finished, pulled) = (Finished::default(), Cell::new(0));
        let blocks = Blocks::new(input, self.args.block_size(), &buffers)
            .map(|b| b.map_err(|e| ctx(e, format_args!("{name}: read error"))))
            .inspect(|_| pulled.set(pulled.get() + 1))
            .enumerate();
        let workers = self.pool.current_num_threads() as u64;
        let window = self.args.window.unwrap_or(BLOCKS_PER_WORKER * workers);
        self.pool.in_place_scope(|s| -> io::Result<()> {
            // Blocks are read on this thread as the window allows, compressed
            // on the workers, and handed back here in input order; the first
            // error (reading or compressing) ends the stream.
            let mut compressed = s.try_map_ordered(blocks, |(i, b)| {
                let _finished = finished.on_drop(i);
                codec::compress(b?, level, &buffers, &states)
            });
            compressed = compressed.window(window as usize);
            for i in 0.. {
                if i < pulled.get() {
                    finished.wait(i);
                }
                let Some(c) = compressed.next() else { break };
                let c = c?;
                out.write_all(c.deflate())?;
                sum.append(&c.crc, c.len);
                if let Some(pb) = progress {
                    pb.inc(c.len);
                }
                c.recycle(&buffers);
            }
            Ok(())
        })?;
        out.write_all(&sum.trailer())
    }
}

/// The blocks whose compression ended (with a result, an error or a panic) and
/// that the writer has not waited for yet, by index: the writer sleeps on a
/// condition variable until its next block is done, as pigz's writer does,
/// and only then asks the stream for it, which then hands it over at once.
/// Left to the stream, the wait for a block still being compressed spins and
/// yields the core (`sched_yield`) many times before it sleeps: on a 2-core
/// machine shared with other work, that spent the writer's turns on the
/// processors and kept three threads competing for two cores.
#[derive(Default)]
struct Finished {
    done: Mutex<BTreeSet<usize>>,
    changed: Condvar,
}

impl Finished {
    /// Waits until block `i` is done.
    fn wait(&self, i: usize) {
        let mut done = lock(&self.done);
        while !done.remove(&i) {
            done = self.changed.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A guard that marks block `i` done when dropped, however its
    /// compression ends.
    fn on_drop(&self, i: usize) -> impl Drop + '_ {
        struct Mark<'a>(&'a Finished, usize);
        impl Drop for Mark<'_> {
            fn drop(&mut self) {
                lock(&self.0.done).insert(self.1);
                self.0.changed.notify_one();
            }
        }
        Mark(self, i)
    }
}

/// `m` locked; a panic elsewhere cannot leave a set of indices half-updated,
/// so a poisoned lock is still good.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes glibc's malloc serve every allocation of 64 KiB or more (blocks,
/// compressed blocks, deflate states) with its own mapping, returned to the
/// system when freed, so that the peak RSS is the peak of live buffers (the
/// "Memory" section above). Elsewhere (another libc) this does nothing.
fn big_buffers_from_mmap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a malloc parameter; it is called before
    // any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
}

/// A progress bar, or none; cleared when dropped, on success and on error
/// alike, so that a message starts on a line of its own.
struct Bar(Option<ProgressBar>);

impl Bar {
    /// The bar, if there is one.
    fn get(&self) -> Option<&ProgressBar> {
        self.0.as_ref()
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(pb) = &self.0 {
            pb.finish_and_clear();
        }
    }
}
