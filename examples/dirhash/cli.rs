//! The command line: the options, their defaults and the size parser. Owns
//! nothing else; it must never touch the file system or a pool.
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::NAME;

/// The fewest worker threads when `--threads` is not given. A worker blocks
/// in `open` and `read` while the page cache is cold, so the reads in flight
/// are the workers that are not hashing: one per core keeps the disk nearly
/// idle, and 16 reaches its parallelism on the benchmark's VM (main.rs, "Cold
/// cache", has the figures).
pub(crate) const MIN_DEFAULT_THREADS: usize = 16;

#[derive(Parser, Debug)]
#[command(
    name = NAME,
    version,
    about = "Hash every regular file under PATHs with BLAKE3, in b3sum's format, in parallel",
    after_help = "Output is byte-identical to `find PATH -type f -print0 | LC_ALL=C sort -z | xargs -0 b3sum`."
)]
pub(crate) struct Args {
    /// Files or directories to hash [default: .]
    #[arg(value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,

    /// Worker threads (0 = one per core) [default: one per core, at least 16]
    #[arg(long, value_name = "N")]
    pub(crate) threads: Option<usize>,

    /// Admission tokens of the pool: jobs in flight stay <= N x levels
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_inflight: Option<u64>,

    /// Split granularity and per-job read buffer, in bytes (K, M, G suffixes ok)
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_size)]
    pub(crate) piece_size: u64,

    /// Verify a b3sum-format checksum list (`-` = stdin) instead of hashing PATHs
    #[arg(long, value_name = "FILE", conflicts_with = "paths")]
    pub(crate) check: Option<PathBuf>,

    /// Show a progress bar on stderr (default: only when stderr is a terminal)
    #[arg(long, overrides_with = "no_progress")]
    pub(crate) progress: bool,

    /// Never show a progress bar
    #[arg(long, overrides_with = "progress")]
    pub(crate) no_progress: bool,

    /// Print the pool's Stats and the peak RSS on stderr at the end
    #[arg(long)]
    pub(crate) stats: bool,

    /// Hash through memory maps instead of read() (RSS then includes mapped pages)
    #[arg(long)]
    pub(crate) mmap: bool,

    /// Which pool runs the walk (for benchmarks)
    #[arg(long, value_enum, default_value_t = Engine::Treepool, hide = true)]
    pub(crate) engine: Engine,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Engine {
    Treepool,
    Rayon,
}

impl Args {
    /// `--threads`, else `TREEPOOL_NUM_THREADS` (the treepool default's own
    /// override, for both engines), else one per core but at least
    /// [`MIN_DEFAULT_THREADS`]. `0` is passed on: one per core (and a value of
    /// the variable that is no number, or above `treepool::max_num_threads()`,
    /// is left for treepool to refuse: passed on as a count, the latter would be
    /// reduced instead).
    pub(crate) fn threads(&self) -> usize {
        if let Some(n) = self.threads {
            return n;
        }
        if let Some(var) = std::env::var_os(treepool::NUM_THREADS_ENV) {
            return var
                .to_str()
                .and_then(|v| v.trim().parse().ok())
                .filter(|&n| n <= treepool::max_num_threads())
                .unwrap_or(0);
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cores.max(MIN_DEFAULT_THREADS)
    }
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
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
