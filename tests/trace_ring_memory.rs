//! Adversarial review of tracing: the memory of a traced pool's rings after the pool is gone.
//! Each worker's ring is `trace_events` × 56 bytes (3.5 MiB at the default 65,536), allocated
//! when the pool is built; once the pool was dropped, its workers exited and its file was
//! written, nothing reads the rings again (the file keeps the pool's rendered text). A program
//! that builds traced pools one after another must not keep every ring it ever allocated.

#[path = "common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, counting live bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn traced_pool_once(path: &Path) {
    let handles = Arc::new(Mutex::new(Vec::new()));
    let h = handles.clone();
    let pool = treepool::ThreadPoolBuilder::new()
        .num_threads(2)
        .trace(path)
        .trace_events(1 << 16)
        .spawn_handler(move |worker| {
            h.lock().unwrap().push(std::thread::spawn(|| worker.run()));
            Ok(())
        })
        .build()
        .unwrap();
    assert_eq!(pool.install(|| treepool::join(|| 1, || 2)), (1, 2));
    drop(pool);
    for t in std::mem::take(&mut *handles.lock().unwrap()) {
        t.join().unwrap();
    }
}

/// Ten traced pools of two workers, built, used for one join and dropped one after another:
/// the live heap afterwards is what the first left plus a little (a few small events each),
/// not ten pools' rings (10 × 2 × 3.5 MiB).
#[test]
fn a_finished_pools_rings_are_freed() {
    common::watchdog(120, || {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-ring-memory.json");
        traced_pool_once(&path);
        let before = LIVE.load(Ordering::SeqCst);
        for _ in 0..10 {
            traced_pool_once(&path);
        }
        let grown = LIVE.load(Ordering::SeqCst) - before;
        assert!(
            grown < 4 << 20,
            "the live heap grew by {} MiB over 10 finished traced pools",
            grown >> 20
        );
    });
}
