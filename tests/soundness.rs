//! Regression tests for the soundness bugs of issue "Soundness first": each one failed (under
//! AddressSanitizer and `--cfg treepool_chaos` where the bug is a memory error) before its fix.
//! Every test runs under a watchdog.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{pool, watchdog};

/// Bug 1: a child published in its parent's borrower slot before its reference was counted.
/// Many outside threads scope nested spawns on one small pool, so that loans come back while
/// spawners register. Under AddressSanitizer the old code reported heap-use-after-free here.
#[test]
fn outside_threads_scoping_nested_spawns_on_one_pool() {
    watchdog(300, || {
        for cap in [1, 3] {
            let pool = Arc::new(pool(2, cap));
            let leaves = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..16)
                .map(|_| {
                    let (pool, leaves) = (pool.clone(), leaves.clone());
                    std::thread::spawn(move || {
                        for _ in 0..40 {
                            pool.scope(|s| {
                                for _ in 0..4 {
                                    s.spawn(|s| {
                                        for _ in 0..3 {
                                            s.spawn(|_| {
                                                leaves.fetch_add(1, Ordering::Relaxed);
                                            });
                                        }
                                    });
                                }
                            });
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("a scoping thread");
            }
            assert_eq!(leaves.load(Ordering::Relaxed), 16 * 40 * 12);
            common::assert_idle(&pool.stats());
        }
    });
}
