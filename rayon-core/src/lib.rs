//! rayon-core 1.13's API on [treepool]: every public item of rayon-core, re-exported from
//! treepool, so that rayon (1.11 or 1.12) and every crate written against rayon-core run on
//! treepool's pool once their `rayon-core` dependency is patched to this crate:
//!
//! ```toml
//! [patch.crates-io]
//! rayon-core = { git = "https://example.org/treepool.git" } # treepool's repository
//! # or, from a local clone:
//! # rayon-core = { path = "../treepool/rayon-core" }
//! ```
//!
//! This crate holds no logic: each item *is* treepool's, with rayon-core's signature, so
//! `rayon::ThreadPoolBuilder::new().max_inflight(8)` and `pool.stats()` work in a rayon
//! program, and the global pool's bounds are set and read through treepool
//! (`TREEPOOL_MAX_INFLIGHT`, [`treepool::global_stats`]). What behaves differently from
//! rayon-core (a spawn waits for admission; spawn order under backpressure) is in treepool's
//! `docs/guide.md`, "Migrating from rayon".
//!
//! The `web_spin_lock` feature, which rayon forwards, does nothing: on rayon-core it selects
//! spin locks for wasm32 targets with atomics, which treepool does not support.
//!
//! ```
//! let pool = rayon_core::ThreadPoolBuilder::new().num_threads(2).max_inflight(4).build().unwrap();
//! let (a, b) = pool.join(|| 1, || 2);
//! assert_eq!(a + b, 3);
//! assert!(pool.stats().peak_executing <= 4);
//! ```

#[allow(deprecated)]
pub use treepool::{
    broadcast, current_num_threads, current_thread_has_pending_tasks, current_thread_index,
    in_place_scope, in_place_scope_fifo, initialize, join, join_context, max_num_threads, scope,
    scope_fifo, spawn, spawn_broadcast, spawn_fifo, yield_local, yield_now, BroadcastContext,
    Configuration, FnContext, Scope, ScopeFifo, ThreadBuilder, ThreadPool, ThreadPoolBuildError,
    ThreadPoolBuilder, Yield,
};
