//! The worker layer: the pool's threads, their queues, the one wait loop, and the job types.
//!
//! Modules, from the bottom up (each imports only those before it, `admission` and `base`):
//! `sleep`, `latch`, `inbox`, `fifo_lanes` (data structures a registry holds); `registry` (a
//! pool's shared state); `half` (a join half's head, what a split stack holds); `thread` (a
//! worker's own state and queues);
//! `grant` (making an admitted waiter runnable); `help_first` (the throughput policies of a
//! spawn that waits for admission); `wait` (the one wait loop and its policies); `admit` (the
//! admission of a spawn, waiting by that loop); `job` (the job types); `routing` (fifo and
//! pinned admission); `borrowed` (a thread that is not the pool's own, entered as a worker); `tracing` (a
//! worker's hooks into its trace ring).
//! Nothing here imports `api`.

pub mod admit;
pub mod borrowed;
pub mod fifo_lanes;
pub mod grant;
pub mod half;
pub mod help_first;
pub mod inbox;
pub mod job;
pub mod latch;
pub mod registry;
pub mod routing;
pub mod sleep;
pub mod thread;
pub mod tracing;
pub mod wait;
