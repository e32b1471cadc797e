//! Rayon programs in the shapes rayon-demo times (n-body, game of life, a sieve, sorts, collect,
//! find_first, one element a split (`increment_all_max`), string splits, walk_tree, join-based
//! quicksort, matrix product and fib), written on rayon's public API only, so the same source
//! runs on the real rayon-core and, patched, on treepool.
//!
//! `BIN PROGRAM ITERS` runs PROGRAM once untimed (inputs are built then, outside the timings),
//! then ITERS times, and prints `key=value` lines: the result (a checksum every run must
//! repeat, and the two builds must agree on), the median time of the timed runs, and what the
//! binary's `report` adds. `BIN list` prints the programs' names.
//!
//! `BIN walk DIR` is the program that shows why a rayon program may switch to treepool: a
//! `rayon::scope` whose body walks DIR, reads each file and spawns a job per file, holding the
//! file's contents, to hash them. rayon-core's `spawn` never waits, so the
//! walk reads ahead of the hashing and its memory grows with the tree; treepool's waits for
//! admission, so at most `max_inflight × levels` files are held. It prints the time, the
//! process's peak RSS and the files' checksum.

use std::fs;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

use rayon::prelude::*;

type Program = fn() -> u64;

const PROGRAMS: &[(&str, Program)] = &[
    ("nbody_par_iter", nbody_par_iter),
    ("nbody_par_bridge", nbody_par_bridge),
    ("life_par_iter", life_par_iter),
    ("life_par_bridge", life_par_bridge),
    ("sieve_chunks", sieve_chunks),
    ("par_sort", par_sort),
    ("par_sort_unstable", par_sort_unstable),
    ("par_sort_unstable_by_key", par_sort_unstable_by_key),
    ("collect", collect),
    ("find_first", find_first),
    ("increment_all_max", increment_all_max),
    ("str_split", str_split),
    ("walk_tree", walk_tree),
    ("quicksort_join", quicksort_join),
    ("matmul_join", matmul_join),
    ("fib_join", fib_join),
];

pub fn main(report: impl FnOnce() -> Vec<(&'static str, u64)>) {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "list".into());
    if name == "list" {
        PROGRAMS.iter().for_each(|(name, _)| println!("{name}"));
        return;
    }
    if name == "walk" {
        let dir = args.next().expect("walk DIR");
        let start = Instant::now();
        walk(dir.into());
        println!("time_ms={}", start.elapsed().as_millis());
        println!("peak_rss_kib={}", peak_rss_kib());
        report()
            .into_iter()
            .for_each(|(key, value)| println!("{key}={value}"));
        return;
    }
    let iters: usize = args
        .next()
        .map_or(5, |n| n.parse().expect("ITERS: a number"));
    assert!(iters > 0, "ITERS: at least 1");
    let (_, program) = PROGRAMS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no program {name:?}; `list` names them"));
    let result = program();
    let mut times: Vec<u128> = (0..iters)
        .map(|_| {
            let start = Instant::now();
            assert_eq!(
                black_box(program()),
                result,
                "{name}: a run's result differs"
            );
            start.elapsed().as_nanos()
        })
        .collect();
    times.sort_unstable();
    println!("result={result}");
    println!("median_ns={}", times[iters / 2]);
    println!("threads={}", rayon::current_num_threads());
    for (key, value) in report() {
        println!("{key}={value}");
    }
}

/// xorshift64: reproducible inputs without a dependency.
fn numbers(n: usize, seed: u64) -> Vec<u64> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        })
        .collect()
}

// ---- n-body: every body's acceleration from all others, 1,000 bodies, 3 steps.

const BODIES: usize = 1_000;
const STEPS: usize = 3;

#[derive(Clone, Copy)]
struct Body {
    pos: [f64; 3],
    vel: [f64; 3],
}

fn initial_bodies() -> Vec<Body> {
    let coords = numbers(BODIES * 3, 7);
    coords
        .chunks(3)
        .map(|c| Body {
            pos: [0, 1, 2].map(|i| (c[i] % 10_000) as f64 / 100.0),
            vel: [0.0; 3],
        })
        .collect()
}

/// The velocity of `body` after one step among `bodies` (a softened inverse-square pull).
fn step_velocity(body: &Body, bodies: &[Body]) -> [f64; 3] {
    let mut vel = body.vel;
    for other in bodies {
        let d = [0, 1, 2].map(|i| other.pos[i] - body.pos[i]);
        let dist2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01;
        let pull = 1e-3 / (dist2 * dist2.sqrt());
        (0..3).for_each(|i| vel[i] += d[i] * pull);
    }
    vel
}

fn move_bodies(bodies: &mut [Body], velocities: &[[f64; 3]]) -> u64 {
    for (body, vel) in bodies.iter_mut().zip(velocities) {
        body.vel = *vel;
        (0..3).for_each(|i| body.pos[i] += vel[i]);
    }
    bodies
        .iter()
        .map(|b| b.pos[0].to_bits() ^ b.pos[2].to_bits())
        .fold(0, u64::wrapping_add)
}

fn nbody_par_iter() -> u64 {
    let mut bodies = initial_bodies();
    let mut checksum = 0;
    for _ in 0..STEPS {
        let velocities: Vec<[f64; 3]> = bodies
            .par_iter()
            .map(|b| step_velocity(b, &bodies))
            .collect();
        checksum = move_bodies(&mut bodies, &velocities);
    }
    checksum
}

fn nbody_par_bridge() -> u64 {
    let mut bodies = initial_bodies();
    let mut checksum = 0;
    for _ in 0..STEPS {
        let mut velocities: Vec<(usize, [f64; 3])> = bodies
            .iter()
            .enumerate()
            .par_bridge()
            .map(|(i, b)| (i, step_velocity(b, &bodies)))
            .collect();
        velocities.sort_unstable_by_key(|&(i, _)| i);
        let velocities: Vec<[f64; 3]> = velocities.into_iter().map(|(_, v)| v).collect();
        checksum = move_bodies(&mut bodies, &velocities);
    }
    checksum
}

// ---- Game of life on a 200 × 200 torus, 10 generations.

const SIDE: usize = 200;
const GENERATIONS: usize = 10;

fn initial_board() -> Vec<bool> {
    numbers(SIDE * SIDE, 11)
        .iter()
        .map(|x| x % 3 == 0)
        .collect()
}

fn successor(board: &[bool], cell: usize) -> bool {
    let (row, col) = (cell / SIDE, cell % SIDE);
    let mut neighbours = 0;
    for dr in [SIDE - 1, 0, 1] {
        for dc in [SIDE - 1, 0, 1] {
            if (dr, dc) != (0, 0) {
                neighbours += usize::from(board[(row + dr) % SIDE * SIDE + (col + dc) % SIDE]);
            }
        }
    }
    matches!((board[cell], neighbours), (true, 2) | (_, 3))
}

fn live(board: &[bool]) -> u64 {
    board.iter().filter(|&&alive| alive).count() as u64
}

fn life_par_iter() -> u64 {
    let mut board = initial_board();
    for _ in 0..GENERATIONS {
        board = (0..board.len())
            .into_par_iter()
            .map(|c| successor(&board, c))
            .collect();
    }
    live(&board)
}

fn life_par_bridge() -> u64 {
    let mut board = initial_board();
    for _ in 0..GENERATIONS {
        let cells: Vec<(usize, bool)> = (0..board.len())
            .par_bridge()
            .map(|c| (c, successor(&board, c)))
            .collect();
        let mut next = vec![false; board.len()];
        cells.into_iter().for_each(|(c, alive)| next[c] = alive);
        board = next;
    }
    live(&board)
}

// ---- Sieve of Eratosthenes below 20 million, in chunks of 100,000 numbers.

const SIEVE_MAX: usize = 20_000_000;
const SIEVE_CHUNK: usize = 100_000;

fn sieve_chunks() -> u64 {
    let root = (SIEVE_MAX as f64).sqrt() as usize + 1;
    let mut small = vec![true; root];
    small[0] = false;
    small[1] = false;
    for p in 2..root {
        if small[p] {
            (p * p..root).step_by(p).for_each(|m| small[m] = false);
        }
    }
    let primes: Vec<usize> = (2..root).filter(|&p| small[p]).collect();
    let mut high = vec![true; SIEVE_MAX - root];
    high.par_chunks_mut(SIEVE_CHUNK)
        .enumerate()
        .for_each(|(i, chunk)| {
            let base = root + i * SIEVE_CHUNK;
            for &p in &primes {
                let first = base.div_ceil(p) * p;
                (first.max(p * p)..base + chunk.len())
                    .step_by(p)
                    .for_each(|m| chunk[m - base] = false);
            }
        });
    (primes.len() + high.iter().filter(|&&prime| prime).count()) as u64
}

// ---- Sorts of 2 million random numbers (the copy of the input is in both builds' times).

static UNSORTED: LazyLock<Vec<u64>> = LazyLock::new(|| numbers(2_000_000, 13));

fn sorted_checksum(v: &[u64]) -> u64 {
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "not sorted");
    v[0] ^ v[v.len() / 2] ^ v[v.len() - 1]
}

fn par_sort() -> u64 {
    let mut v = UNSORTED.clone();
    v.par_sort();
    sorted_checksum(&v)
}

fn par_sort_unstable() -> u64 {
    let mut v = UNSORTED.clone();
    v.par_sort_unstable();
    sorted_checksum(&v)
}

/// rayon-demo's `sort::par_sort_unstable_by_key` (which sorts `u32`s): 50,000 numbers sorted
/// by their decimal strings, a `String` made and dropped at every comparison.
fn par_sort_unstable_by_key() -> u64 {
    static KEYED: LazyLock<Vec<u64>> = LazyLock::new(|| numbers(50_000, 17));
    let mut v = KEYED.clone();
    v.par_sort_unstable_by_key(ToString::to_string);
    assert!(
        v.windows(2).all(|w| w[0].to_string() <= w[1].to_string()),
        "not sorted by key"
    );
    v[0] ^ v[v.len() / 2] ^ v[v.len() - 1]
}

fn quicksort_join() -> u64 {
    fn quicksort(v: &mut [u64]) {
        if v.len() <= 1_000 {
            v.sort_unstable();
            return;
        }
        let pivot = {
            let (a, b, c) = (v[0], v[v.len() / 2], v[v.len() - 1]);
            a.max(b).min(a.min(b).max(c))
        };
        let (mut low, mut high) = (0, v.len());
        let mut i = 0;
        // Three-way partition: [< pivot | == pivot | > pivot].
        while i < high {
            match v[i].cmp(&pivot) {
                std::cmp::Ordering::Less => {
                    v.swap(i, low);
                    low += 1;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    high -= 1;
                    v.swap(i, high);
                }
                std::cmp::Ordering::Equal => i += 1,
            }
        }
        let (left, rest) = v.split_at_mut(low);
        let right = &mut rest[high - low..];
        rayon::join(|| quicksort(left), || quicksort(right));
    }
    let mut v = UNSORTED.clone();
    quicksort(&mut v);
    sorted_checksum(&v)
}

// ---- collect, find_first, string splits, walk_tree.

fn collect() -> u64 {
    let v: Vec<u64> = (0..10_000_000u64)
        .into_par_iter()
        .map(|x| x.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    v[v.len() - 1] ^ v.len() as u64
}

static HAYSTACK: LazyLock<Vec<u64>> = LazyLock::new(|| numbers(8_000_000, 17));

fn find_first() -> u64 {
    let needle = HAYSTACK[HAYSTACK.len() * 2 / 3];
    let found = HAYSTACK
        .par_iter()
        .enumerate()
        .find_first(|&(_, &x)| x == needle);
    found.expect("the needle is in the haystack").0 as u64
}

/// rayon-demo's `join_microbench::increment_all_max`: one element a split, so the time is
/// nearly all `join_context`'s own cost (100,000 leaves, about as many joins).
fn increment_all_max() -> u64 {
    let mut v: Vec<u64> = (0..100_000).collect();
    v.par_iter_mut()
        .with_max_len(1)
        .for_each(|x| *x = x.wrapping_mul(3).wrapping_add(1));
    v.iter().fold(0, |acc, &x| acc.wrapping_add(x))
}

static TEXT: LazyLock<String> = LazyLock::new(|| {
    let letters = b"abcdefg ";
    let bytes = numbers(4_000_000, 19)
        .iter()
        .map(|x| letters[(x % 8) as usize])
        .collect();
    String::from_utf8(bytes).expect("ASCII")
});

fn str_split() -> u64 {
    let words = TEXT.par_split(' ').filter(|w| !w.is_empty()).count();
    let longest = TEXT.par_split_whitespace().map(str::len).max().unwrap_or(0);
    (words * 1_000 + longest) as u64
}

fn walk_tree() -> u64 {
    let size = 10_000_000u64;
    let sum: u64 = rayon::iter::walk_tree_prefix(0..size, |r| {
        let mid = (r.start + 1 + r.end) / 2;
        [(r.start + 1)..mid, mid..r.end]
            .into_iter()
            .filter(|r| !r.is_empty())
    })
    .map(|r| r.start)
    .sum();
    assert_eq!(sum, size * (size - 1) / 2);
    sum
}

// ---- join-based matrix product (512 × 512, rows split in halves down to 16) and fib.

const N: usize = 512;

static MATRICES: LazyLock<(Vec<f32>, Vec<f32>)> = LazyLock::new(|| {
    let to_f32 = |x: &u64| (x % 1_000) as f32 / 1_000.0;
    let a = numbers(N * N, 23).iter().map(to_f32).collect();
    let b_transposed = numbers(N * N, 29).iter().map(to_f32).collect();
    (a, b_transposed)
});

fn matmul_join() -> u64 {
    fn rows(a: &[f32], bt: &[f32], c: &mut [f32]) {
        if c.len() <= 16 * N {
            for (a_row, c_row) in a.chunks(N).zip(c.chunks_mut(N)) {
                for (bt_row, out) in bt.chunks(N).zip(c_row.iter_mut()) {
                    *out = a_row.iter().zip(bt_row).map(|(x, y)| x * y).sum();
                }
            }
            return;
        }
        let half = c.len() / N / 2 * N;
        let (a_top, a_bottom) = a.split_at(half);
        let (c_top, c_bottom) = c.split_at_mut(half);
        rayon::join(|| rows(a_top, bt, c_top), || rows(a_bottom, bt, c_bottom));
    }
    let (a, bt) = &*MATRICES;
    let mut c = vec![0.0f32; N * N];
    rows(a, bt, &mut c);
    c.iter()
        .map(|x| u64::from(x.to_bits()))
        .fold(0, u64::wrapping_add)
}

fn fib_join() -> u64 {
    fn fib(n: u64) -> u64 {
        if n < 2 {
            return n;
        }
        let (a, b) = rayon::join(|| fib(n - 1), || fib(n - 2));
        a + b
    }
    fib(32)
}

// ---- The file walk (`walk DIR`).

fn walk(dir: PathBuf) {
    let (files, bytes, checksum) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let totals = (&files, &bytes, &checksum);
    rayon::scope(|s| visit(s, dir, totals));
    println!("files={}", files.into_inner());
    println!("bytes={}", bytes.into_inner());
    println!("result={}", checksum.into_inner());
}

type Totals<'a> = (&'a AtomicU64, &'a AtomicU64, &'a AtomicU64);

/// Reads the files under `dir` in order, on the scope's own thread, and spawns a job per file
/// that hashes its contents.
fn visit<'s>(s: &rayon::Scope<'s>, dir: PathBuf, totals: Totals<'s>) {
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
    paths.sort();
    for path in paths {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            visit(s, path, totals);
        } else if let (true, Ok(contents)) = (meta.is_file(), fs::read(&path)) {
            s.spawn(move |_| {
                let (files, bytes, checksum) = totals;
                files.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(contents.len() as u64, Ordering::Relaxed);
                checksum.fetch_add(digest(&contents), Ordering::Relaxed);
            });
        }
    }
}

/// Four passes of FNV-1a, a byte at a time: the per-file work (a parser's, a compressor's) is
/// slower than reading a cached file.
fn digest(bytes: &[u8]) -> u64 {
    (0..4u8).fold(0xcbf2_9ce4_8422_2325, |seed, pass| {
        bytes.iter().fold(seed ^ u64::from(pass), |hash, &b| {
            (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    })
}

/// The process's peak resident set (Linux's VmHWM), in KiB; 0 where it is not reported.
fn peak_rss_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
