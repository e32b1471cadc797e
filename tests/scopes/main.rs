//! Scopes: `scope` and `spawn`, fifo and in-place scopes, fallible scopes and their cancellation,
//! and broadcasts (`broadcast`, `spawn_broadcast`, `Scope::spawn_broadcast`).

#[path = "../common/mod.rs"]
mod common;

mod basics;
mod broadcast;
mod fifo_and_in_place;
mod try_scope;
mod try_scope_cancellation;
