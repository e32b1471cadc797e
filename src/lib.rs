//! # treepool
//!
//! A work-stealing thread pool for tree-shaped CPU work (recursive directory walks, divide and
//! conquer, fan-out pipelines) that bounds not only threads but the jobs *started and not yet
//! finished*, and so the memory they hold.
//!
//! Like rayon-core it has per-worker deques, [`join`], [`scope`]/[`Scope::spawn`], [`spawn`] and
//! [`ThreadPool::install`], and a thread that waits never blocks: it runs other pending jobs.
//! Unlike rayon, every job is admitted through a lock-free *lending token table* before it
//! starts. There are `max_inflight` tokens; a job holds one for its whole run and lends it to one
//! child at a time. So, for any tree shape:
//!
//! * at most `max_inflight` jobs execute at once (hold a token they have not lent out; a job
//!   that lends its token goes on running its own code, so CPU use is bounded by the threads);
//! * at most `max_inflight × levels` jobs are in flight (admitted and unfinished), however wide
//!   the tree: a loop spawning a million children waits in [`Scope::spawn`] for admission;
//! * no tree deadlocks, even with `max_inflight = 1` on one thread, and pools may call each
//!   other: a call from a job of another pool runs on its caller's credit instead of waiting
//!   for a token, which adds one to that pool's bounds while it runs ([`Stats::calls_in`]);
//! * no tree overflows a stack through the pool's helping, however deep: every job starts with
//!   at least half of its worker's stack free, and helping that nests deeper runs on stack
//!   segments mapped from the heap ([`Stats::stack_segments`]).
//!
//! An un-stolen `join` touches no shared state: only a thief admits the second half.
//!
//! [`try_scope`] is a scope whose body and jobs return `Result`: the first error cancels it
//! (later spawns and queued jobs are dropped unrun, [`Stats::cancelled`]) and is what the call
//! returns once every started job has finished.
//! [`Scope::map_ordered`] (and [`Scope::try_map_ordered`]) is a pipeline's middle: it maps an
//! iterator on the pool and hands the results back in input order, within a bounded window of
//! items pulled and not yet handed back (`docs/guide.md`, "CPU pipelines").
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! let pool = treepool::ThreadPoolBuilder::new()
//!     .num_threads(2)
//!     .max_inflight(4)
//!     .build()
//!     .unwrap();
//! let files = AtomicUsize::new(0);
//! pool.scope(|s| {
//!     for _dir in 0..10 {
//!         s.spawn(|s| {
//!             for _file in 0..100 {
//!                 s.spawn(|_| {
//!                     let contents = vec![0u8; 1 << 16]; // held while the job runs
//!                     files.fetch_add(contents.len().min(1), Ordering::Relaxed);
//!                 });
//!             }
//!         });
//!     }
//! });
//! assert_eq!(files.into_inner(), 1000);
//! let stats = pool.stats();
//! assert!(stats.peak_executing <= 4);
//! assert!(stats.peak_inflight <= 4 * stats.peak_depth);
//! assert_eq!(stats.inflight, 0);
//! ```
//!
//! See `docs/guide.md` for choosing `max_inflight` and migrating from rayon, and
//! `docs/design.md` for the design and the proofs.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod admission;
mod api;
mod base;
mod worker;

pub use admission::stats::Stats;
pub use api::broadcast::{broadcast, spawn_broadcast, BroadcastContext};
pub use api::builder::{
    max_num_threads, BuildError, ThreadBuilder, ThreadPoolBuildError, ThreadPoolBuilder,
    DEFAULT_TOKENS_PER_THREAD, MAX_INFLIGHT_ENV, NUM_THREADS_ENV, RAYON_NUM_THREADS_ENVS,
    TRACE_ENV, TRACE_EVENTS_ENV,
};
#[allow(deprecated)]
pub use api::configuration::{initialize, Configuration};
pub use api::join::FnContext;
pub use api::ordered::OrderedMap;
pub use api::pool::{
    current_num_threads, current_thread_has_pending_tasks, current_thread_index,
    global_max_inflight, global_stats, join, join_context, scope, spawn, yield_local, yield_now,
    ThreadPool, Yield,
};
pub use api::scope::Scope;
pub use api::scope_fifo::{in_place_scope, in_place_scope_fifo, scope_fifo, spawn_fifo, ScopeFifo};
pub use api::try_scope::{try_scope, TryScope};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Internals exposed to the loom models in `tests/loom/` (built with `--cfg loom` only).
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::admission::token::{
        live_lenders, Admission, Lender, LenderRef, Registration, TokenTable,
    };
    pub use crate::api::ordered::Handoff;
    pub use crate::base::half_stack::{Back, HalfOwner, HalfStack, Place, Steal, HALF_SLOTS};
    pub use crate::base::sync::Arc;
    pub use crate::worker::sleep::Sleep;
}
