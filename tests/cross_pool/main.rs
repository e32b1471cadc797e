//! Calls between pools: a job of one pool calling, spawning into or opening an (in-place) scope
//! of another, random trees across pools and the shrunk deadlock shapes, cycles of single-token
//! pools, pools dropped mid-flight and work given to a terminated pool; each pool's bounds with the
//! credit of calls from others.

#[path = "../common/mod.rs"]
mod common;

mod builders_thread_races_a_drop_elsewhere;
mod calls;
mod declined_halves;
mod deferred_spawns_and_cycles;
mod free_calls_pick_their_pool;
mod in_place_scopes;
mod terminated_pools;
mod trees_and_shapes;
mod waits_of_every_kind;
