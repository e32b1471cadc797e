//! The pool's threads: the builder (options, errors, names, stacks), its handlers, the builder's
//! own thread as worker 0 (`use_current_thread`), the global pool, and idle workers that sleep.

#[path = "../common/mod.rs"]
mod common;

mod builder;
mod environment;
mod global;
mod handlers;
mod idle;
mod memory;
mod use_current_thread;
