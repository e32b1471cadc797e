//! `join`: its results and panics, lazy halves promoted on request or while a worker is idle,
//! how a tree spreads over the threads, `join_context`, the yields and the pending-work queries.

#[path = "../common/mod.rs"]
mod common;

mod basics;
mod context_and_yield;
mod context_take_back;
mod halves_for_an_idle_worker_after_its_first;
mod halves_run_by_waits;
mod last_unclaimed_half_counts_idle;
mod lazy;
mod split_stack_edges;
mod spreading;
