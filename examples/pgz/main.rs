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
//! compress (the main thread is no worker, so it parks while it waits for the
//! next block). The blocks go through `Scope::try_map_ordered`, which hands the compressed
//! blocks back in input order, pulls the input only as fast as the window of
//! blocks allows (hidden `--window N`; default twice the pool's
//! `max_inflight`), and ends at the first error (a read error of the input, or
//! of the compressor), dropping the blocks not yet started; the writer
//! combines the CRCs as the blocks come back, in order.
//!
//! # The deflate backend: zlib-rs, chosen by measurement
//!
//! flate2 with its `zlib-rs` feature (zlib-rs 0.6, pure Rust, with
//! `runtime_detection` so that it picks AVX2/SSE4.2 code at run time). Both
//! speed backends support `Compress::set_dictionary` (flate2 offers it with
//! any zlib-like backend; the default miniz_oxide has none). Measured with this
//! example's method (128 KiB blocks, each with its 32 KiB dictionary, sync
//! flushes), one thread, on the first 50 MB of a tar of every fourth file of
//! the Rust 1.95 sysroot, best of 3, on the 2-core shared VM of the benchmark:
//!
//! ```text
//!                           level 1              level 6              level 9
//! zlib-rs 0.6.8 (chosen)    19,158,757  0.17 s   14,796,491  0.65 s   14,400,276  1.87 s
//! zlib-ng 2.3.3 (C, cmake)  19,158,757  0.20 s   14,796,491  0.82 s   14,400,276  2.16 s
//! zlib 1.2.13 (C, system)   16,238,995  0.46 s   14,516,248  1.63 s   14,406,332  8.89 s
//! pigz -p 1 (system zlib)                        14,515,698  1.5–1.8 s
//! ```
//!
//! zlib-rs makes the same bytes as zlib-ng (it is a port) 20–25 % faster, and
//! needs no C toolchain or cmake. Both use zlib-ng's `deflate_medium` at
//! levels 3–6 and `deflate_quick` at 1, which trade size for speed: at level 6
//! they are 2.5× as fast as classic zlib (what pigz uses) and 1.9 % larger.
//! So pgz at `-6` misses pigz's size by about 2 %; pgz `-9` (zlib-rs's
//! `deflate_slow`, chain 4096) is 0.8 % smaller than pigz `-6` at about its
//! single-thread time. `benches/pgz.sh` shows both against pigz `-6`.
//!
//! # Memory
//!
//! A block in the window holds its input (`B` = `-b` KiB) and its dictionary
//! (32 KiB) until it is compressed, then its output (at most `B` plus 0.1 %
//! and 64 bytes, usually much less) until it is written. Each block is
//! compressed by a deflate state of its own (about 350 KiB with zlib-rs,
//! freed after the block) on one of the `p` workers, so at most `p` of them
//! at once (512 KiB each in the bound below, with one more 512 KiB for the
//! writer's 256 KiB buffer); the reader holds one block read ahead. With `W`
//! the window (by default twice the pool's `max_inflight`,
//! i.e. 4 blocks per thread):
//!
//! ```text
//! peak RSS ≤ 4 MiB + W × (2 × B + 32 KiB) + B + (p + 1) × 512 KiB
//! ```
//!
//! where 4 MiB is the binary, the runtime and the pool's threads (a run on an
//! empty input peaks at 3.5 MiB). With the defaults on 2 threads (W = 8,
//! B = 128 KiB) that is 7.9 MiB; the benchmark's run stays under it
//! (`docs/benchmarks.md`, "CPU pipelines"), and `tests/pgz.rs` (`bounded_rss`) checks it on
//! 32 MiB for several W, B and p with the hidden `--peak-rss`, which prints
//! the process's own peak (VmHWM) on stderr at the end. To make RSS follow the live buffers, pgz sets
//! glibc's `M_MMAP_THRESHOLD` to 64 KiB ([`big_buffers_from_mmap`]): every
//! block buffer and deflate state is then mapped and unmapped on its own.
//! With glibc's default (a threshold that grows to the largest size freed,
//! after which big buffers come from per-thread arenas that keep their
//! fragmented peak) a 50 MB run on 2 threads peaked at 10.7–13.7 MiB instead
//! of 5.4–7.3 MiB (W = 4, 8, 16). The price is the page faults of fresh
//! mappings: in 5 alternating runs on 50 MB, 0.80 s of CPU time instead of
//! 0.69 s (+16 %) and a median wall time of 1.19 s instead of 0.98 s on the
//! loaded 2-core VM. The benchmark's times include it; pgz is well under
//! pigz's time either way, and this makes the bound above hold.
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

use std::ffi::OsStr;
use std::fmt::Display;
use std::fs::{self, File};
use std::io::{self, IsTerminal, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use treepool::{ThreadPool, ThreadPoolBuilder};

use crate::cli::Args;
use crate::codec::Blocks;
use crate::gzip::Checksum;
use crate::output::{AtomicFile, Stdout};

/// The program's name in messages.
const NAME: &str = "pgz";

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
        let blocks = Blocks::new(input, self.args.block_size())
            .map(|b| b.map_err(|e| ctx(e, format_args!("{name}: read error"))));
        let window = self.args.window;
        self.pool.in_place_scope(|s| -> io::Result<()> {
            // Blocks are read on this thread as the window allows, compressed
            // on the workers, and handed back here in input order; the first
            // error (reading or compressing) ends the stream.
            let mut compressed = s.try_map_ordered(blocks, move |b| codec::compress(b?, level));
            if let Some(w) = window {
                compressed = compressed.window(w as usize);
            }
            for c in compressed {
                let c = c?;
                out.write_all(&c.deflate)?;
                sum.append(&c.crc, c.len);
                if let Some(pb) = progress {
                    pb.inc(c.len);
                }
            }
            Ok(())
        })?;
        out.write_all(&sum.trailer())
    }
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
