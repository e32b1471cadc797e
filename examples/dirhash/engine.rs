//! The engines: the walker and the check mode are written once against
//! [`Spawner`] and run on treepool's or rayon's scope. Owns the pools and how
//! they are built from the command line; it must never decide what a job does.
use crate::cli::{Args, Engine};
use crate::Ctx;

pub(crate) trait Spawner<'s>: Sync + Sized {
    fn spawn_job<F: FnOnce(&Self) + Send + 's>(&self, f: F);
    fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send;
}

impl<'s> Spawner<'s> for treepool::Scope<'s> {
    fn spawn_job<F: FnOnce(&Self) + Send + 's>(&self, f: F) {
        self.spawn(f)
    }
    fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        treepool::join(a, b)
    }
}

impl<'s> Spawner<'s> for rayon::Scope<'s> {
    fn spawn_job<F: FnOnce(&Self) + Send + 's>(&self, f: F) {
        self.spawn(f)
    }
    fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        rayon::join(a, b)
    }
}

pub(crate) enum Pool {
    Treepool(treepool::ThreadPool),
    Rayon(rayon::ThreadPool),
}

impl Pool {
    pub(crate) fn build(args: &Args) -> Result<Pool, String> {
        match args.engine {
            Engine::Treepool => {
                let mut b = treepool::ThreadPoolBuilder::new().num_threads(args.threads());
                if let Some(cap) = args.max_inflight {
                    let cap = usize::try_from(cap).map_err(|e| e.to_string())?;
                    b = b.max_inflight(cap);
                }
                b.build().map(Pool::Treepool).map_err(|e| e.to_string())
            }
            Engine::Rayon => rayon::ThreadPoolBuilder::new()
                .num_threads(args.threads())
                .build()
                .map(Pool::Rayon)
                .map_err(|e| e.to_string()),
        }
    }

    /// Runs `jobs` inside a scope of the chosen pool and returns when every
    /// job spawned in it has finished.
    pub(crate) fn run<'a, T: Jobs<'a>>(&self, ctx: &'a Ctx, jobs: T) {
        match self {
            Pool::Treepool(p) => p.scope(|s| jobs.start(s, ctx)),
            Pool::Rayon(p) => p.scope(|s| jobs.start(s, ctx)),
        }
    }
}

/// The work to start in a scope, generic over the engine's scope type.
pub(crate) trait Jobs<'a>: Send {
    fn start<S: Spawner<'a>>(self, s: &S, ctx: &'a Ctx);
}
