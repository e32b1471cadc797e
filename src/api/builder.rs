//! Building a pool: [`ThreadPoolBuilder`] and [`BuildError`].
//!
//! This module owns the configuration and its validation, and the starting of worker threads.
//! It never leaves a half-started pool running: if any worker cannot be started (std refuses the
//! thread, a `spawn_handler` fails or panics), the ones that did are told to exit and the error
//! names the problem; what can be checked before any thread starts (the number of threads, the
//! names, the environment) is checked first. It starts the workers only: the threads, whoever
//! made them ([`ThreadPoolBuilder::spawn_handler`], or the builder's own with
//! [`ThreadPoolBuilder::use_current_thread`], see `borrowed`), run the same worker, and it never
//! runs a start or exit handler inside a job.

use std::any::Any;
use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex as StdMutex, OnceLock};

use crate::admission::token::MAX_TOKENS;
use crate::base::stack::{Headroom, MIN_STACK_SIZE};
use crate::base::sync::Arc;
use crate::base::trace::{PoolTrace, DEFAULT_TRACE_EVENTS, MAX_TRACE_EVENTS};
pub use crate::base::trace::{TRACE_ENV, TRACE_EVENTS_ENV};
use crate::worker::borrowed;
use crate::worker::registry::{PanicHandler, Registry, WorkerSeed};
use crate::worker::thread::WorkerThread;
use crate::worker::wait::main_loop;

/// The environment variable read by `num_threads(0)` (the default): a number of threads from 1
/// to [`max_num_threads`] (surrounding whitespace ignored), which wins over
/// [`RAYON_NUM_THREADS_ENVS`]. Any other value (empty, `0`, negative, not a number, too large,
/// not UTF-8) fails the build with a [`BuildError`] whose message starts with the variable and
/// the value (`TREEPOOL_NUM_THREADS="0": ...`); the global pool's first use then panics with
/// that message. Not read when `num_threads` is given a count.
pub const NUM_THREADS_ENV: &str = "TREEPOOL_NUM_THREADS";

/// rayon-core's environment variables for `num_threads(0)`, in its order, read as rayon-core
/// reads them, after [`NUM_THREADS_ENV`] (which wins when set): the first that holds a number
/// decides, a positive one sizes the pool (reduced to [`max_num_threads`]) and `0` means the
/// available parallelism; a value that is not a number (negative, empty, with whitespace, above
/// `usize::MAX`, not UTF-8) is skipped. Never an error, as in rayon-core 1.13.
pub const RAYON_NUM_THREADS_ENVS: [&str; 2] = ["RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS"];

/// The environment variable read by a builder whose `max_inflight` is not set (the global pool
/// built on first use, and every pool built without [`ThreadPoolBuilder::max_inflight`]): a
/// number of tokens from 1 to 2³² − 1 (surrounding whitespace ignored). Any other value (empty,
/// `0`, negative, not a number, too large, not UTF-8) fails the build with a [`BuildError`]
/// whose message starts with the variable and the value (`TREEPOOL_MAX_INFLIGHT="0": ...`);
/// the global pool's first use then panics with that message.
pub const MAX_INFLIGHT_ENV: &str = "TREEPOOL_MAX_INFLIGHT";

/// Tokens per worker thread when `max_inflight` is not set.
///
/// Chosen from the `max_inflight` sweep in `docs/benchmarks-notes.md` ("The default
/// `max_inflight`"): the seed's indexer and the producer loop run as fast with 2 tokens a thread
/// as with more, but a search that spawns from inside spawns (rayon-demo's TSP) leaves a worker
/// asleep while every token sits in a frame buried on another worker's stack: 1.08× rayon's
/// time at 2 a thread, 0.96× at 4. The memory a spawning loop holds grows linearly with the
/// cap (the producer loop: 0.5 MiB at 2 a thread, 0.9 MiB at 4, rayon about 30 MiB).
pub const DEFAULT_TOKENS_PER_THREAD: usize = 4;

/// The most worker threads a pool has: more, asked of [`ThreadPoolBuilder::num_threads`] or
/// through rayon's variables, are reduced to this (more in `TREEPOOL_NUM_THREADS` are an
/// error). Thieves and the sleep's wake-ups scan every worker, so
/// far more threads than cores only cost.
const MAX_THREADS: usize = 4096;

/// The most worker threads treepool supports in one pool (4096): a larger
/// [`ThreadPoolBuilder::num_threads`] or `RAYON_NUM_THREADS` is reduced to it, as
/// rayon-core's `max_num_threads` documents (rayon's own limit is 65535 on 64-bit targets); a
/// larger `TREEPOOL_NUM_THREADS` is a build error ([`NUM_THREADS_ENV`]).
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// assert!(pool.current_num_threads() <= treepool::max_num_threads());
/// ```
pub fn max_num_threads() -> usize {
    MAX_THREADS
}

/// A start or exit handler: called with the worker's index.
type Handler = Box<dyn Fn(usize) + Send + Sync>;

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
///
/// `S` is how its worker threads are started: std's `thread::Builder` by default, or the
/// user's [`spawn_handler`](ThreadPoolBuilder::spawn_handler) (as in rayon-core, the type is
/// not named by user code).
pub struct ThreadPoolBuilder<S = DefaultSpawn> {
    num_threads: usize,
    max_inflight: Option<usize>,
    thread_name: Option<Box<dyn FnMut(usize) -> String>>,
    stack_size: Option<usize>,
    pin_threads: bool,
    panic_handler: Option<PanicHandler>,
    start_handler: Option<Handler>,
    exit_handler: Option<Handler>,
    use_current_thread: bool,
    trace: Option<PathBuf>,
    trace_events: Option<usize>,
    spawn_handler: S,
}

impl Default for ThreadPoolBuilder {
    fn default() -> Self {
        ThreadPoolBuilder {
            num_threads: 0,
            max_inflight: None,
            thread_name: None,
            stack_size: None,
            pin_threads: false,
            panic_handler: None,
            start_handler: None,
            exit_handler: None,
            use_current_thread: false,
            trace: None,
            trace_events: None,
            spawn_handler: DefaultSpawn,
        }
    }
}

impl<S> fmt::Debug for ThreadPoolBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPoolBuilder")
            .field("num_threads", &self.num_threads)
            .field("max_inflight", &self.max_inflight)
            .field("stack_size", &self.stack_size)
            .field("pin_threads", &self.pin_threads)
            .field("use_current_thread", &self.use_current_thread)
            .field("trace", &self.trace)
            .field("trace_events", &self.trace_events)
            .finish_non_exhaustive()
    }
}

impl ThreadPoolBuilder {
    /// A builder with the defaults: `num_threads(0)`, `max_inflight` of
    /// [`DEFAULT_TOKENS_PER_THREAD`] per thread, std's thread names and stack size, no pinning.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S> ThreadPoolBuilder<S> {
    /// The number of worker threads. `0` (the default) means the `TREEPOOL_NUM_THREADS`
    /// environment variable if set (a value that is not a number from 1 to
    /// [`max_num_threads`] is a build error naming the variable and the value:
    /// [`NUM_THREADS_ENV`]), else rayon-core's `RAYON_NUM_THREADS`, else its deprecated
    /// `RAYON_RS_NUM_CPUS` ([`RAYON_NUM_THREADS_ENVS`]: read as rayon-core reads them, never an
    /// error), else [`std::thread::available_parallelism`]. More than [`max_num_threads`],
    /// given here or in rayon's variables, is reduced to it.
    ///
    /// ```
    /// // A rayon program's setting sizes default pools, unless TREEPOOL_NUM_THREADS is set.
    /// # std::env::remove_var(treepool::NUM_THREADS_ENV);
    /// std::env::set_var("RAYON_NUM_THREADS", "3");
    /// let pool = treepool::ThreadPoolBuilder::new().build().unwrap();
    /// assert_eq!(pool.current_num_threads(), 3);
    /// ```
    pub fn num_threads(mut self, n: usize) -> Self {
        self.num_threads = n;
        self
    }

    /// The number of tokens: at most this many jobs execute at once, and at most
    /// `max_inflight × levels` are in flight (calls from other pools' jobs add one credit token
    /// each while they run, see [`ThreadPool::install`](crate::ThreadPool::install)). `0`, or
    /// more than 2³² − 1, is a build error.
    ///
    /// Not set, it is the `TREEPOOL_MAX_INFLIGHT` environment variable ([`MAX_INFLIGHT_ENV`])
    /// if set, under the same rule (a value that is not a number from 1 to 2³² − 1 is a build
    /// error naming the variable and the value), else [`DEFAULT_TOKENS_PER_THREAD`] per
    /// thread. Set, the variable is not read. The variable is how a program that never builds a
    /// pool (a rayon program on treepool's global pool) sets its cap.
    ///
    /// ```
    /// std::env::set_var(treepool::MAX_INFLIGHT_ENV, "5");
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// assert_eq!(pool.max_inflight(), 5);
    /// let set = treepool::ThreadPoolBuilder::new().num_threads(2).max_inflight(3).build();
    /// assert_eq!(set.unwrap().max_inflight(), 3); // the builder's value wins
    /// ```
    pub fn max_inflight(mut self, cap: usize) -> Self {
        self.max_inflight = Some(cap);
        self
    }

    /// Names worker `i` `f(i)`. A name with a NUL byte in it is a build error.
    pub fn thread_name<F: FnMut(usize) -> String + 'static>(mut self, f: F) -> Self {
        self.thread_name = Some(Box::new(f));
        self
    }

    /// The stack size of each worker thread, in bytes; at least 64 KiB (smaller sizes are raised
    /// to it). Every job starts with at least half of it free: a job that helping would start
    /// deeper starts on a stack segment of this size instead. A size the OS refuses is a build
    /// error. Threads of a [`spawn_handler`](ThreadPoolBuilder::spawn_handler) get it through
    /// [`ThreadBuilder::stack_size`] and may ignore it: the rule then reads the stack they have.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Pins worker `i` to core `i mod cores` (via `core_affinity`). Where the core list cannot be
    /// read, `build` fails with a [`BuildError`]; where the OS refuses one pinning, that worker
    /// runs unpinned (pinning is a hint, not a guarantee). With
    /// [`use_current_thread`](ThreadPoolBuilder::use_current_thread) the builder's thread is not
    /// pinned.
    pub fn pin_threads(mut self, pin: bool) -> Self {
        self.pin_threads = pin;
        self
    }

    /// Handles panics of detached jobs ([`ThreadPool::spawn`], [`spawn`](crate::spawn)) and of
    /// the start and exit handlers. Without one, the panic message is printed to stderr (rayon
    /// aborts the process instead). Either way the worker survives.
    pub fn panic_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Box<dyn Any + Send>) + Send + Sync + 'static,
    {
        self.panic_handler = Some(Box::new(handler));
        self
    }

    /// Calls `handler(index)` on each worker thread the pool starts, before it runs any pool
    /// work (not on the builder's thread with
    /// [`use_current_thread`](ThreadPoolBuilder::use_current_thread), as in rayon-core).
    ///
    /// Admission: the handler runs outside any job and holds no token; a call into the pool
    /// from it starts a root job on a pool token, like a call from outside the pool but run on
    /// this thread when a token is free (`current_thread_index` is the worker's there). A panic
    /// in it goes to the [`panic_handler`](ThreadPoolBuilder::panic_handler), or is printed (rayon
    /// aborts without a panic handler); the worker then starts normally.
    ///
    /// ```
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let pool = treepool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .start_handler(move |index| tx.send(index).unwrap())
    ///     .build()
    ///     .unwrap();
    /// let mut started: Vec<usize> = rx.iter().take(2).collect();
    /// started.sort();
    /// assert_eq!(started, [0, 1]);
    /// # drop(pool);
    /// ```
    pub fn start_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.start_handler = Some(Box::new(handler));
        self
    }

    /// Calls `handler(index)` on each worker thread the pool started, once the pool was dropped
    /// and the worker ran out of work, just before the thread exits. Admission and panics: as
    /// for [`start_handler`](ThreadPoolBuilder::start_handler): a call into the pool from an
    /// exit handler is a root job on a pool token (while another handler's call holds the
    /// token, the handler's thread waits for it, running the pool's jobs). What it spawns still
    /// runs: the worker drains the pool again after the handler returns, before the thread
    /// exits (the other workers may have exited already).
    pub fn exit_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.exit_handler = Some(Box::new(handler));
        self
    }

    /// Makes the builder's own thread worker 0 of the pool, as rayon-core does: `build`
    /// starts one thread fewer, and [`current_thread_index`](crate::current_thread_index) is
    /// `Some(0)` on the builder's thread from then on. The thread runs pool work only while it
    /// is inside a call into the pool (`install`, `join`, `scope`, `spawn`, free or methods):
    /// other workers steal from it then, and when the call returns it leaves nothing behind that
    /// another worker would wait for (see `docs/design.md` §4.9). With `num_threads(1)` the pool
    /// therefore runs work only while its builder's thread is in a call: a call from another
    /// thread waits until it is.
    ///
    /// Admission: a call from the builder's thread outside every job of the pool starts a root
    /// job on a pool token (never credit), run on the builder's thread when a token is free
    /// at once, else where its token is granted; while it waits, the thread runs other jobs of
    /// the pool. Start and exit handlers do not run for it.
    ///
    /// The thread stays worker 0 until the pool is dropped (on any thread; the thread leaves
    /// it at its next call, or once a call in progress returns, running what is left queued in
    /// the pool first if it is the pool's only thread), or until it exits; with
    /// [`build_global`](ThreadPoolBuilder::build_global), for the whole process. It is then a
    /// plain thread again: its free calls go to the global pool.
    /// Building while the thread is a worker of any pool, or worker 0 of another one, is a
    /// build error.
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .use_current_thread()
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(treepool::current_thread_index(), Some(0));
    /// assert_eq!(pool.install(|| treepool::current_thread_index()), Some(0));
    /// ```
    pub fn use_current_thread(mut self) -> Self {
        self.use_current_thread = true;
        self
    }

    /// Records what the pool's workers do (every job run, with its kind, how it came to run
    /// there and its closure's type name; admission waits, grants, promotions, steals, sleeps
    /// and wake-ups) and writes it to the file at `path` in Chrome's trace event format
    /// (Perfetto, chrome://tracing, or `cargo run --release --example trace_view -- FILE`).
    /// Each worker keeps its last [`trace_events`](ThreadPoolBuilder::trace_events) events.
    ///
    /// The file is written by the pool's last worker thread to exit, once the pool was dropped
    /// and its queued work ran (the drop itself returns at once, as ever: join the threads of a
    /// [`spawn_handler`](ThreadPoolBuilder::spawn_handler) to wait for the file), or when the
    /// process exits normally (Linux), whichever comes first; pools traced to the same path share the
    /// file, numbered in the order they were built. A file that cannot be written is reported
    /// in one line on stderr. An empty path is a build error.
    ///
    /// Not set, it is the `TREEPOOL_TRACE` environment variable ([`TRACE_ENV`]) if set and not
    /// empty: how a program that never builds a pool (a rayon program on treepool) is traced.
    /// Off, tracing costs a join or a spawn nothing measurable (`docs/benchmarks.md`).
    ///
    /// ```
    /// let path = std::env::temp_dir().join("treepool-doc-trace.json");
    /// let threads = std::sync::Mutex::new(Vec::new());
    /// let pool = treepool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .trace(&path)
    ///     .spawn_handler(|worker| {
    ///         threads.lock().unwrap().push(std::thread::spawn(|| worker.run()));
    ///         Ok(())
    ///     })
    ///     .build()
    ///     .unwrap();
    /// pool.install(|| treepool::join(|| 1, || 2));
    /// drop(pool);
    /// for thread in threads.into_inner().unwrap() {
    ///     thread.join().unwrap(); // the last one out wrote the file
    /// }
    /// assert!(std::fs::read_to_string(&path).unwrap().contains("traceEvents"));
    /// ```
    pub fn trace(mut self, path: impl Into<PathBuf>) -> Self {
        self.trace = Some(path.into());
        self
    }

    /// How many events each worker keeps while tracing (the last ones; the file says how many
    /// each overwrote): 1 to 2²⁴, 65,536 by default. `0` or more is a build error. Not set, it
    /// is the `TREEPOOL_TRACE_EVENTS` environment variable ([`TRACE_EVENTS_ENV`]) if set, under
    /// the same rule, else the default. Without tracing it is checked, and unused.
    pub fn trace_events(mut self, n: usize) -> Self {
        self.trace_events = Some(n);
        self
    }

    /// Starts each worker thread with `spawn` instead of std's `thread::Builder`, as in
    /// rayon-core: `spawn` gets a [`ThreadBuilder`] and must call [`ThreadBuilder::run`] on a
    /// thread of its own (returning at once); an error it returns is a build error, and the
    /// workers started before it exit. The threads run the workers only: every bound holds as
    /// in any pool, and the stack-headroom rule reads each thread's own stack (where it
    /// cannot, every job of that thread starts on a stack segment).
    ///
    /// The threads exit once the pool is dropped and its work is done, not before: a
    /// `ThreadBuilder` that is never run leaves its worker missing (its deque stays empty; the
    /// pool's work goes to the other workers, and a pool with none left runs nothing).
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new()
    ///     .num_threads(2)
    ///     .spawn_handler(|thread| {
    ///         std::thread::Builder::new()
    ///             .name(format!("mine-{}", thread.index()))
    ///             .spawn(|| thread.run())?;
    ///         Ok(())
    ///     })
    ///     .build()
    ///     .unwrap();
    /// let name = pool.install(|| std::thread::current().name().map(str::to_owned));
    /// assert!(name.unwrap().starts_with("mine-"));
    /// ```
    pub fn spawn_handler<F>(self, spawn: F) -> ThreadPoolBuilder<CustomSpawn<F>>
    where
        F: FnMut(ThreadBuilder) -> io::Result<()>,
    {
        ThreadPoolBuilder {
            num_threads: self.num_threads,
            max_inflight: self.max_inflight,
            thread_name: self.thread_name,
            stack_size: self.stack_size,
            pin_threads: self.pin_threads,
            panic_handler: self.panic_handler,
            start_handler: self.start_handler,
            exit_handler: self.exit_handler,
            use_current_thread: self.use_current_thread,
            trace: self.trace,
            trace_events: self.trace_events,
            spawn_handler: CustomSpawn(spawn),
        }
    }
}

#[allow(private_bounds)]
impl<S: ThreadSpawn> ThreadPoolBuilder<S> {
    /// Builds the global pool, used by the free functions outside any pool. Fails if the global
    /// pool exists already (it is also built, with defaults, on first use).
    pub fn build_global(self) -> Result<(), BuildError> {
        set_global(self.build_registry()?)
    }

    pub(crate) fn build_registry(mut self) -> Result<Arc<Registry>, BuildError> {
        let num_threads = resolve_num_threads(self.num_threads)?;
        let max_inflight = resolve_max_inflight(self.max_inflight, num_threads)?;
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
        if self.use_current_thread
            && (WorkerThread::current().is_some() || borrowed::index().is_some())
        {
            return Err(BuildError::new(
                "use_current_thread: this thread is already a worker of a pool",
            ));
        }
        // Every name before any worker starts: a `thread_name` closure that panics, or a name
        // std would refuse, then leaves no worker behind.
        let mut names = self.names(num_threads)?;
        let segment_size = self
            .stack_size
            .unwrap_or_else(default_stack_size)
            .max(MIN_STACK_SIZE);
        let handlers = Arc::new(Handlers {
            start: self.start_handler.take(),
            exit: self.exit_handler.take(),
        });
        let trace = self.resolve_trace(num_threads)?;
        let (registry, seeds) =
            Registry::new(num_threads, max_inflight, self.panic_handler.take(), trace);
        // Until every worker runs: an error, or a spawn handler's panic, ends the started ones.
        let unfinished = TerminateOnDrop(&registry);
        let mut own_seed = None;
        for seed in seeds {
            let index = seed.index();
            if index == 0 && self.use_current_thread {
                own_seed = Some(seed);
                continue;
            }
            let thread = ThreadBuilder {
                seed,
                registry: registry.clone(),
                name: names[index].take(),
                stack_size: self.stack_size.map(|bytes| bytes.max(MIN_STACK_SIZE)),
                segment_size,
                core: cores.as_ref().map(|c| c[index % c.len()]),
                handlers: handlers.clone(),
                builder_started: false,
            };
            if let Err(err) = self.spawn_handler.spawn(thread, segment_size) {
                return Err(BuildError::new(format!(
                    "cannot start worker thread {index}: {err}{}",
                    match self.stack_size {
                        Some(bytes) => format!(" (stack size {bytes} bytes)"),
                        None => String::new(),
                    }
                )));
            }
        }
        std::mem::forget(unfinished);
        if let Some(seed) = own_seed {
            borrowed::borrow(seed, registry.clone(), segment_size);
        }
        Ok(registry)
    }

    /// The pool's trace, if tracing is on: the builder's path, else `TREEPOOL_TRACE`; its ring
    /// size, the builder's, else `TREEPOOL_TRACE_EVENTS`, else the default.
    fn resolve_trace(
        &self,
        num_threads: usize,
    ) -> Result<Option<std::sync::Arc<PoolTrace>>, BuildError> {
        let events = match self.trace_events {
            Some(n) if !(1..=MAX_TRACE_EVENTS).contains(&n) => {
                return Err(BuildError::new(format!(
                    "trace_events must be from 1 to {MAX_TRACE_EVENTS}, got {n}"
                )))
            }
            Some(n) => n,
            None => env_count(TRACE_EVENTS_ENV, "events", MAX_TRACE_EVENTS)?
                .unwrap_or(DEFAULT_TRACE_EVENTS),
        };
        let path = match &self.trace {
            Some(path) if path.as_os_str().is_empty() => {
                return Err(BuildError::new("trace: the path is empty"))
            }
            Some(path) => path.clone(),
            None => match std::env::var_os(TRACE_ENV) {
                Some(path) if !path.is_empty() => PathBuf::from(path),
                _ => return Ok(None),
            },
        };
        // The threads that drain the pool once it is dropped, the last of which writes the
        // file: the ones it starts, and a one-thread pool's borrowed thread
        // (`borrowed::leave_terminated`).
        let draining = if num_threads == 1 {
            1
        } else {
            num_threads - usize::from(self.use_current_thread)
        };
        Ok(Some(PoolTrace::new(path, num_threads, draining, events)))
    }

    /// The workers' names, if `thread_name` was given; a name std would refuse is an error.
    fn names(&mut self, num_threads: usize) -> Result<Vec<Option<String>>, BuildError> {
        let Some(name) = self.thread_name.as_mut() else {
            return Ok(vec![None; num_threads]);
        };
        (0..num_threads)
            .map(|i| match name(i) {
                bad if bad.contains('\0') => Err(BuildError::new(format!(
                    "thread_name: the name of worker {i}, {bad:?}, has a NUL byte"
                ))),
                good => Ok(Some(good)),
            })
            .collect()
    }
}

/// Terminates the registry it holds when dropped: the workers started so far exit.
struct TerminateOnDrop<'a>(&'a Arc<Registry>);

impl Drop for TerminateOnDrop<'_> {
    fn drop(&mut self) {
        self.0.terminate();
    }
}

/// The start and exit handlers, shared by the workers.
struct Handlers {
    start: Option<Handler>,
    exit: Option<Handler>,
}

impl Handlers {
    /// Calls `handler` for worker `index` outside any job; a panic goes to the pool's panic
    /// handler (or is printed), as a detached job's does.
    fn call(handler: &Option<Handler>, index: usize, registry: &Registry) {
        if let Some(handler) = handler {
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| handler(index))) {
                registry.handle_panic(payload);
            }
        }
    }
}

/// A worker thread to be started: what a [`spawn_handler`](ThreadPoolBuilder::spawn_handler)
/// gets, to call [`run`](ThreadBuilder::run) on a thread of its own (rayon-core's type).
pub struct ThreadBuilder {
    seed: WorkerSeed,
    registry: Arc<Registry>,
    name: Option<String>,
    stack_size: Option<usize>,
    segment_size: usize,
    core: Option<core_affinity::CoreId>,
    handlers: Arc<Handlers>,
    /// Started by the builder's default spawn, with a stack of `segment_size` bytes.
    builder_started: bool,
}

impl ThreadBuilder {
    /// The index of this worker in its pool, in `0..num_threads`.
    pub fn index(&self) -> usize {
        self.seed.index()
    }

    /// The name [`ThreadPoolBuilder::thread_name`] gave this worker, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The stack size [`ThreadPoolBuilder::stack_size`] asked for (raised to 64 KiB), if any.
    pub fn stack_size(&self) -> Option<usize> {
        self.stack_size
    }

    /// Runs the worker on the calling thread: its start handler, pool work until the pool is
    /// dropped and no work is left, its exit handler. Returns then.
    pub fn run(self) {
        let headroom = Headroom::new(self.segment_size, self.builder_started);
        let (handlers, core, registry) = (self.handlers, self.core, self.registry.clone());
        let start = |index| {
            if let Some(core) = core {
                core_affinity::set_for_current(core);
            }
            Handlers::call(&handlers.start, index, &registry);
        };
        let exit = |index| {
            Handlers::call(&handlers.exit, index, &registry);
            if handlers.exit.is_some() {
                // What the handler spawned (detached jobs, or a grant its root's token made)
                // is in this worker's deque, and the other workers may have exited: the worker
                // drains the pool once more, as it did before the handler, so that it runs.
                if let Some(worker) = WorkerThread::current() {
                    worker.drain();
                }
            }
        };
        main_loop(self.seed, self.registry, headroom, start, exit);
    }
}

impl fmt::Debug for ThreadBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadBuilder")
            .field("pool", &self.registry.id())
            .field("index", &self.index())
            .field("name", &self.name)
            .field("stack_size", &self.stack_size)
            .finish()
    }
}

/// How a builder starts its worker threads (sealed: [`DefaultSpawn`] or [`CustomSpawn`]).
pub(crate) trait ThreadSpawn {
    /// Starts a thread that calls `thread.run()`; `stack_size`: the size the builder would give
    /// it (the default spawn passes it explicitly, so that the worker knows its stack).
    fn spawn(&mut self, thread: ThreadBuilder, stack_size: usize) -> io::Result<()>;
}

/// The default way to start workers: std's `thread::Builder`, with the worker's name and stack
/// size. Not named by user code.
#[derive(Debug, Default)]
pub struct DefaultSpawn;

impl ThreadSpawn for DefaultSpawn {
    fn spawn(&mut self, mut thread: ThreadBuilder, stack_size: usize) -> io::Result<()> {
        let mut builder = std::thread::Builder::new().stack_size(stack_size);
        if let Some(name) = thread.name.take() {
            builder = builder.name(name);
        }
        thread.builder_started = true;
        builder.spawn(move || thread.run()).map(drop)
    }
}

/// Workers started by a user's [`spawn_handler`](ThreadPoolBuilder::spawn_handler). Not named
/// by user code.
#[derive(Debug)]
pub struct CustomSpawn<F>(F);

impl<F: FnMut(ThreadBuilder) -> io::Result<()>> ThreadSpawn for CustomSpawn<F> {
    fn spawn(&mut self, thread: ThreadBuilder, _stack_size: usize) -> io::Result<()> {
        (self.0)(thread)
    }
}

/// The number of tokens: as asked, else `TREEPOOL_MAX_INFLIGHT` (1 to `MAX_TOKENS` either way),
/// else `DEFAULT_TOKENS_PER_THREAD` per thread. A cap set in code is checked on its own, and the
/// variable is then not read (the builder's value wins, even over a bad one).
fn resolve_max_inflight(cap: Option<usize>, num_threads: usize) -> Result<usize, BuildError> {
    match cap {
        Some(0) => Err(BuildError::new("max_inflight must be at least 1, got 0")),
        Some(cap) if cap > MAX_TOKENS => Err(BuildError::new(format!(
            "max_inflight must be at most {MAX_TOKENS}, got {cap}"
        ))),
        Some(cap) => Ok(cap),
        None => Ok(
            env_count(MAX_INFLIGHT_ENV, "tokens", MAX_TOKENS)?.unwrap_or_else(|| {
                num_threads
                    .saturating_mul(DEFAULT_TOKENS_PER_THREAD)
                    .min(MAX_TOKENS)
            }),
        ),
    }
}

/// Reads treepool's own count variable `name` (`what` it counts): `None` if it is not set, else
/// a decimal number from 1 to `max` (surrounding whitespace ignored). Anything else (empty, `0`,
/// negative, not a number, above `max`, not UTF-8) is an error whose message starts with the
/// variable and its value, as `NAME="value"`: the value is quoted so that an empty one, or
/// one with whitespace or bytes that are not UTF-8, shows. Unlike rayon-core, which skips a
/// value it cannot use, treepool's variables are strict: they are only ever set for treepool, so
/// a bad value is a mistake to report, not a setting meant for another program. A value above
/// `max` is refused rather than reduced, so that the variable never silently means less than it
/// says (`num_threads` in code is reduced to `MAX_THREADS`, as rayon-core reduces it).
fn env_count(name: &str, what: &str, max: usize) -> Result<Option<usize>, BuildError> {
    let Some(value) = std::env::var_os(name) else {
        return Ok(None);
    };
    match value.to_str().map(|v| v.trim().parse::<usize>()) {
        Some(Ok(n)) if (1..=max).contains(&n) => Ok(Some(n)),
        _ => Err(BuildError::new(format!(
            "{name}={value:?}: not a number of {what} from 1 to {max} (unset it for the default)"
        ))),
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

/// The number of workers: `n` (at most `MAX_THREADS`), else `TREEPOOL_NUM_THREADS` (1 to
/// `MAX_THREADS`, else an error), else rayon-core's variables read as rayon-core reads them
/// ([`rayon_core_num_threads`]), at most `MAX_THREADS`.
fn resolve_num_threads(n: usize) -> Result<usize, BuildError> {
    if n > 0 {
        return Ok(n.min(MAX_THREADS));
    }
    if let Some(n) = env_count(NUM_THREADS_ENV, "threads", MAX_THREADS)? {
        return Ok(n);
    }
    Ok(rayon_core_num_threads().min(MAX_THREADS))
}

/// The thread count rayon-core 1.13's `ThreadPoolBuilder::get_num_threads` gives a builder with
/// `num_threads(0)`, step for step, so that a rayon program's environment means on treepool what
/// it means on rayon: `RAYON_NUM_THREADS` if it is a positive number; `0` there means the
/// available parallelism (`RAYON_RS_NUM_CPUS` is then not read); a value that is not a number
/// (`usize::from_str`: no whitespace, no sign but `+`, not above `usize::MAX`; not UTF-8) is
/// skipped. Then `RAYON_RS_NUM_CPUS` if it is a positive number, else the available
/// parallelism (1 if unknown). Never an error; rayon-core reduces the result to its
/// `max_num_threads` as the caller reduces it to treepool's.
fn rayon_core_num_threads() -> usize {
    let [rayon, deprecated] = RAYON_NUM_THREADS_ENVS;
    let read = |name| std::env::var(name).ok()?.parse::<usize>().ok();
    let default = || std::thread::available_parallelism().map_or(1, |n| n.get());
    match read(rayon) {
        Some(n @ 1..) => n,
        Some(0) => default(),
        None => read(deprecated).filter(|&n| n > 0).unwrap_or_else(default),
    }
}

/// Another name for [`BuildError`], as rayon-core calls it.
pub type ThreadPoolBuildError = BuildError;

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

static GLOBAL: OnceLock<Arc<Registry>> = OnceLock::new();
static GLOBAL_INIT: StdMutex<()> = StdMutex::new(());

/// The global pool, built with the defaults on first use.
pub(crate) fn global_registry() -> &'static Arc<Registry> {
    GLOBAL.get_or_init(|| {
        ThreadPoolBuilder::new()
            .build_registry()
            .unwrap_or_else(|err| panic!("treepool: cannot build the global pool: {err}"))
    })
}

/// Installs `registry` as the global pool unless one exists.
pub(crate) fn set_global(registry: Arc<Registry>) -> Result<(), BuildError> {
    let _init = GLOBAL_INIT.lock().unwrap_or_else(|e| e.into_inner());
    match GLOBAL.set(registry) {
        Ok(()) => Ok(()),
        Err(unused) => {
            unused.terminate();
            borrowed::release();
            Err(BuildError::new(
                "The global thread pool has already been initialized.",
            ))
        }
    }
}
