//! The admission layer: the lending token table and the pool's statistics.
//!
//! `token` owns every admission decision (the lending rules, the waiter queues, the hand-off of
//! a freed token to one waiter); `stats` counts what it decided. This layer never runs, queues
//! or wakes a job: what a waiting job needs to be made runnable travels through it as a
//! [`token::Ticket`] that the worker layer put there and takes back. It imports only `base`.

pub mod stats;
pub mod token;
