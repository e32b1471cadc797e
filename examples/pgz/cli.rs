//! The command line, in pigz's (and gzip's) conventions where they apply: the
//! options, their defaults and limits, and what they resolve to. Owns nothing
//! else; it never touches a file or a pool.

use std::path::PathBuf;

use clap::Parser;

use crate::NAME;

/// Default compression level (gzip's and pigz's).
pub(crate) const DEFAULT_LEVEL: u32 = 6;

/// Smallest block size in KiB: a block must at least fill deflate's 32 KiB
/// window for the next block's dictionary (pigz has the same limit).
const MIN_BLOCK_KIB: u64 = 32;

/// Largest block size in KiB (512 MiB); every block in the window is held in
/// memory, so larger would only cost memory.
const MAX_BLOCK_KIB: u64 = 512 * 1024;

/// The ids of the ten level flags, so that each overrides the others (the last
/// one given wins, as in gzip and pigz).
const LEVELS: [&str; 10] = ["l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9"];

/// pgz's options. `-0` … `-9` are ten flags (hidden from the option list,
/// described in `after_help`), resolved by [`Args::level`].
#[derive(Parser, Debug)]
#[command(
    name = NAME,
    version,
    about = "Compress or decompress FILEs in gzip format, compressing blocks in parallel (pigz's method)",
    after_help = "Levels: -0 (store) ... -9 (best); default -6. With no FILE, or FILE `-`, \
                  read standard input and write standard output. FILE is replaced by FILE.gz \
                  (and FILE.gz by FILE with -d) unless -k or -c is given. The output depends \
                  only on the input, the level and the block size, not on -p."
)]
pub(crate) struct Args {
    /// Files to compress or decompress (`-` = standard input)
    #[arg(value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,

    /// Decompress (sequentially, as pigz does)
    #[arg(short = 'd', long = "decompress")]
    pub(crate) decompress: bool,

    /// Write to standard output, keep the input files
    #[arg(short = 'c', long = "stdout")]
    pub(crate) stdout: bool,

    /// Keep (do not delete) the input files
    #[arg(short = 'k', long = "keep")]
    pub(crate) keep: bool,

    /// Overwrite existing output files; write compressed data to a terminal
    #[arg(short = 'f', long = "force")]
    pub(crate) force: bool,

    /// Compression threads [default: one per core]
    #[arg(short = 'p', long = "processes", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) processes: Option<u64>,

    /// Block size in KiB (32 ... 524288)
    #[arg(short = 'b', long = "blocksize", value_name = "KiB", default_value_t = 128,
          value_parser = clap::value_parser!(u64).range(MIN_BLOCK_KIB..=MAX_BLOCK_KIB))]
    pub(crate) blocksize_kib: u64,

    /// No progress bar (it is shown only when stderr is a terminal anyway)
    #[arg(short = 'q', long = "quiet")]
    pub(crate) quiet: bool,

    /// Blocks read but not yet written, at most [default: 4 a worker]
    #[arg(long, value_name = "N", hide = true,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub(crate) window: Option<u64>,

    /// Print the peak RSS (VmHWM) on stderr at the end (for tests)
    #[arg(long, hide = true)]
    pub(crate) peak_rss: bool,

    #[arg(short = '0', hide = true, overrides_with_all = LEVELS)]
    l0: bool,
    #[arg(short = '1', hide = true, overrides_with_all = LEVELS)]
    l1: bool,
    #[arg(short = '2', hide = true, overrides_with_all = LEVELS)]
    l2: bool,
    #[arg(short = '3', hide = true, overrides_with_all = LEVELS)]
    l3: bool,
    #[arg(short = '4', hide = true, overrides_with_all = LEVELS)]
    l4: bool,
    #[arg(short = '5', hide = true, overrides_with_all = LEVELS)]
    l5: bool,
    #[arg(short = '6', hide = true, overrides_with_all = LEVELS)]
    l6: bool,
    #[arg(short = '7', hide = true, overrides_with_all = LEVELS)]
    l7: bool,
    #[arg(short = '8', hide = true, overrides_with_all = LEVELS)]
    l8: bool,
    #[arg(short = '9', hide = true, overrides_with_all = LEVELS)]
    l9: bool,
}

impl Args {
    /// The compression level: the last of `-0` … `-9` given, else 6.
    pub(crate) fn level(&self) -> u32 {
        let flags = [
            self.l0, self.l1, self.l2, self.l3, self.l4, self.l5, self.l6, self.l7, self.l8,
            self.l9,
        ];
        // The overrides leave at most one set.
        flags
            .iter()
            .position(|&set| set)
            .map_or(DEFAULT_LEVEL, |l| l as u32)
    }

    /// The block size in bytes.
    pub(crate) fn block_size(&self) -> usize {
        (self.blocksize_kib * 1024) as usize
    }

    /// The pool's thread count; 0 leaves it to treepool (one per core, or
    /// `TREEPOOL_NUM_THREADS`).
    pub(crate) fn threads(&self) -> usize {
        self.processes.map_or(0, |p| p as usize)
    }
}
