//! The ordered streaming map (`Scope::map_ordered`, `Scope::try_map_ordered`): its contract
//! (order, window, errors, panics, early drop), and its consumers of every kind (workers of the
//! scope's pool or of another, plain threads, handlers, non-owners of in-place scopes), how they
//! wait and are woken, and streams nested in other work.

#[path = "../common/mod.rs"]
mod common;

mod consumer_kinds;
mod consumer_wakes;
mod contract;
mod in_place_consumers;
mod nesting;
mod plain_thread_consumers;
mod window_and_panics;
