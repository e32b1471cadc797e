//! rayon-core's deprecated configuration API: [`Configuration`], [`initialize`],
//! `ThreadPool::new` and `ThreadPoolBuilder::breadth_first`, kept with rayon-core's signatures so
//! that code written against rayon-core 1.x builds unchanged on treepool (the `rayon-core`
//! compatibility crate re-exports them). Each forwards to [`ThreadPoolBuilder`]; nothing here
//! decides anything.
#![allow(deprecated)]

use std::any::Any;
use std::error::Error;
use std::fmt;

use crate::api::builder::ThreadPoolBuilder;
use crate::api::pool::ThreadPool;

/// A pool's configuration, as rayon-core 1.0 named it. Use [`ThreadPoolBuilder`] instead.
///
/// ```
/// #![allow(deprecated)]
/// let pool = treepool::Configuration::new().num_threads(2).build().unwrap();
/// assert_eq!(pool.current_num_threads(), 2);
/// ```
#[deprecated(note = "Use `ThreadPoolBuilder`")]
#[derive(Default)]
pub struct Configuration {
    builder: ThreadPoolBuilder,
}

impl Configuration {
    /// A configuration with [`ThreadPoolBuilder::new`]'s defaults.
    pub fn new() -> Configuration {
        Configuration::default()
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::build`].
    pub fn build(self) -> Result<ThreadPool, Box<dyn Error + 'static>> {
        self.builder.build().map_err(Box::from)
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::thread_name`].
    pub fn thread_name<F>(self, closure: F) -> Self
    where
        F: FnMut(usize) -> String + 'static,
    {
        self.map(|b| b.thread_name(closure))
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::num_threads`].
    pub fn num_threads(self, num_threads: usize) -> Configuration {
        self.map(|b| b.num_threads(num_threads))
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::panic_handler`].
    pub fn panic_handler<H>(self, panic_handler: H) -> Configuration
    where
        H: Fn(Box<dyn Any + Send>) + Send + Sync + 'static,
    {
        self.map(|b| b.panic_handler(panic_handler))
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::stack_size`].
    pub fn stack_size(self, stack_size: usize) -> Self {
        self.map(|b| b.stack_size(stack_size))
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::breadth_first`], which treepool ignores.
    pub fn breadth_first(self) -> Self {
        self.map(ThreadPoolBuilder::breadth_first)
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::start_handler`].
    pub fn start_handler<H>(self, start_handler: H) -> Configuration
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.map(|b| b.start_handler(start_handler))
    }

    /// Deprecated in favor of [`ThreadPoolBuilder::exit_handler`].
    pub fn exit_handler<H>(self, exit_handler: H) -> Configuration
    where
        H: Fn(usize) + Send + Sync + 'static,
    {
        self.map(|b| b.exit_handler(exit_handler))
    }

    fn map(self, f: impl FnOnce(ThreadPoolBuilder) -> ThreadPoolBuilder) -> Self {
        Configuration {
            builder: f(self.builder),
        }
    }
}

impl fmt::Debug for Configuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.builder.fmt(f)
    }
}

/// Builds the global pool from `config`. Deprecated in favor of
/// [`ThreadPoolBuilder::build_global`], and fails as it does (once the global pool exists).
///
/// ```
/// #![allow(deprecated)]
/// treepool::initialize(treepool::Configuration::new().num_threads(2)).unwrap();
/// assert_eq!(treepool::current_num_threads(), 2);
/// assert!(treepool::initialize(treepool::Configuration::new()).is_err());
/// ```
#[deprecated(note = "use `ThreadPoolBuilder::build_global`")]
pub fn initialize(config: Configuration) -> Result<(), Box<dyn Error>> {
    config.builder.build_global().map_err(Box::from)
}

impl ThreadPool {
    /// Builds a pool from `configuration`. Deprecated in favor of [`ThreadPoolBuilder::build`].
    ///
    /// ```
    /// #![allow(deprecated)]
    /// let config = treepool::Configuration::new().num_threads(2);
    /// let pool = treepool::ThreadPool::new(config).unwrap();
    /// assert_eq!(pool.install(treepool::current_num_threads), 2);
    /// ```
    #[deprecated(note = "Use `ThreadPoolBuilder::build`")]
    pub fn new(configuration: Configuration) -> Result<ThreadPool, Box<dyn Error>> {
        configuration.build()
    }
}

impl<S> ThreadPoolBuilder<S> {
    /// rayon-core's hint to run spawned jobs oldest first, deprecated there ("use `scope_fifo`
    /// and `spawn_fifo` for similar effect"). treepool ignores it: spawns run in the order
    /// `Scope::spawn` documents, and [`scope_fifo`](crate::scope_fifo) and
    /// [`spawn_fifo`](crate::spawn_fifo) give the oldest-first order.
    #[deprecated(note = "use `scope_fifo` and `spawn_fifo` for similar effect")]
    pub fn breadth_first(self) -> Self {
        self
    }
}
