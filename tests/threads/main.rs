//! The pool's threads: the builder (options, errors, names, stacks), its handlers, the builder's
//! own thread as worker 0 (`use_current_thread`), the global pool, and idle workers that sleep.

#[path = "../common/mod.rs"]
mod common;

mod builder;
mod environment;
mod global;
mod handlers;
mod idle;
// Reads `/proc/self/status` and sets a Linux paging policy.
#[cfg(target_os = "linux")]
mod memory;
mod use_current_thread;
