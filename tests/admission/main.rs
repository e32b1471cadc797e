//! The lending token table seen from outside: the bounds B1–B5 over many tree shapes, thread
//! counts and caps; the spawn path's shortcuts (admission by help-first, the token hand-off);
//! panics anywhere (payloads whose drop panics, panicking handlers) leaving the pool working and
//! idle.

#[path = "../common/mod.rs"]
mod common;

mod bounds;
mod finished_lenders;
mod panic_safety;
mod parked_loans;
mod spawn_path;
