//! The help-first admission policy's state: a throughput policy, not a liveness rule.
//!
//! A spawn on a worker that finds no token free first runs the newest jobs of its own deque
//! (usually the siblings whose tokens it waits for) and takes a token one of them frees
//! straight from the `Spare`, without registering anywhere (`WorkerThread::help_until_admitted`).
//! Once a job that loop runs waits itself for [`BURIED_WAITS`] other admissions, the spawn is
//! *published* (registered as an ordinary waiter, `WorkerThread::publish_waiting_spawn`), so a
//! token freed on another thread can reach it. Nothing here is needed for B1–B6: without it
//! every spawn would register at once (the slow path), which is correct and slower. This module
//! holds the state those two steps share; it runs nothing.

use std::cell::{Cell, OnceCell};
use std::ptr;

use crate::admission::token::{Lender, LenderRef};
use crate::base::job_ref::JobRef;
use crate::worker::latch::CountLatch;

/// How many admission waits of other spawns a thread goes through above a waiting spawn before
/// a wait there publishes it (see [`WaitingSpawn`]): a spawn buried that briefly gets its token
/// back soon, on this thread, and registering it only costs. Tuned on: the 1,000 × 100 fan-out
/// (`benches/scope_fanout.rs`) and the seed's indexer (`examples/designs.rs`, `benches/indexer.rs`:
/// publishing spawns buried only briefly cost it a few percent and doubled its peak files).
pub const BURIED_WAITS: u64 = 2;

/// A spawn of this thread waiting for admission in the help-first loop, as the waits above it
/// on the same thread see it. The loop registers nothing: a token freed by a job it runs reaches
/// it through the `Spare`. But once a job that the loop runs waits itself, the spawn is buried
/// under that wait for as long as it takes, where a token freed on another thread could not
/// reach it; so that wait *publishes* it first: registers it in the token table, as the slow path
/// does, and its granter makes it runnable (rule 5). The loop then waits for that grant.
pub struct WaitingSpawn {
    pub(super) lender: *const Lender,
    /// The spawning job (the thread's current job when it spawned), whose loop this is: alive
    /// while the loop runs, where the lender may be gone once the spawn is published.
    pub(super) parent: *const Lender,
    pub(super) job: JobRef,
    pub(super) scope: *const CountLatch,
    /// Set once published: the reference to wait on and settle, or `None` if the registration
    /// admitted the job at once (then it is runnable).
    pub(super) published: OnceCell<Option<LenderRef>>,
    /// The thread's count of admission waits when the spawn began to wait (its own included).
    pub(super) since: u64,
}

/// How a help-first loop ended.
pub enum Helped {
    /// Admitted on a token the loop found; `counted`: with a place in the scope's count.
    Admitted { counted: bool },
    /// Registered by a wait above the loop (see [`WaitingSpawn`]); maybe admitted already.
    Published,
    /// The thread's deque ran dry first.
    Dry,
}

/// The scope of the spawn waiting in `help_until_admitted`, and whether a finished job of that
/// scope handed it its place in the scope's count (with its token, in `Spare`). Plain cells: only
/// the owning thread touches them.
pub struct CountHandoff {
    pub(super) scope: Cell<*const CountLatch>,
    pub(super) passed: Cell<bool>,
}

impl Default for CountHandoff {
    fn default() -> Self {
        CountHandoff {
            scope: Cell::new(ptr::null()),
            passed: Cell::new(false),
        }
    }
}
