//! Building a pool: [`ThreadPoolBuilder`] and [`BuildError`].
//!
//! This module owns the configuration and its validation, and the starting of worker threads.
//! It never leaves a half-started pool running: if any worker cannot be started, the ones that
//! did are told to exit and the error names the problem.

use std::fmt;

use crate::registry::{main_loop, PanicHandler, Registry};
use crate::stack::MIN_STACK_SIZE;
use crate::sync::Arc;
use crate::token::MAX_TOKENS;
use crate::ThreadPool;

/// The environment variable read by `num_threads(0)` (the default).
pub const NUM_THREADS_ENV: &str = "TREEPOOL_NUM_THREADS";

/// Tokens per worker thread when `max_inflight` is not set.
///
/// Chosen from the `max_inflight` sweep in `docs/benchmarks.md`: with 2 tokens per thread the
/// seed's indexer and the producer loop ran as fast as with 4, 8 or 16 (1 per thread was a
/// third slower on the indexer), and the memory held grows linearly with the cap.
pub const DEFAULT_TOKENS_PER_THREAD: usize = 2;

/// Configures and builds a [`ThreadPool`], or the global pool.
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new()
///     .num_threads(2)
///     .max_inflight(8)
///     .thread_name(|i| format!("hasher-{i}"))
///     .build()
///     .expect("a pool of 2 threads");
/// assert_eq!(pool.current_num_threads(), 2);
/// assert_eq!(pool.max_inflight(), 8);
/// ```
#[derive(Default)]
pub struct ThreadPoolBuilder {
    num_threads: usize,
    max_inflight: Option<usize>,
    thread_name: Option<Box<dyn FnMut(usize) -> String>>,
    stack_size: Option<usize>,
    pin_threads: bool,
    panic_handler: Option<PanicHandler>,
}

impl fmt::Debug for ThreadPoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPoolBuilder")
            .field("num_threads", &self.num_threads)
            .field("max_inflight", &self.max_inflight)
            .field("stack_size", &self.stack_size)
            .field("pin_threads", &self.pin_threads)
            .finish_non_exhaustive()
    }
}

impl ThreadPoolBuilder {
    /// A builder with the defaults: `num_threads(0)`, `max_inflight` of
    /// [`DEFAULT_TOKENS_PER_THREAD`] per thread, std's thread names and stack size, no pinning.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of worker threads. `0` (the default) means the `TREEPOOL_NUM_THREADS`
    /// environment variable if set, else [`std::thread::available_parallelism`].
    pub fn num_threads(mut self, n: usize) -> Self {
        self.num_threads = n;
        self
    }

    /// The number of tokens: at most this many jobs execute at once, and at most
    /// `max_inflight × levels` are in flight (calls from other pools' jobs add one credit token
    /// each while they run, see [`ThreadPool::install`](crate::ThreadPool::install)). `0`, or
    /// more than 2³² − 1, is a build error.
    pub fn max_inflight(mut self, cap: usize) -> Self {
        self.max_inflight = Some(cap);
        self
    }

    /// Names worker `i` `f(i)`.
    pub fn thread_name<F: FnMut(usize) -> String + 'static>(mut self, f: F) -> Self {
        self.thread_name = Some(Box::new(f));
        self
    }

    /// The stack size of each worker thread, in bytes; at least 64 KiB (smaller sizes are raised
    /// to it). Every job starts with at least half of it free: a job that helping would start
    /// deeper starts on a stack segment of this size instead. A size the OS refuses is a build
    /// error.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Pins worker `i` to core `i mod cores` (via `core_affinity`). Where the core list cannot be
    /// read, `build` fails with a [`BuildError`]; where the OS refuses one pinning, that worker
    /// runs unpinned (pinning is a hint, not a guarantee).
    pub fn pin_threads(mut self, pin: bool) -> Self {
        self.pin_threads = pin;
        self
    }

    /// Handles panics of detached jobs ([`ThreadPool::spawn`], [`spawn`](crate::spawn)). Without
    /// one, the panic message is printed to stderr. Either way the worker survives.
    pub fn panic_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Box<dyn std::any::Any + Send>) + Send + Sync + 'static,
    {
        self.panic_handler = Some(Box::new(handler));
        self
    }

    /// Builds the pool and starts its workers.
    pub fn build(self) -> Result<ThreadPool, BuildError> {
        self.build_registry().map(ThreadPool::from_registry)
    }

    /// Builds the global pool, used by the free functions outside any pool. Fails if the global
    /// pool exists already (it is also built, with defaults, on first use).
    pub fn build_global(self) -> Result<(), BuildError> {
        crate::pool::set_global(self.build_registry()?)
    }

    pub(crate) fn build_registry_for_global(self) -> Result<Arc<Registry>, BuildError> {
        self.build_registry()
    }

    fn build_registry(mut self) -> Result<Arc<Registry>, BuildError> {
        let num_threads = resolve_num_threads(self.num_threads)?;
        let max_inflight = match self.max_inflight {
            Some(0) => return Err(BuildError::new("max_inflight must be at least 1, got 0")),
            Some(cap) if cap > MAX_TOKENS => {
                return Err(BuildError::new(format!(
                    "max_inflight must be at most {MAX_TOKENS}, got {cap}"
                )))
            }
            Some(cap) => cap,
            None => num_threads
                .saturating_mul(DEFAULT_TOKENS_PER_THREAD)
                .min(MAX_TOKENS),
        };
        let cores = match self.pin_threads {
            false => None,
            true => match core_affinity::get_core_ids() {
                Some(cores) if !cores.is_empty() => Some(cores),
                _ => {
                    return Err(BuildError::new(
                        "pin_threads: this machine does not report its cores",
                    ))
                }
            },
        };
        // Every name before any worker starts: a `thread_name` closure that panics then leaves
        // no worker behind.
        let mut names: Vec<Option<String>> = match self.thread_name.as_mut() {
            Some(name) => (0..num_threads).map(|i| Some(name(i))).collect(),
            None => vec![None; num_threads],
        };
        let (registry, seeds) = Registry::new(num_threads, max_inflight, self.panic_handler.take());
        for seed in seeds {
            let index = seed.index();
            let mut builder = std::thread::Builder::new();
            if let Some(name) = names[index].take() {
                builder = builder.name(name);
            }
            let stack_size = self
                .stack_size
                .unwrap_or_else(default_stack_size)
                .max(MIN_STACK_SIZE);
            builder = builder.stack_size(stack_size);
            let core = cores.as_ref().map(|c| c[index % c.len()]);
            let worker_registry = registry.clone();
            let spawned = builder.spawn(move || {
                main_loop(seed, worker_registry, stack_size, |_| {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core);
                    }
                })
            });
            if let Err(err) = spawned {
                registry.terminate();
                return Err(BuildError::new(format!(
                    "cannot start worker thread {index}: {err}{}",
                    match self.stack_size {
                        Some(bytes) => format!(" (stack size {bytes} bytes)"),
                        None => String::new(),
                    }
                )));
            }
        }
        Ok(registry)
    }
}

/// The stack size std gives a thread spawned without one: `RUST_MIN_STACK` if set, else 2 MiB.
/// Passed explicitly, so that a worker knows the size of its stack (see `stack`).
fn default_stack_size() -> usize {
    std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(2 << 20)
}

fn resolve_num_threads(n: usize) -> Result<usize, BuildError> {
    if n > 0 {
        return Ok(n);
    }
    if let Ok(value) = std::env::var(NUM_THREADS_ENV) {
        return match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(BuildError::new(format!(
                "{NUM_THREADS_ENV}={value:?} is not a positive number of threads"
            ))),
        };
    }
    Ok(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Why a pool could not be built. Its message names the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError {
    message: String,
}

impl BuildError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        BuildError {
            message: message.into(),
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BuildError {}
