//! Loom models (built with `--cfg loom` only): the lending token table, lazy join's promotion,
//! the sleep/wake protocol and the ordered stream's handshakes, each against the real types
//! through `treepool::__loom`. Run with
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
//!     cargo test --release --test loom
//! ```
//!
//! (a module alone: `--test loom tokens::`).

#![cfg(loom)]

mod runner;

mod join;
mod ordered;
mod sleep;
mod tokens;
