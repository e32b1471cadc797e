//! Thief pacing: when a worker that steals should pause before its next steal.
//!
//! This module owns [`Pacing`], the rule a worker's wait loop applies after each job it stole
//! from another worker's deque. It decides from what the thread itself saw (how many jobs the
//! victim's deque held at the steal, how long the job ran, its level in its tree, whether it
//! was a spawned job); it must never write state shared with other threads, never block, and
//! never keep a thread from work for longer than [`STEAL_BACKOFF`] per steal: a pause costs
//! parallelism at worst, never progress.
//!
//! **Why pause at all.** A steal moves the deque's, the job's, the token's, the in-flight
//! count's and the scope's cache lines between two threads. For a job of a few hundred
//! nanoseconds that is most of its cost, and its spawner, which is running anyway, would run it
//! cheaper: on the 2-core development machine, 100,000 empty spawns in one scope ran three times
//! slower on two threads than on one (in the host's slow mode), the second thread stealing
//! three jobs in four.
//!
//! **Why not always.** The larger jobs of a tree are at the levels above its tiny leaves, and a
//! bounded pool queues them only now and then (a spawner with no token free runs its newest job
//! itself). A thief that pauses after every tiny leaf misses them: on 1,000 jobs of 100 leaves
//! each it took about half as many inner jobs, and the shape ran slower. So a tiny job deeper
//! than the shallowest larger job this thread stole is no reason to pause, and a tiny job at or
//! above that level is: there is nothing larger above it to wait for.
//!
//! **Why only from a short deque.** A spawner whose tokens run out runs its newest jobs itself
//! and keeps only a few queued. A long deque is one its owner is not draining (with a large
//! `max_inflight`, a job that spawned many tiny ones and went on with its own work): there a
//! pause only slows the one thread running them, eightfold in the review's test of it.

use std::time::Duration;

/// A stolen job that runs for less than this is one its spawner would have run cheaper. Tuned
/// on: 100,000 empty spawns on 2 threads (`benches/scope_fanout.rs`).
pub const TINY_JOB: Duration = Duration::from_micros(2);

/// How long a thief pauses after such a job before it steals again: a few of its victim's
/// spawns. Tuned on: 100,000 empty spawns on 2 threads (`benches/scope_fanout.rs`).
pub const STEAL_BACKOFF: Duration = Duration::from_micros(1);

/// The most jobs a victim's deque may hold for its thief to pause. A spawner held back by its
/// tokens keeps a few jobs queued and runs them itself; a deque longer than this is one its
/// owner is not draining (a job that spawned many and went on with its own work), and only
/// thieves will run it. Tuned on: 100,000 tiny spawns followed by 40 ms of the spawner's own
/// work, `max_inflight(1 << 20)` (docs/benchmarks-notes.md, "Thief pacing": eightfold slower
/// without this bound).
pub const SHORT_QUEUE: usize = 8;

/// One waiting thread's view of what its steals found (a local of its wait loop).
pub struct Pacing {
    /// The shallowest level of a stolen job that ran for `TINY_JOB` or longer; `usize::MAX`
    /// while there is none.
    shallowest_large: usize,
    /// The level of the last stolen job (`Some(0)` before the first; `None` if it was not a
    /// spawned job).
    last_level: Option<usize>,
    /// Whether the last look at a victim's deque found it longer than `SHORT_QUEUE`.
    long_queue: bool,
}

impl Pacing {
    /// A view with nothing seen yet.
    pub fn new() -> Self {
        Pacing {
            shallowest_large: usize::MAX,
            last_level: Some(0),
            long_queue: false,
        }
    }

    /// Whether to time the job just stolen, that is, whether its run time can matter. A job
    /// deeper than the shallowest larger one, or not a spawned job, neither pauses the thief
    /// nor teaches it anything, and a job from a long deque never pauses it: the last stolen
    /// job predicts this one, and while the last look at a deque found it long,
    /// `victim_queue` (the jobs left in this one's) is read before the run instead of after
    /// it. Reading the clock twice per
    /// steal cost 8% on 1,000 × 100 spawns, whose thief mostly takes leaves one at a time while
    /// their spawner waits for the token; reading the deque's length at every steal (a fence,
    /// and the owner's end of the deque) cost about as much.
    pub fn wants_run_time(&mut self, victim_queue: impl FnOnce() -> usize) -> bool {
        if !self
            .last_level
            .is_some_and(|level| level <= self.shallowest_large)
        {
            return false;
        }
        if self.long_queue {
            self.long_queue = victim_queue() > SHORT_QUEUE;
        }
        !self.long_queue
    }

    /// A stolen job ran for `ran` (`None`: not timed, as `wants_run_time` said): returns
    /// whether to pause before the next steal. `spawned_level` is the job's level if it was a
    /// spawned job; a join's half or a call's root never pauses the thief and teaches it
    /// nothing (a half is promoted only when an idle thread asks for one: that is pacing
    /// already). `victim_queue` is read only for a tiny job with nothing larger seen above it.
    pub fn after_steal(
        &mut self,
        ran: Option<Duration>,
        spawned_level: Option<usize>,
        victim_queue: impl FnOnce() -> usize,
    ) -> bool {
        self.last_level = spawned_level;
        let Some(level) = spawned_level else {
            return false;
        };
        match ran {
            None => false,
            Some(ran) if ran >= TINY_JOB => {
                self.shallowest_large = self.shallowest_large.min(level);
                false
            }
            Some(_) if level <= self.shallowest_large => {
                self.long_queue = victim_queue() > SHORT_QUEUE;
                !self.long_queue
            }
            Some(_) => false,
        }
    }

    /// Forgets what was seen: the thread slept, and the next tree may be another shape.
    pub fn forget(&mut self) {
        *self = Pacing::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Option<Duration> = Some(Duration::from_nanos(300));
    const LONG: Option<Duration> = Some(Duration::from_micros(50));

    fn few() -> usize {
        2
    }

    fn many() -> usize {
        SHORT_QUEUE + 1
    }

    fn unread() -> usize {
        panic!("the victim's deque was read where it cannot matter")
    }

    #[test]
    fn tiny_jobs_with_nothing_larger_above_them_pause_the_thief() {
        let mut pacing = Pacing::new();
        assert!(pacing.wants_run_time(unread));
        assert!(pacing.after_steal(SHORT, Some(2), few));
        assert!(pacing.wants_run_time(unread));
        assert!(pacing.after_steal(SHORT, Some(2), few));
        // A larger job at the same level does not change that: it is no level above.
        assert!(!pacing.after_steal(LONG, Some(2), unread));
        assert!(pacing.after_steal(SHORT, Some(2), few));
        assert!(pacing.after_steal(SHORT, Some(1), few));
    }

    #[test]
    fn tiny_jobs_below_a_larger_one_do_not_pause_the_thief() {
        let mut pacing = Pacing::new();
        assert!(!pacing.after_steal(LONG, Some(2), unread));
        assert!(pacing.wants_run_time(unread));
        assert!(!pacing.after_steal(SHORT, Some(3), unread));
        assert!(!pacing.after_steal(SHORT, Some(7), unread));
        // The shallowest larger job counts, not the latest one.
        assert!(!pacing.after_steal(LONG, Some(5), unread));
        assert!(!pacing.after_steal(SHORT, Some(3), unread));
    }

    #[test]
    fn only_a_steal_after_one_at_or_above_the_larger_jobs_is_timed() {
        let mut pacing = Pacing::new();
        assert!(!pacing.after_steal(LONG, Some(2), unread));
        assert!(!pacing.after_steal(SHORT, Some(3), unread));
        assert!(!pacing.wants_run_time(unread));
        // Untimed steals pause nothing and teach nothing.
        assert!(!pacing.after_steal(None, Some(3), unread));
        assert!(!pacing.after_steal(None, Some(1), unread));
        assert!(pacing.wants_run_time(unread));
        assert!(pacing.after_steal(SHORT, Some(2), few));
    }

    #[test]
    fn a_long_victim_deque_never_pauses_the_thief_and_is_watched_until_it_is_short() {
        let mut pacing = Pacing::new();
        assert!(pacing.wants_run_time(unread));
        assert!(!pacing.after_steal(SHORT, Some(2), many));
        // While deques are long, the length is read before the run, and the run not timed.
        assert!(!pacing.wants_run_time(many));
        assert!(!pacing.after_steal(None, Some(2), unread));
        assert!(!pacing.wants_run_time(|| SHORT_QUEUE + 1000));
        assert!(!pacing.after_steal(None, Some(2), unread));
        // Short again: timed, and read after the run.
        assert!(pacing.wants_run_time(|| SHORT_QUEUE));
        assert!(pacing.wants_run_time(unread));
        assert!(pacing.after_steal(SHORT, Some(2), || SHORT_QUEUE));
    }

    #[test]
    fn a_stolen_half_or_root_neither_pauses_nor_teaches() {
        let mut pacing = Pacing::new();
        assert!(!pacing.after_steal(SHORT, None, unread));
        assert!(!pacing.after_steal(LONG, None, unread));
        // The steal after it is not timed, and teaches only its level.
        assert!(!pacing.wants_run_time(unread));
        assert!(!pacing.after_steal(None, Some(3), unread));
        // The long job was not a spawned one: nothing larger is known above level 3.
        assert!(pacing.wants_run_time(unread));
        assert!(pacing.after_steal(SHORT, Some(3), few));
    }

    #[test]
    fn forgetting_starts_over() {
        let mut pacing = Pacing::new();
        assert!(!pacing.after_steal(LONG, Some(2), unread));
        assert!(!pacing.after_steal(SHORT, Some(3), unread));
        pacing.forget();
        assert!(pacing.wants_run_time(unread));
        assert!(pacing.after_steal(SHORT, Some(3), few));
    }
}
