//! The API layer: every public entry point, each a use of the worker layer's jobs and waits.
//!
//! Modules, from the bottom up (each imports only those before it and the lower layers):
//! `builder`, `join`, `scope`, `ordered`, `pool`, `configuration` (rayon-core's deprecated
//! API), `scope_fifo`, `try_scope`, `broadcast`.

pub mod broadcast;
pub mod builder;
pub mod configuration;
pub mod join;
pub mod ordered;
pub mod pool;
pub mod scope;
pub mod scope_fifo;
pub mod try_scope;
