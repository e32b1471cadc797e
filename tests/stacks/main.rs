//! Worker stacks: deep spawn trees that never overflow a worker's stack, and the stack-headroom
//! rule at its edges. Each case runs in a child process (an overflow aborts).

#[path = "../common/mod.rs"]
mod common;

mod deep_trees;
mod headroom;
