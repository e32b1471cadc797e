//! A first look at treepool: a recursive tree of jobs under a small token cap.
//!
//! `cargo run --release --example quickstart`
use std::sync::atomic::{AtomicUsize, Ordering};

fn fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

fn main() {
    let pool = treepool::ThreadPoolBuilder::new()
        .max_inflight(4)
        .build()
        .expect("a thread pool");
    println!("fib(30) = {}", pool.install(|| fib(30)));

    let leaves = AtomicUsize::new(0);
    pool.scope(|s| {
        for _ in 0..100 {
            s.spawn(|s| {
                for _ in 0..100 {
                    s.spawn(|_| {
                        leaves.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    println!("{} leaves, {:?}", leaves.into_inner(), pool.stats());
}
