//! The base layer: what every mechanism builds on and that knows no mechanism.
//!
//! `sync` (the std/loom switch), `chaos` (random pauses for stress runs), `half_stack` (the
//! split stack of a worker's unrun join halves), `job_memory` (the
//! recycled allocations of spawned jobs), `job_ref` (the
//! type-erased reference to a runnable job and what a job's run returns), `stack` (stack
//! bounds and segments) and `pacing` (a thief's judgement of a stolen job's worth) `wake` (whom a setter wakes) and `trace` (the
//! rings of recorded events and the trace file's writer). Nothing here
//! may import another layer of the crate.

pub mod chaos;
pub mod half_stack;
pub mod job_memory;
pub mod job_ref;
pub mod pacing;
pub mod stack;
pub mod sync;
pub mod trace;
pub mod wake;
