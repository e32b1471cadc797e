// A branch-and-bound solver for the travelling salesman problem, after rayon-demo's `tsp`
// (rayon-rs/rayon, `rayon-demo/src/tsp`): a scope whose jobs each take the most promising
// partial tour from one shared priority queue and spawn one job per extension of it that the
// best tour found so far does not rule out. The spawn tree's depth follows the number of jobs,
// not the search's (at one token, a level per two jobs), which makes it a test of the stack.
//
// Included (`include!`) into a module that names the pool crate `pl` (treepool or rayon), as
// `benches/common` does for its workloads: it uses only `pl::scope` and `pl::Scope::spawn`, and
// `Solver::solve` runs the search on the pool of the worker that calls it (call it in
// `pool.install`). The search prunes a partial tour whose length reaches the best tour's, and
// the queue orders partial tours by a lower bound on their completion (rayon-demo's), so it
// finds an optimal tour; `Solver::with_budget` cuts it short for a test of the stack alone.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A complete graph on `n` cities with integer Euclidean distances (TSPLIB's EUC_2D rounding).
pub struct Cities {
    n: usize,
    distance: Vec<u64>,
}

impl Cities {
    /// `n` cities at pseudo-random points of a 10,000 × 10,000 square, from `seed`.
    pub fn random(n: usize, seed: u64) -> Cities {
        assert!((2..=64).contains(&n), "2 to 64 cities");
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 10_000) as f64
        };
        let points: Vec<(f64, f64)> = (0..n).map(|_| (next(), next())).collect();
        Cities::at(&points)
    }

    /// Cities at `points`.
    pub fn at(points: &[(f64, f64)]) -> Cities {
        let n = points.len();
        assert!((2..=64).contains(&n), "2 to 64 cities");
        let mut distance = vec![0; n * n];
        for (i, a) in points.iter().enumerate() {
            for (j, b) in points.iter().enumerate() {
                distance[i * n + j] = ((a.0 - b.0).hypot(a.1 - b.1)).round() as u64;
            }
        }
        Cities { n, distance }
    }

    /// The number of cities.
    pub fn count(&self) -> usize {
        self.n
    }

    /// The distance from city `from` to city `to` (the same both ways).
    pub fn d(&self, from: usize, to: usize) -> u64 {
        self.distance[from * self.n + to]
    }
}

/// A partial tour: the cities visited (a bit set), the last one, and its length so far.
struct Prefix {
    bound: u64,
    id: usize,
    last: usize,
    visited: u64,
    len: usize,
    weight: u64,
    previous: Option<Arc<Prefix>>,
}

// The queue pops the smallest lower bound first (then the oldest prefix).
impl Ord for Prefix {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.bound, other.id).cmp(&(self.bound, self.id))
    }
}
impl PartialOrd for Prefix {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Prefix {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for Prefix {}

/// What the search shares: the queue, the best tour so far, and counters.
pub struct Solver<'a> {
    cities: &'a Cities,
    seq_threshold: usize,
    queue: Mutex<BinaryHeap<Arc<Prefix>>>,
    ids: AtomicUsize,
    best: AtomicU64,
    best_tour: Mutex<Option<Vec<usize>>>,
    /// Jobs the search spawned (at most the budget).
    pub jobs: AtomicUsize,
    /// Steps that ran: the scope's body and every spawned job (one more than `jobs` once the
    /// search has returned, if every job ran once).
    pub steps: AtomicUsize,
    /// Spawns beyond this many are skipped (the search then returns the best tour it found).
    budget: usize,
}

impl<'a> Solver<'a> {
    /// A solver that enumerates the last `seq_threshold` cities of a tour sequentially.
    pub fn new(cities: &'a Cities, seq_threshold: usize) -> Self {
        Solver {
            cities,
            seq_threshold,
            queue: Mutex::new(BinaryHeap::new()),
            ids: AtomicUsize::new(0),
            best: AtomicU64::new(u64::MAX),
            best_tour: Mutex::new(None),
            jobs: AtomicUsize::new(0),
            steps: AtomicUsize::new(0),
            budget: usize::MAX,
        }
    }

    /// Stops spawning after `jobs` jobs: the search is then cut short.
    pub fn with_budget(mut self, jobs: usize) -> Self {
        self.budget = jobs;
        self
    }

    /// Searches from city 0 in `pl::scope` (on the caller's pool); returns the shortest
    /// tour's length and the tour (from city 0 back to it). With a budget, the best tour found
    /// before it ran out, if any: the queue explores the lowest bounds first, so a search cut
    /// short may have completed no tour.
    pub fn solve(&self) -> Option<(u64, Vec<usize>)> {
        let start = Prefix {
            bound: 0,
            id: self.ids.fetch_add(1, Ordering::Relaxed),
            last: 0,
            visited: 1,
            len: 1,
            weight: 0,
            previous: None,
        };
        self.queue.lock().unwrap().push(Arc::new(start));
        pl::scope(|s| step(s, self));
        let tour = self.best_tour.lock().unwrap().clone()?;
        Some((self.best.load(Ordering::Relaxed), tour))
    }

    /// Partial tours left in the queue: zero once the search has returned, if every spawned job
    /// ran (each job takes one, and each spawn follows one push).
    pub fn pending(&self) -> usize {
        self.queue.lock().unwrap().len()
    }

    fn best(&self) -> u64 {
        // Relaxed: a stale bound only prunes less; `add_tour` re-reads under the lock.
        self.best.load(Ordering::Relaxed)
    }

    fn add_tour(&self, tour: &[usize], weight: u64) {
        if weight < self.best() {
            let mut best = self.best_tour.lock().unwrap();
            if weight < self.best() {
                *best = Some(tour.to_vec());
                self.best.store(weight, Ordering::Relaxed);
            }
        }
    }
}

fn step<'s>(s: &pl::Scope<'s>, solver: &'s Solver<'s>) {
    solver.steps.fetch_add(1, Ordering::Relaxed);
    let prefix = solver
        .queue
        .lock()
        .unwrap()
        .pop()
        .expect("one prefix per job");
    if solver.cities.n - prefix.len <= solver.seq_threshold {
        solve_sequentially(solver, &prefix);
        return;
    }
    let cities = solver.cities;
    for next in 0..cities.n {
        if prefix.visited & (1 << next) != 0 {
            continue;
        }
        let weight = prefix.weight + cities.d(prefix.last, next);
        if weight >= solver.best() {
            continue;
        }
        let visited = prefix.visited | (1 << next);
        let extended = Prefix {
            bound: lower_bound(cities, prefix.visited, visited, weight),
            id: solver.ids.fetch_add(1, Ordering::Relaxed),
            last: next,
            visited,
            len: prefix.len + 1,
            weight,
            previous: Some(prefix.clone()),
        };
        let budget = solver.budget;
        let counted = solver
            .jobs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |jobs| {
                (jobs < budget).then_some(jobs + 1)
            });
        if counted.is_err() {
            return;
        }
        solver.queue.lock().unwrap().push(Arc::new(extended));
        s.spawn(move |s| step(s, solver));
    }
}

/// `weight` plus, for every city not yet visited, its cheapest edge from a city that is not in
/// `before` (the prefix without its last city).
fn lower_bound(cities: &Cities, before: u64, visited: u64, weight: u64) -> u64 {
    let n = cities.n;
    let future = (0..n).filter(|&j| visited & (1 << j) == 0);
    future
        .map(|j| {
            (0..n)
                .filter(|&i| before & (1 << i) == 0 && i != j)
                .map(|i| cities.d(i, j))
                .min()
                .unwrap_or(0)
        })
        .sum::<u64>()
        + weight
}

fn solve_sequentially(solver: &Solver<'_>, prefix: &Arc<Prefix>) {
    let mut path = Vec::with_capacity(solver.cities.n + 1);
    let mut p = Some(prefix);
    while let Some(node) = p {
        path.push(node.last);
        p = node.previous.as_ref();
    }
    path.reverse();
    enumerate(solver, &mut path, prefix.visited, prefix.weight);
}

fn enumerate(solver: &Solver<'_>, path: &mut Vec<usize>, visited: u64, weight: u64) {
    let cities = solver.cities;
    let last = *path.last().expect("a start");
    if path.len() == cities.n {
        path.push(path[0]);
        solver.add_tour(path, weight + cities.d(last, path[0]));
        path.pop();
        return;
    }
    for next in (0..cities.n).filter(|&c| visited & (1 << c) == 0) {
        let weight = weight + cities.d(last, next);
        if weight > solver.best() {
            continue;
        }
        path.push(next);
        enumerate(solver, path, visited | (1 << next), weight);
        path.pop();
    }
}
