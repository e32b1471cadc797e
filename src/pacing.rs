//! Thief pacing: when a worker that steals should pause before its next steal.
//!
//! This module owns [`Pacing`], the rule a worker's wait loop applies after each job it stole
//! from another worker's deque. It decides from what the thread itself saw (how long the job
//! ran, its level in its tree); it must never touch state shared with other threads, never
//! block, and never keep a thread from work for longer than [`STEAL_BACKOFF`]: a pause costs
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
//! each it took about half as many inner jobs, and the shape ran slower. So a tiny job deeper than the
//! shallowest larger job this thread stole is no reason to pause, and a tiny job at or above
//! that level is: there is nothing larger above it to wait for.

use std::time::Duration;

/// A stolen job that runs for less than this is one its spawner would have run cheaper.
pub const TINY_JOB: Duration = Duration::from_micros(2);

/// How long a thief pauses after such a job before it steals again: a few of its victim's
/// spawns.
pub const STEAL_BACKOFF: Duration = Duration::from_micros(1);

/// One waiting thread's view of what its steals found (a local of its wait loop).
pub struct Pacing {
    /// The shallowest level of a stolen job that ran for `TINY_JOB` or longer; `usize::MAX`
    /// while there is none.
    shallowest_large: usize,
    /// The level of the last stolen job (0 before the first).
    last_level: usize,
}

impl Pacing {
    /// A view with nothing seen yet.
    pub fn new() -> Self {
        Pacing {
            shallowest_large: usize::MAX,
            last_level: 0,
        }
    }

    /// Whether the next stolen job's run time can matter, predicted from the last one's level:
    /// a job deeper than the shallowest larger one neither pauses the thief nor teaches it
    /// anything. Reading the clock twice per steal cost 8% on 1,000 × 100 spawns, whose thief
    /// mostly takes such leaves, one at a time, while their spawner waits for the token.
    pub fn wants_run_time(&self) -> bool {
        self.last_level <= self.shallowest_large
    }

    /// A stolen job at `level` ran for `ran` (`None`: not timed, as `wants_run_time` said):
    /// returns whether to pause before the next steal.
    pub fn after_steal(&mut self, ran: Option<Duration>, level: usize) -> bool {
        self.last_level = level;
        match ran {
            None => false,
            Some(ran) if ran >= TINY_JOB => {
                self.shallowest_large = self.shallowest_large.min(level);
                false
            }
            Some(_) => level <= self.shallowest_large,
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

    #[test]
    fn tiny_jobs_with_nothing_larger_above_them_pause_the_thief() {
        let mut pacing = Pacing::new();
        assert!(pacing.wants_run_time());
        assert!(pacing.after_steal(SHORT, 2));
        assert!(pacing.wants_run_time());
        assert!(pacing.after_steal(SHORT, 2));
        // A larger job at the same level does not change that: it is no level above.
        assert!(!pacing.after_steal(LONG, 2));
        assert!(pacing.after_steal(SHORT, 2));
        assert!(pacing.after_steal(SHORT, 1));
    }

    #[test]
    fn tiny_jobs_below_a_larger_one_do_not_pause_the_thief() {
        let mut pacing = Pacing::new();
        assert!(!pacing.after_steal(LONG, 2));
        assert!(pacing.wants_run_time());
        assert!(!pacing.after_steal(SHORT, 3));
        assert!(!pacing.after_steal(SHORT, 7));
        // The shallowest larger job counts, not the latest one.
        assert!(!pacing.after_steal(LONG, 5));
        assert!(!pacing.after_steal(SHORT, 3));
    }

    #[test]
    fn only_a_steal_after_one_at_or_above_the_larger_jobs_is_timed() {
        let mut pacing = Pacing::new();
        assert!(!pacing.after_steal(LONG, 2));
        assert!(!pacing.after_steal(SHORT, 3));
        assert!(!pacing.wants_run_time());
        // Untimed steals pause nothing and teach nothing.
        assert!(!pacing.after_steal(None, 3));
        assert!(!pacing.after_steal(None, 1));
        assert!(pacing.wants_run_time());
        assert!(pacing.after_steal(SHORT, 2));
    }

    #[test]
    fn forgetting_starts_over() {
        let mut pacing = Pacing::new();
        assert!(!pacing.after_steal(LONG, 2));
        assert!(!pacing.after_steal(SHORT, 3));
        pacing.forget();
        assert!(pacing.wants_run_time());
        assert!(pacing.after_steal(SHORT, 3));
    }
}
