//! `rayon-compat PROGRAM`: runs one rayon program on rayon's global pool, checks its result
//! against a sequential computation (exits non-zero if they differ), and prints what
//! tests/rayon_compat.rs checks, one `key=value` per line: the result and the global pool's
//! treepool `Stats` after the program.

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

fn main() {
    let program = std::env::args().nth(1).unwrap_or_default();
    let result = match program.as_str() {
        "sum" => sum(),
        "sort" => sort(),
        "bridge" => bridge(),
        "scope" => scope(),
        other => panic!("unknown program {other:?}: sum, sort, bridge or scope"),
    };
    let stats = treepool::global_stats();
    println!("result={result}");
    println!("threads={}", rayon::current_num_threads());
    println!("max_inflight={}", treepool::global_max_inflight());
    println!("peak_executing={}", stats.peak_executing);
    println!("peak_inflight={}", stats.peak_inflight);
    println!("peak_depth={}", stats.peak_depth);
    println!(
        "admitted={}",
        stats.admitted_on_loan + stats.admitted_from_pool
    );
    println!("inflight={}", stats.inflight);
    println!("executing={}", stats.executing);
    println!("tokens_in_use={}", stats.tokens_in_use);
}

/// `par_iter().map().sum()` over a million numbers.
fn sum() -> u64 {
    let numbers: Vec<u64> = (0..1_000_000).collect();
    let parallel: u64 = numbers.par_iter().map(|x| x * x % 1_000_003).sum();
    let sequential: u64 = numbers.iter().map(|x| x * x % 1_000_003).sum();
    assert_eq!(parallel, sequential);
    parallel
}

/// `par_sort` of a million pseudo-random numbers; the result is their count.
fn sort() -> u64 {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut numbers: Vec<u64> = (0..1_000_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % 100_000
        })
        .collect();
    let mut expected = numbers.clone();
    expected.sort();
    numbers.par_sort();
    assert!(numbers == expected, "par_sort differs from sort");
    numbers.len() as u64
}

/// `par_bridge` over an iterator that takes a millisecond per item, as a reader would.
fn bridge() -> u64 {
    let slow = (0..200u64).inspect(|_| std::thread::sleep(std::time::Duration::from_millis(1)));
    let mut doubled: Vec<u64> = slow.par_bridge().map(|x| x * 2).collect();
    doubled.sort_unstable();
    assert!(doubled == (0..200).map(|x| x * 2).collect::<Vec<_>>());
    doubled.iter().sum()
}

/// A `rayon::scope` fan-out: 100 jobs spawning 100 each, every leaf holding a 64 KiB buffer.
/// The result is the number of leaves run.
fn scope() -> u64 {
    let leaves = AtomicUsize::new(0);
    rayon::scope(|s| {
        for _ in 0..100 {
            s.spawn(|s| {
                for _ in 0..100 {
                    s.spawn(|_| {
                        let buffer = vec![1u8; 64 << 10];
                        let ones: usize = buffer.iter().map(|&b| usize::from(b)).sum();
                        leaves.fetch_add(ones >> 16, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    leaves.into_inner() as u64
}
