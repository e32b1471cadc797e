//! A finished job whose token is out on loan is released before the loan comes back: a
//! spawn-first chain (each link spawns the next link, then a leaf, then returns) and a detached
//! chain keep a constant amount of memory, however long they are.
//!
//! Rule 4 parks a finished job's token with its loan. A job finishing while lending takes over
//! the tokens its finished lenders parked with its loan (`Lender::take_over_parked`), so each
//! link, as it finishes, frees the one above it, and the chain holds two finished links at a
//! time; were the finished links kept until the last one returns the loan up the chain, the
//! chain would hold one allocation per link. (Added with issue "Spawn at rayon's cost in every
//! shape"; before it, 100,000 links held 8 MB here.)
//!
//! The binary counts live heap bytes with a global allocator; its one test runs the shapes one
//! after the other, so no other test allocates meanwhile.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use treepool::{Scope, ThreadPool, ThreadPoolBuilder};

/// `System`, counting the bytes alive and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to `System`, which upholds `GlobalAlloc`'s contract; the counters only count.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: counts read after the measured run, which the pool's latches order.
        let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Relaxed: as above.
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The peak of live heap bytes during `f`, above the bytes live when it began.
fn peak_heap_during(f: impl FnOnce()) -> usize {
    // Relaxed: this thread's own reads and writes around `f`, which returns only once the
    // measured jobs are done.
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - base
}

/// Links per chain: fewer in builds with debug assertions (slower), still far more than the
/// bound below allows a link each.
fn links() -> usize {
    if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    }
}

/// The most heap a chain may hold at its peak: a few kilobytes of fixed cost (a deque's buffer,
/// a stack segment's bookkeeping), and far less than a finished link's allocation per link.
fn bound(links: usize) -> usize {
    64 * 1024 + links * 8
}

fn link<'s>(s: &Scope<'s>, d: usize, leaves: &'s AtomicUsize) {
    if d == 0 {
        return;
    }
    s.spawn(move |s| link(s, d - 1, leaves));
    s.spawn(move |_| {
        // Relaxed: a count read after the scope, which waits for every job.
        leaves.fetch_add(1, Ordering::Relaxed);
    });
}

fn detached_link(d: usize, ran: Arc<AtomicUsize>, done: mpsc::Sender<()>) {
    // Relaxed: a count read after `done`, whose channel orders it.
    ran.fetch_add(1, Ordering::Relaxed);
    if d == 0 {
        let _ = done.send(());
        return;
    }
    let side = ran.clone();
    treepool::spawn(move || detached_link(d - 1, ran, done));
    treepool::spawn(move || {
        // Relaxed: as above (this leaf may run after the last link sent `done`: see below).
        side.fetch_add(1, Ordering::Relaxed);
    });
}

fn one_thread_pool() -> ThreadPool {
    ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool")
}

fn spawn_first_chain(pool: &ThreadPool, links: usize) -> usize {
    let leaves = AtomicUsize::new(0);
    let peak = peak_heap_during(|| pool.scope(|s| link(s, links, &leaves)));
    assert_eq!(leaves.into_inner(), links, "every leaf ran");
    peak
}

fn detached_chain(pool: &ThreadPool, links: usize) -> usize {
    let ran = Arc::new(AtomicUsize::new(0));
    let peak = peak_heap_during(|| {
        let (done, finished) = mpsc::channel();
        let first = ran.clone();
        pool.spawn(move || detached_link(links, first, done));
        finished.recv().expect("the last link ran");
        common::settle([pool]);
    });
    // Every link and every leaf: the links 0..=links, and a leaf for each link above 0.
    assert_eq!(ran.load(Ordering::Relaxed), 2 * links + 1, "every job ran");
    peak
}

#[test]
fn chains_of_finished_jobs_hold_constant_memory() {
    common::watchdog(120, || {
        let links = links();
        let pool = one_thread_pool();
        // Warm-up: the deque's buffer, the worker's first allocations.
        spawn_first_chain(&pool, 1_000);
        detached_chain(&pool, 1_000);
        let chain = spawn_first_chain(&pool, links);
        let detached = detached_chain(&pool, links);
        eprintln!(
            "peak heap above the start: spawn-first chain of {links} links {chain} B, \
             detached chain {detached} B (bound {} B)",
            bound(links)
        );
        assert!(
            chain <= bound(links),
            "a spawn-first chain of {links} links held {chain} bytes at its peak"
        );
        assert!(
            detached <= bound(links),
            "a detached chain of {links} links held {detached} bytes at its peak"
        );
    });
}
