//! A word-count pipeline whose memory the pool bounds.
//!
//! A generator makes `--size` bytes of text (default 50 MB): lines of pseudo-random words drawn,
//! with a skew, from a vocabulary of `--vocab` made-up words, deterministic for a given `--seed`.
//! It cuts the text into blocks of about `--block` bytes (default 1 MB) and, inside
//! `pool.scope`, spawns one job per block. A block job splits its block into lines and counts the
//! words of its lines with `treepool::join` (divide and conquer down to 256 lines, each half a
//! `HashMap<&str, u64>`, merged up), then merges the block's counts into the total.
//!
//! The generator runs in the scope body, so in the real pool every `s.spawn` waits until the new
//! block job is admitted (backpressure): the generator cannot get ahead of the counting, and the
//! blocks alive at once stay at most `--cap` admitted block jobs plus the one the generator holds
//! while it waits. A user-side counter measures that peak; the pool's `Stats` are printed too.
//!
//! With `--verify` the example counts the same text again sequentially and exits with status 1
//! if the counts differ. Bad arguments print usage and exit with status 2.
//!
//! ```text
//! cargo run --release --example pipeline
//! cargo run --example pipeline -- --size 1MB --verify
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::Parser;
use parking_lot::Mutex;

/// Lines a leaf of the per-block divide and conquer counts itself.
const LEAF_LINES: usize = 256;

#[derive(Parser, Debug)]
#[command(
    name = "pipeline",
    about = "Word count over generated text, with memory bounded by treepool's admission"
)]
struct Args {
    /// Text to generate: a number with an optional unit (B, KB, MB, GB, KiB, MiB, GiB).
    #[arg(long, default_value = "50MB", value_parser = parse_size)]
    size: usize,
    /// Size of one block, the unit the generator hands to a job.
    #[arg(long, default_value = "1MB", value_parser = parse_size)]
    block: usize,
    /// treepool's max_inflight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=65536))]
    cap: u64,
    /// Worker threads; 0 means one per available core.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1024))]
    threads: u64,
    /// Seed of the text generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Words in the vocabulary.
    #[arg(
        long,
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..=10_000_000)
    )]
    vocab: u64,
    /// Words to list, most frequent first.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Count again sequentially and check that the counts are equal.
    #[arg(long)]
    verify: bool,
}

/// Parses `50MB`, `1MiB`, `4096`, `2.5GB`.
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 50MB"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "unknown unit {u:?} (use B, KB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    let bytes = n * scale;
    if !(1.0..=1e12).contains(&bytes) {
        return Err(format!("{s:?} is out of range (1 B to 1 TB)"));
    }
    Ok(bytes as usize)
}

// ---------------------------------------------------------------------------------------------
// The text.

/// SplitMix64: small, and its output for a seed never changes between versions.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The text of one run: which blocks there are, and how to make each.
struct Corpus {
    size: usize,
    block: usize,
    seed: u64,
    vocab: Vec<String>,
}

impl Corpus {
    fn new(args: &Args) -> Self {
        const SYLLABLES: [&str; 16] = [
            "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "fu", "gi", "he",
            "ju", "by",
        ];
        // Word k spells k + 1 in bijective base 16, so every word is distinct.
        let vocab = (1..=args.vocab)
            .map(|mut n| {
                let mut w = String::new();
                while n > 0 {
                    n -= 1;
                    w.push_str(SYLLABLES[(n % 16) as usize]);
                    n /= 16;
                }
                w
            })
            .collect();
        Corpus {
            size: args.size,
            block: args.block.min(args.size),
            seed: args.seed,
            vocab,
        }
    }

    fn blocks(&self) -> usize {
        self.size.div_ceil(self.block)
    }

    /// Block `i`: whole lines, about `block` bytes (the last block gets what is left). Each
    /// block has its own generator, so a block can be made again without the ones before it.
    fn make_block(&self, i: usize) -> String {
        let target = self.block.min(self.size - i * self.block);
        let mut rng = SplitMix64(self.seed ^ (i as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
        let mut text = String::with_capacity(target + 128);
        while text.len() < target {
            let words = 5 + rng.next() % 11;
            for k in 0..words {
                if k > 0 {
                    text.push(' ');
                }
                // Cubing a uniform skews the choice towards the first words, like real text.
                let u = rng.unit();
                let idx = ((u * u * u) * self.vocab.len() as f64) as usize;
                text.push_str(&self.vocab[idx.min(self.vocab.len() - 1)]);
            }
            text.push('\n');
        }
        text
    }
}

// ---------------------------------------------------------------------------------------------
// Counting.

type Counts<'t> = HashMap<&'t str, u64>;

/// Counts the words of `lines`, splitting with `treepool::join` down to `LEAF_LINES` lines.
fn count_lines<'t>(lines: &[&'t str]) -> Counts<'t> {
    if lines.len() <= LEAF_LINES {
        let mut counts = Counts::new();
        for line in lines {
            for word in line.split_ascii_whitespace() {
                *counts.entry(word).or_insert(0) += 1;
            }
        }
        return counts;
    }
    let (left, right) = lines.split_at(lines.len() / 2);
    let (a, b) = treepool::join(|| count_lines(left), || count_lines(right));
    merge(a, b)
}

/// Merges the smaller map into the larger.
fn merge<'t>(a: Counts<'t>, b: Counts<'t>) -> Counts<'t> {
    let (mut big, small) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    for (w, n) in small {
        *big.entry(w).or_insert(0) += n;
    }
    big
}

/// Adds one block's counts to the total.
fn add_to(total: &mut HashMap<String, u64>, counts: Counts<'_>) {
    for (w, n) in counts {
        match total.get_mut(w) {
            Some(t) => *t += n,
            None => {
                total.insert(w.to_owned(), n);
            }
        }
    }
}

/// Blocks generated and not yet dropped, and their peak.
#[derive(Default)]
struct Alive {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// The pipeline: the generator spawns one job per block inside `pool.scope`.
fn count_on_pool(
    pool: &treepool::ThreadPool,
    corpus: &Corpus,
    alive: &Alive,
) -> HashMap<String, u64> {
    let total = Mutex::new(HashMap::new());
    pool.scope(|s| {
        for i in 0..corpus.blocks() {
            let text = corpus.make_block(i);
            let n = alive.now.fetch_add(1, Ordering::SeqCst) + 1;
            alive.peak.fetch_max(n, Ordering::SeqCst);
            let total = &total;
            // Waits for admission in the real pool: this is what bounds the blocks alive.
            s.spawn(move |_| {
                let lines: Vec<&str> = text.lines().collect();
                let counts = count_lines(&lines);
                add_to(&mut total.lock(), counts);
                drop(lines);
                drop(text);
                alive.now.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    total.into_inner()
}

/// The same count, on this thread, for `--verify`.
fn count_sequentially(corpus: &Corpus) -> HashMap<String, u64> {
    let mut total = HashMap::new();
    for i in 0..corpus.blocks() {
        let text = corpus.make_block(i);
        let mut counts = Counts::new();
        for word in text.split_ascii_whitespace() {
            *counts.entry(word).or_insert(0) += 1;
        }
        add_to(&mut total, counts);
    }
    total
}

fn main() {
    let args = Args::parse();
    let corpus = Corpus::new(&args);
    let pool = match treepool::ThreadPoolBuilder::new()
        .num_threads(args.threads as usize)
        .max_inflight(args.cap as usize)
        .build()
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot build the pool: {e}");
            std::process::exit(2);
        }
    };

    let alive = Alive::default();
    let start = Instant::now();
    let counts = count_on_pool(&pool, &corpus, &alive);
    let elapsed = start.elapsed();

    let total_words: u64 = counts.values().sum();
    let mut top: Vec<(&String, &u64)> = counts.iter().collect();
    top.sort_unstable_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    println!(
        "{} bytes in {} blocks of {} bytes, {} threads, cap {}",
        corpus.size,
        corpus.blocks(),
        corpus.block,
        pool.current_num_threads(),
        pool.max_inflight()
    );
    println!("top {} words:", args.top.min(top.len()));
    for (w, n) in top.iter().take(args.top) {
        println!("  {n:>12}  {w}");
    }
    println!("total words {total_words}, distinct words {}", counts.len());
    let secs = elapsed.as_secs_f64();
    println!(
        "time {secs:.3} s ({:.1} MB/s, generation included)",
        corpus.size as f64 / 1e6 / secs.max(1e-9)
    );
    let peak = alive.peak.load(Ordering::SeqCst);
    println!(
        "peak blocks alive {peak} ({:.1} MB; treepool bounds it to cap + 1 = {})",
        peak as f64 * corpus.block as f64 / 1e6,
        args.cap + 1
    );
    let s = pool.stats();
    println!(
        "pool stats: peak_inflight {}, peak_executing {}, peak_depth {}, admitted_on_loan {}, \
         admitted_from_pool {}, admission_waits {}, steals {}",
        s.peak_inflight,
        s.peak_executing,
        s.peak_depth,
        s.admitted_on_loan,
        s.admitted_from_pool,
        s.admission_waits,
        s.steals
    );

    if args.verify {
        let expected = count_sequentially(&corpus);
        if expected == counts {
            println!(
                "verify: ok, {} distinct words match a sequential count",
                counts.len()
            );
        } else {
            let wrong = expected
                .iter()
                .filter(|(w, n)| counts.get(*w) != Some(n))
                .count()
                + counts.keys().filter(|w| !expected.contains_key(*w)).count();
            eprintln!("verify: FAILED, {wrong} words counted differently");
            std::process::exit(1);
        }
    }
}
