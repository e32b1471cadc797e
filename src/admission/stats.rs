//! Pool statistics: the public [`Stats`] snapshot and the counters behind it.
//!
//! This module owns the counters; it never decides anything. The in-flight count and the peaks
//! are exact (one shared counter, bumped before a job becomes runnable and dropped after its body
//! returns, before its token can admit another job), so a user who counts started-but-unfinished
//! jobs never sees more than `peak_inflight`. A job whose token goes straight to a spawn waiting
//! on the same thread hands that spawn its place in the count instead (see `Spare`): neither
//! touches the shared counter, and the count reads as if the new job was admitted the moment the
//! old one finished. Event counters (admissions, waits, steals) are kept per thread on their own
//! cache lines, so spawns on different workers do not contend for them, and summed on read.
//! `executing` and `tokens_in_use` are not counted at all: they are read off the token table.

use crossbeam_utils::CachePadded;

use crate::admission::token::TokenTable;
use crate::base::sync::{AtomicU64, AtomicUsize, Ordering};

/// A snapshot of a pool's admission state and counters, from [`ThreadPool::stats`].
///
/// Peaks and counts are since the pool was built. At every instant `tokens_in_use <=
/// max_inflight`, `executing <= max_inflight + calls_in` and `inflight <= (max_inflight +
/// calls_in) * peak_depth`, where `calls_in` counts the calls into this pool made from jobs of
/// other pools that are in progress (each runs on its caller's credit, see
/// [`ThreadPool::install`](crate::ThreadPool::install)) and the join halves run on credit
/// (see [`Stats::halves_on_credit`]); with neither these are the bounds B1 and B2 with
/// `max_inflight` alone. Once the pool is idle, `inflight`, `executing`, `tokens_in_use` and
/// `calls_in` are zero.
///
/// ```
/// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).max_inflight(3).build().unwrap();
/// pool.scope(|s| {
///     for _ in 0..100 {
///         s.spawn(|_| {});
///     }
/// });
/// let stats = pool.stats();
/// assert!(stats.peak_executing <= 3);
/// assert!(stats.peak_inflight <= 3 * stats.peak_depth);
/// assert_eq!(stats.admitted_on_loan + stats.admitted_from_pool, 101); // 100 spawns + the root
/// assert_eq!((stats.inflight, stats.tokens_in_use), (0, 0)); // idle again
/// ```
///
/// [`ThreadPool::stats`]: crate::ThreadPool::stats
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Jobs admitted and not finished (queued admitted jobs included). A job that ends by handing
    /// its token straight to a spawn waiting on the same thread counts as finished at the moment
    /// the spawned job counts as admitted.
    pub inflight: usize,
    /// The most jobs ever in flight at once.
    pub peak_inflight: usize,
    /// Jobs in flight holding a token that is not lent out: one per pool token in use and one
    /// per call in from another pool. (A job that lends its token goes on running its own code,
    /// so this bounds the jobs that may *start* work, not the threads running code: those are
    /// bounded by the number of workers.)
    pub executing: usize,
    /// The most jobs ever executing at once.
    pub peak_executing: usize,
    /// Tokens taken from the pool and not yet returned (lent or parked tokens count).
    pub tokens_in_use: usize,
    /// The deepest level admitted so far; a root job is level 1.
    pub peak_depth: usize,
    /// Jobs admitted on a loan of their parent's token.
    pub admitted_on_loan: u64,
    /// Jobs admitted on a token from the pool.
    pub admitted_from_pool: u64,
    /// Admissions that had to wait for a token.
    pub admission_waits: u64,
    /// Jobs a worker took from another worker's deque.
    pub steals: u64,
    /// Join halves (`b` of `join(a, b)`) claimed by a thread that found no token free to admit
    /// them, and so left unrun where they were, for their joiner's job to run as part of it.
    pub handed_back: u64,
    /// Credit tokens in use: calls into this pool from jobs of other pools in progress
    /// (`install`, `scope` or `join` called on a worker of another pool), and join halves run on
    /// credit (see [`Stats::halves_on_credit`]). Each call runs as a root job on its caller's
    /// credit, a token that is not one of this pool's `max_inflight`; like any token it stays
    /// parked while a detached descendant holds its loan, so it can outlast its call by that
    /// long.
    pub calls_in: usize,
    /// The most calls from other pools ever in progress at once.
    pub peak_calls_in: usize,
    /// Jobs admitted on credit: roots of calls from another pool, and halves on credit.
    pub admitted_on_credit: u64,
    /// Join halves run on credit: the `b` of a join of a job that waits, below on the same
    /// thread, for a call it made into another pool (its `a` may be waiting there for this very
    /// `b`), met by a wait on that thread with no other work and no token free. Such a half is
    /// one more token while it runs, counted in [`Stats::calls_in`].
    pub halves_on_credit: u64,
    /// Join halves made visible to thieves: a `join`'s `b` stays private to its joiner's thread
    /// until another worker wants work (it asks that thread, or it is idle: while any worker is
    /// idle every `join` promotes), and that thread then makes its oldest private half public,
    /// where it lies. An un-promoted half is run inline by its joiner and counted nowhere.
    pub promotions: u64,
    /// Jobs started on a stack segment: every job starts with at least half of its worker's
    /// stack free, and a job that a thread would start above frames taking more than that (its
    /// helping nested that deep, as a deep spawn tree makes it) starts on a segment of the
    /// worker's stack size mapped from the heap (each worker keeps one such segment for reuse
    /// and unmaps the others when their jobs return). Zero for trees whose helping stays
    /// shallow; see `docs/design.md` §3.6 for what a level costs.
    pub stack_segments: u64,
    /// Spawns of fallible scopes ([`TryScope::spawn`](crate::TryScope::spawn)) dropped without
    /// running their closure because their scope was cancelled: a spawn called after the
    /// cancellation (never admitted), or a job admitted before it that finished at once when it
    /// came up, giving its token back as any job does. Spawns whose closures ran are counted
    /// nowhere, so in a scope that nothing else spawns into, closures run plus this count (its
    /// growth during the call) equal the spawns made.
    pub cancelled: u64,
    /// Workers that found no work of their own and look for some now, asleep or not (a thief
    /// counts until the job it stole makes a `join`), and workers that started a join half of
    /// their own inline with no other half of theirs unclaimed and their deque empty, until
    /// that half makes a `join` (looked at once, as the half starts). While it is not zero,
    /// every `join` gives out a private half (see [`Stats::promotions`]).
    pub idle_workers: usize,
}

/// The per-thread event counters.
#[derive(Clone, Copy)]
pub enum Counter {
    /// A job admitted on a loan.
    AdmittedOnLoan,
    /// A job admitted on a pool token.
    AdmittedFromPool,
    /// An admission that waited.
    AdmissionWaits,
    /// A job stolen from another worker.
    Steals,
    /// A join half declined (left unrun) by a taker with no token.
    HandedBack,
    /// A root admitted on the credit of a call from another pool.
    AdmittedOnCredit,
    /// A join half made public.
    Promotions,
    /// A job started on a stack segment.
    StackSegments,
    /// A spawn of a cancelled fallible scope dropped unrun.
    Cancelled,
    /// A join half run on credit.
    HalvesOnCredit,
}

/// One thread's event counters, one cell per [`Counter`].
pub type Row = [AtomicU64; 10];

/// Counts an event in `row`, a worker's own row (from [`Counters::row`]), on its own thread.
///
/// # Safety
/// `row` came from `Counters::row` for the calling worker, and its `Counters` is alive.
#[inline]
pub unsafe fn bump_own(row: *const Row, counter: Counter) {
    // SAFETY: the caller's contract.
    let cell = unsafe { &(*row)[counter as usize] };
    // One writer (the row's worker), so a load and a store count exactly. Relaxed: an
    // independent event count, summed on read.
    cell.store(cell.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// The exact in-flight count and its peak, together on one cache line (every change of the
/// count may raise the peak).
#[derive(Default)]
struct Flight {
    inflight: AtomicUsize,
    peak_inflight: AtomicUsize,
}

/// A pool's counters.
pub struct Counters {
    flight: CachePadded<Flight>,
    /// On a line of its own: read at every admission and almost never written, so it stays in
    /// every core's cache, where next to the in-flight count it would move with every change.
    peak_depth: CachePadded<AtomicUsize>,
    /// One row per worker, and a last one shared by threads outside the pool.
    per_thread: Box<[CachePadded<Row>]>,
}

impl Counters {
    /// Zeroed counters for `num_threads` workers.
    pub fn new(num_threads: usize) -> Self {
        Counters {
            flight: CachePadded::new(Flight::default()),
            peak_depth: CachePadded::new(AtomicUsize::new(0)),
            per_thread: (0..=num_threads)
                .map(|_| CachePadded::new(Default::default()))
                .collect(),
        }
    }

    /// Worker `index`'s own row, for [`bump_own`]: no index to check at every event.
    #[inline]
    pub fn row(&self, index: usize) -> *const Row {
        debug_assert!(index + 1 < self.per_thread.len(), "a worker's row");
        &*self.per_thread[index]
    }

    /// Counts an event in row `slot`.
    #[inline]
    pub fn bump(&self, slot: usize, counter: Counter) {
        let cell = &self.per_thread[slot][counter as usize];
        if slot + 1 < self.per_thread.len() {
            // A worker's own row has one writer, so a load and a store (no locked RMW) count
            // exactly. Relaxed: an independent event count, summed on read.
            cell.store(cell.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        } else {
            // Relaxed: as above; the shared row of outside threads needs the RMW.
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A job at `level` was admitted; called before it can run.
    #[inline]
    pub fn job_admitted(&self, level: usize) {
        // The depth first, so that no snapshot shows `inflight > cap × peak_depth`.
        raise(&self.peak_depth, level, Ordering::Relaxed);
        // Release: a snapshot that reads this count (acquire) sees the depth raised above, and
        // the token this job took before it was counted.
        let now = self.flight.inflight.fetch_add(1, Ordering::Release) + 1;
        // Release: the same for a snapshot that reads the peak.
        raise(&self.flight.peak_inflight, now, Ordering::Release);
    }

    /// A job at `level` was admitted on the token of a finished job, taking over that job's
    /// place in the in-flight count (see `Spare`): the count and its peak do not change.
    #[inline]
    pub fn job_carried_in(&self, level: usize) {
        // Relaxed: the count does not change, so no snapshot can read it above what the depths
        // raised before it allow (see `job_admitted`).
        raise(&self.peak_depth, level, Ordering::Relaxed);
    }

    /// A job's body returned, and its place in the in-flight count is not taken over.
    #[inline]
    pub fn job_finished(&self) {
        // Relaxed: as in `job_admitted`.
        self.flight.inflight.fetch_sub(1, Ordering::Relaxed);
    }

    /// A snapshot, with the token figures read off the token table.
    pub fn snapshot(&self, tokens: &TokenTable) -> Stats {
        // The in-flight figures first, with acquire: every job they count raised the depth and
        // took its token (a pool token, or a credit with the credit peak) before it was counted,
        // so the figures read after them are at least as high, and one snapshot never shows
        // `inflight` or `peak_inflight` above `(max_inflight + peak_calls_in) * peak_depth`.
        // Acquire: pairs with `job_admitted`'s releases.
        let inflight = self.flight.inflight.load(Ordering::Acquire);
        let peak_inflight = self.flight.peak_inflight.load(Ordering::Acquire);
        // Relaxed: ordered after the acquires above.
        let peak_depth = self.peak_depth.load(Ordering::Relaxed);
        let now = tokens.count();
        // The executing peak before the credit peak: see `TokenTable::note_admission`.
        let peak_executing = tokens.peak_executing().max(now.pool + now.credit);
        let peak_calls_in = tokens.peak_credit().max(now.credit);
        let sum = |c: Counter| -> u64 {
            self.per_thread
                .iter()
                // Relaxed: statistics.
                .map(|row| row[c as usize].load(Ordering::Relaxed))
                .sum()
        };
        Stats {
            inflight,
            peak_inflight,
            executing: now.pool + now.credit,
            peak_executing,
            tokens_in_use: now.pool,
            calls_in: now.credit,
            peak_calls_in,
            peak_depth,
            admitted_on_loan: sum(Counter::AdmittedOnLoan),
            admitted_from_pool: sum(Counter::AdmittedFromPool),
            admission_waits: sum(Counter::AdmissionWaits),
            steals: sum(Counter::Steals),
            handed_back: sum(Counter::HandedBack),
            admitted_on_credit: sum(Counter::AdmittedOnCredit),
            halves_on_credit: sum(Counter::HalvesOnCredit),
            promotions: sum(Counter::Promotions),
            stack_segments: sum(Counter::StackSegments),
            cancelled: sum(Counter::Cancelled),
            // The worker layer's to fill in (`Registry::stats`).
            idle_workers: 0,
        }
    }
}

/// Raises `peak` to `value`; reads first so the common case writes nothing.
#[inline]
fn raise(peak: &AtomicUsize, value: usize, order: Ordering) {
    // Relaxed read: fetch_max below keeps the peak exact (a peak already at `value` was
    // written by a raise that published as much).
    if value > peak.load(Ordering::Relaxed) {
        peak.fetch_max(value, order);
    }
}
