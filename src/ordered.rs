//! Ordered streaming: [`Scope::map_ordered`] and [`Scope::try_map_ordered`].
//!
//! This module owns an ordered stream's window (its slots and the counters that say which items
//! were pulled, claimed and completed), its *carrier* jobs, and the consumer's wait. The consumer
//! (the thread that iterates, which is the thread that made the stream: [`OrderedMap`] is not
//! `Send`) pulls the source into the window and hands results back in input order; an item runs
//! inside a carrier, a job of the scope that claims the oldest unclaimed items one after another,
//! or inline in the consumer's own job.
//!
//! It adds no admission rule and bypasses nothing: carriers are scope spawns, admitted through
//! the token table ([`Scope::try_spawn`] where the consumer can run items itself, else
//! [`Scope::spawn`]'s rules); an item run inline is part of the consumer's job, as a `join`'s
//! `a`. It must never let the consumer run work that is not the stream's while it waits for a
//! result (design §4.13): that work could bury the result the consumer waits for.

use std::cell::UnsafeCell;
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::panic;

use crate::job::{drop_quietly, JobResult};
use crate::latch::WakeTarget;
use crate::registry::{wait_on, Registry, WorkerThread};
use crate::scope::Scope;
use crate::sync::{fence, Arc, AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// A panic payload.
type Payload = Box<dyn std::any::Any + Send>;

impl<'scope> Scope<'scope> {
    /// Runs `f` on each item of `items` as jobs of this scope and returns an iterator over the
    /// results **in input order**, keeping a bounded window of items: at most
    /// [`OrderedMap::window`] items are pulled and not yet handed back (queued, running, or done
    /// and waiting for their turn), 2 × the pool's `max_inflight` unless set.
    ///
    /// The source is pulled on the iterating thread, inside [`Iterator::next`], only while the
    /// window has room: a slow consumer or one slow item stalls the pulls (the window waits for
    /// its oldest item). Items start only once admitted: each runs in a *carrier* job of this
    /// scope (admitted like [`Scope::spawn`]: the iterating job's token as a loan, else a pool
    /// token) or, on a worker of the scope's pool, inline in the iterating job when no token is
    /// free (as `join` runs `a`). While it waits for the next result, a worker runs only the
    /// stream's own items (and broadcast jobs pinned to it), never other jobs that could bury
    /// the wait; another thread parks (another pool's worker runs its own pool's jobs). `f` may
    /// itself `join` and `spawn`.
    ///
    /// Dropping the iterator early stops the pulls, drops the items not yet started without
    /// running them, and waits for the running ones. A panic of `f` is raised again by `next`
    /// when its item's turn comes, with its original payload, after the running items finished;
    /// a panic of the source is raised by the `next` that pulled. The iterator is not `Send`:
    /// it is consumed where it was made.
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let lines = pool.scope(|s| {
    ///     s.map_ordered(1..=5, |n: u64| n * n)
    ///         .window(4)
    ///         .map(|sq| sq.to_string())
    ///         .collect::<Vec<_>>()
    /// });
    /// assert_eq!(lines, ["1", "4", "9", "16", "25"]);
    /// ```
    pub fn map_ordered<'a, I, F, R>(
        &'a self,
        items: I,
        f: F,
    ) -> OrderedMap<'a, 'scope, I::IntoIter, F, R>
    where
        I: IntoIterator,
        I::Item: Send + 'scope,
        F: Fn(I::Item) -> R + Send + Sync + 'scope,
        R: Send + 'scope,
    {
        OrderedMap::new(self, items.into_iter(), f, |_| false)
    }

    /// [`Scope::map_ordered`] for a fallible `f`: the results come in input order up to the
    /// first `Err` (in input order), which ends the stream: it is handed back, and `next`
    /// returns `None` after it. From the moment any item fails, nothing more is pulled and the
    /// items after it that have not started are dropped without running; the ones before it
    /// still run and are handed back first; the iterator waits for the running ones before it
    /// hands back the `Err`. A panic wins over an error: if an item panicked meanwhile, its
    /// panic is raised instead.
    ///
    /// ```
    /// let pool = treepool::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// let out: Vec<Result<u32, String>> = pool.scope(|s| {
    ///     s.try_map_ordered(0..100u32, |n| if n == 3 { Err(format!("bad {n}")) } else { Ok(n) })
    ///         .collect()
    /// });
    /// assert_eq!(out, [Ok(0), Ok(1), Ok(2), Err("bad 3".to_string())]);
    /// ```
    pub fn try_map_ordered<'a, I, F, R, E>(
        &'a self,
        items: I,
        f: F,
    ) -> OrderedMap<'a, 'scope, I::IntoIter, F, Result<R, E>>
    where
        I: IntoIterator,
        I::Item: Send + 'scope,
        F: Fn(I::Item) -> Result<R, E> + Send + Sync + 'scope,
        R: Send + 'scope,
        E: Send + 'scope,
    {
        OrderedMap::new(self, items.into_iter(), f, Result::is_err)
    }
}

/// The iterator of [`Scope::map_ordered`] and [`Scope::try_map_ordered`]: the results of `F` on
/// the items of `I`, in input order, computed on the scope's pool within a bounded window.
pub struct OrderedMap<'a, 'scope, I: Iterator, F, O> {
    scope: &'a Scope<'scope>,
    source: I,
    /// Until the first `next`: then it moves into the stream.
    f: Option<F>,
    /// Whether an output ends the stream (an `Err` of `try_map_ordered`).
    fails: fn(&O) -> bool,
    window: usize,
    /// Made by the first `next`.
    stream: Option<Arc<Stream<I::Item, O, F>>>,
    /// Items pulled, and items handed back (the window holds `pulled - handed`).
    pulled: usize,
    handed: usize,
    source_done: bool,
    /// The stream ended: every item after `handed` was dropped or handed over, none runs.
    ended: bool,
    /// Consumed on the thread that made it (the wake target and the inline rule are that
    /// thread's).
    _not_send: PhantomData<*const ()>,
}

impl<'a, 'scope, I, F, O> OrderedMap<'a, 'scope, I, F, O>
where
    I: Iterator,
    I::Item: Send + 'scope,
    F: Fn(I::Item) -> O + Send + Sync + 'scope,
    O: Send + 'scope,
{
    fn new(scope: &'a Scope<'scope>, source: I, f: F, fails: fn(&O) -> bool) -> Self {
        OrderedMap {
            window: 2 * scope.registry().max_inflight(),
            scope,
            source,
            f: Some(f),
            fails,
            stream: None,
            pulled: 0,
            handed: 0,
            source_done: false,
            ended: false,
            _not_send: PhantomData,
        }
    }

    /// Sets the window: the most items pulled from the source and not yet handed back (queued,
    /// running, or waiting for their turn). Default: 2 × the pool's `max_inflight`.
    ///
    /// # Panics
    ///
    /// If `items` is 0, or if the stream has started (`next` was called).
    pub fn window(mut self, items: usize) -> Self {
        assert!(
            items > 0,
            "OrderedMap::window: the window must hold at least one item"
        );
        assert!(
            self.stream.is_none(),
            "OrderedMap::window: set the window before the first `next`"
        );
        self.window = items;
        self
    }

    /// The stream, made at the first call.
    fn stream(&mut self) -> Arc<Stream<I::Item, O, F>> {
        if let Some(stream) = &self.stream {
            return stream.clone();
        }
        let here = WorkerThread::current();
        let stream = Arc::new(Stream {
            f: self
                .f
                .take()
                .expect("the function moves into the stream once"),
            fails: self.fails,
            slots: (0..self.window).map(|_| Slot::default()).collect(),
            pulled: AtomicUsize::new(0),
            claimed: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            carriers: AtomicUsize::new(0),
            stop: AtomicUsize::new(usize::MAX),
            waiting: AtomicBool::new(false),
            consumer: self.scope.registry().waker_for(here),
        });
        self.stream = Some(stream.clone());
        stream
    }

    /// Pulls items while the window has room and nothing failed.
    fn pull(&mut self, stream: &Stream<I::Item, O, F>) {
        // Relaxed: a hint; an item pulled past a failure is dropped unrun anyway.
        while !self.source_done
            && self.pulled - self.handed < self.window
            && self.pulled < stream.stop.load(Ordering::Relaxed)
        {
            let Some(item) = self.source.next() else {
                self.source_done = true;
                break;
            };
            let slot = stream.slot(self.pulled);
            // SAFETY: the slot's previous item (`pulled - window`) was handed back, so no claimer
            // touches it, and index `pulled` is not published yet.
            unsafe { *slot.item.get() = Some(item) };
            self.pulled += 1;
            // SeqCst: publishes the item to claimers (release) and orders the store before the
            // carrier count read in `add_carriers` (the consumer's half of the exit handshake).
            stream.pulled.store(self.pulled, Ordering::SeqCst);
        }
    }

    /// Spawns carriers while there are fewer than unclaimed items, as long as tokens are free;
    /// a consumer that cannot run items itself makes sure at least one carrier lives, waiting for
    /// its admission by [`Scope::spawn`]'s rules.
    fn add_carriers(&mut self, stream: &Arc<Stream<I::Item, O, F>>, inline: bool) {
        loop {
            // SeqCst: the consumer's half of the exit handshake (see `Stream::serve`).
            let carriers = stream.carriers.load(Ordering::SeqCst);
            let unclaimed = self.pulled - stream.claimed.load(Ordering::SeqCst);
            if unclaimed <= carriers {
                return;
            }
            // SeqCst: counted before it can exit.
            stream.carriers.fetch_add(1, Ordering::SeqCst);
            if self.scope.try_spawn(stream.carrier()) {
                continue;
            }
            if inline || carriers > 0 {
                // SeqCst: as above; the consumer runs the items itself, or a carrier lives.
                stream.carriers.fetch_sub(1, Ordering::SeqCst);
            } else {
                self.scope.spawn(stream.carrier());
            }
            return;
        }
    }
}

impl<'scope, I, F, O> Iterator for OrderedMap<'_, 'scope, I, F, O>
where
    I: Iterator,
    I::Item: Send + 'scope,
    F: Fn(I::Item) -> O + Send + Sync + 'scope,
    O: Send + 'scope,
{
    type Item = O;

    fn next(&mut self) -> Option<O> {
        if self.ended {
            return None;
        }
        let stream = self.stream();
        self.pull(&stream);
        if self.handed == self.pulled {
            // The source ran dry (or failed items stopped the pulls, which `handed` reached).
            if let Some(payload) = self.end() {
                panic::resume_unwind(payload);
            }
            return None;
        }
        let inline = self.inline_worker().is_some();
        self.add_carriers(&stream, inline);
        let slot = stream.slot(self.handed);
        let registry = self.scope.registry();
        self.wait(&stream, || slot.is_done(), || stream.run_one(registry));
        let output = stream.take(self.handed);
        self.handed += 1;
        match output {
            Some(JobResult::Ok(output)) if !(stream.fails)(&output) => Some(output),
            Some(JobResult::Ok(failure)) => match self.end() {
                Some(payload) => {
                    drop_quietly(failure);
                    panic::resume_unwind(payload)
                }
                None => Some(failure),
            },
            Some(JobResult::Panic(payload)) => {
                drop_quietly(self.end());
                panic::resume_unwind(payload)
            }
            _ => unreachable!("an item before the stop was dropped unrun"),
        }
    }
}

impl<'scope, I, F, O> FusedIterator for OrderedMap<'_, 'scope, I, F, O>
where
    I: Iterator,
    I::Item: Send + 'scope,
    F: Fn(I::Item) -> O + Send + Sync + 'scope,
    O: Send + 'scope,
{
}

impl<I: Iterator, F, O> Drop for OrderedMap<'_, '_, I, F, O> {
    fn drop(&mut self) {
        drop_quietly(self.end());
    }
}

impl<I: Iterator, F, O> OrderedMap<'_, '_, I, F, O> {
    /// The calling worker, if it may run items inline: a worker of the scope's pool, inside a
    /// job (whose token the items then run on).
    fn inline_worker<'w>(&self) -> Option<&'w WorkerThread> {
        self.scope
            .registry()
            .own(WorkerThread::current())
            .filter(|w| !w.current_ptr().is_null())
    }

    /// Waits until `done`: inline, running only what `own` runs (the stream's unclaimed items)
    /// and pinned broadcast jobs; elsewhere, as [`wait_on`] (parking, or running another
    /// pool's jobs).
    fn wait(
        &self,
        stream: &Stream<I::Item, O, F>,
        done: impl Fn() -> bool,
        own: impl FnMut() -> bool,
    ) {
        if done() {
            return;
        }
        // Relaxed store, then a SeqCst fence: the waiter's half of the wake handshake (see
        // `Stream::complete`).
        stream.waiting.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        match self.inline_worker() {
            Some(worker) => worker.wait_for_own(&done, own),
            None => wait_on(WorkerThread::current(), &done),
        }
        // Relaxed: only an optimisation for completers; a stale `true` costs one wake.
        stream.waiting.store(false, Ordering::Relaxed);
    }

    /// Ends the stream, once: no item from `handed` on starts any more; the unstarted ones are
    /// dropped unrun, the running ones waited for, and what they left in the window dropped.
    /// Returns the first panic found there (a panic wins over an error).
    fn end(&mut self) -> Option<Payload> {
        if std::mem::replace(&mut self.ended, true) {
            return None;
        }
        let stream = self.stream.clone()?;
        // SeqCst: claimers that claim after this see it and drop their item.
        stream.stop.fetch_min(self.handed, Ordering::SeqCst);
        let registry = self.scope.registry();
        while let Some(index) = stream.claim() {
            stream.drop_claimed(index, registry);
        }
        let pulled = self.pulled;
        // Acquire: pairs with the completers' release, so their slots are theirs no more.
        let all_done = || stream.completed.load(Ordering::Acquire) == pulled;
        self.wait(&stream, all_done, || false);
        let mut first_panic = None;
        for index in self.handed..pulled {
            match stream.take(index) {
                Some(JobResult::Panic(payload)) if first_panic.is_none() => {
                    first_panic = Some(payload)
                }
                output => drop_quietly(output),
            }
        }
        first_panic
    }
}

/// The state an ordered stream shares with its carriers.
struct Stream<T, O, F> {
    f: F,
    fails: fn(&O) -> bool,
    /// Item `i` lives in slot `i % slots.len()` from its pull until it is handed back.
    slots: Box<[Slot<T, O>]>,
    /// Items published by the consumer.
    pulled: AtomicUsize,
    /// Items claimed (to run, or to drop), oldest first.
    claimed: AtomicUsize,
    /// Claimed items whose slot is done.
    completed: AtomicUsize,
    /// Carriers spawned that have not left.
    carriers: AtomicUsize,
    /// Items at or past this index are dropped unrun (a failure, a panic, or the stream's end).
    stop: AtomicUsize,
    /// The consumer waits (or is about to): completers wake it.
    waiting: AtomicBool,
    consumer: WakeTarget,
}

// SAFETY: an item (Send) moves from the consumer to the one thread that claimed it, an output
// (Send) from that thread back to the consumer; the counters order each hand-over (see `Slot`).
// `f` is called from several threads at once, hence `Sync`.
unsafe impl<T: Send, O: Send, F: Send + Sync> Sync for Stream<T, O, F> {}
// SAFETY: as above.
unsafe impl<T: Send, O: Send, F: Send + Sync> Send for Stream<T, O, F> {}

/// One place of the window.
///
/// The item is written by the consumer before it publishes the index (`Stream::pulled`), and
/// taken by the one thread that claims the index. The output is written by that thread before
/// it marks the slot done (`state`, release), and taken by the consumer after it saw it done
/// (acquire), which then marks the slot empty for the item `slots.len()` places later, which it
/// writes itself. So each cell has one owner at a time.
struct Slot<T, O> {
    state: AtomicU8,
    item: UnsafeCell<Option<T>>,
    /// `None` once taken, or for an item dropped unrun.
    output: UnsafeCell<Option<JobResult<O>>>,
}

const EMPTY: u8 = 0;
const DONE: u8 = 1;

impl<T, O> Default for Slot<T, O> {
    fn default() -> Self {
        Slot {
            state: AtomicU8::new(EMPTY),
            item: UnsafeCell::new(None),
            output: UnsafeCell::new(None),
        }
    }
}

impl<T, O> Slot<T, O> {
    fn is_done(&self) -> bool {
        // Acquire: pairs with `Stream::complete`'s release: the output is visible.
        self.state.load(Ordering::Acquire) == DONE
    }
}

impl<T, O, F> Stream<T, O, F> {
    fn slot(&self, index: usize) -> &Slot<T, O> {
        &self.slots[index % self.slots.len()]
    }

    /// Claims the oldest unclaimed item, if one was pulled.
    fn claim(&self) -> Option<usize> {
        // SeqCst loads: the claimers' half of the exit handshake (see `serve`); the `pulled`
        // load also acquires the item.
        let mut claimed = self.claimed.load(Ordering::SeqCst);
        loop {
            if claimed >= self.pulled.load(Ordering::SeqCst) {
                return None;
            }
            // SeqCst: one total order of claims; the winner owns the index.
            match self.claimed.compare_exchange_weak(
                claimed,
                claimed + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(claimed),
                Err(now) => claimed = now,
            }
        }
    }

    /// Drops claimed item `index` unrun (the stream ended).
    fn drop_claimed(&self, index: usize, registry: &Registry) {
        let slot = self.slot(index);
        // SAFETY: as in `run`.
        drop_quietly(unsafe { (*slot.item.get()).take() });
        self.complete(slot, registry);
    }

    /// Marks `slot` done and wakes the consumer if it waits.
    fn complete(&self, slot: &Slot<T, O>, registry: &Registry) {
        // Release: publishes the output to the consumer's acquire.
        slot.state.store(DONE, Ordering::Release);
        // Release: publishes the same to `end`'s wait for the count.
        self.completed.fetch_add(1, Ordering::Release);
        // SeqCst fence, then the flag: the completer's half of the wake handshake (the
        // consumer raises the flag, fences, then checks), as a latch's setter does.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fences.
        if self.waiting.load(Ordering::Relaxed) {
            self.consumer.clone().wake(registry);
        }
    }

    /// The output of done item `index`, leaving its slot empty for the item `slots.len()` later.
    fn take(&self, index: usize) -> Option<JobResult<O>> {
        let slot = self.slot(index);
        debug_assert!(slot.is_done(), "an output taken before its item was done");
        // SAFETY: the slot is done (seen with acquire), so its claimer no longer touches it.
        let output = unsafe { (*slot.output.get()).take() };
        // Relaxed: only the consumer reads a slot's state before the next item is published.
        slot.state.store(EMPTY, Ordering::Relaxed);
        output
    }
}

impl<'scope, T, O, F> Stream<T, O, F>
where
    T: Send + 'scope,
    O: Send + 'scope,
    F: Fn(T) -> O + Send + Sync + 'scope,
{
    /// Runs claimed item `index` (or drops it unrun, if past the stop), stores its output and
    /// marks its slot done.
    fn run(&self, index: usize, registry: &Registry) {
        let slot = self.slot(index);
        // SAFETY: this thread claimed `index`, so it alone takes its item (published before).
        let item = unsafe { (*slot.item.get()).take() }.expect("a pulled item is claimed once");
        // SeqCst: a stop set before this claim is seen (see `OrderedMap::end`).
        let output = if index < self.stop.load(Ordering::SeqCst) {
            let output = JobResult::call(|| (self.f)(item));
            if !matches!(&output, JobResult::Ok(o) if !(self.fails)(o)) {
                // SeqCst: later claims see it; nothing after a failure starts.
                self.stop.fetch_min(index + 1, Ordering::SeqCst);
            }
            Some(output)
        } else {
            drop_quietly(item);
            None
        };
        // SAFETY: the slot's output is this claimer's until it marks the slot done.
        unsafe { *slot.output.get() = output };
        self.complete(slot, registry);
    }

    /// Claims and runs one item, if one is left: the consumer's help while it waits.
    fn run_one(&self, registry: &Registry) -> bool {
        self.claim()
            .map(|index| self.run(index, registry))
            .is_some()
    }

    /// A carrier job's closure.
    fn carrier(self: &Arc<Self>) -> impl FnOnce(&Scope<'scope>) + Send + 'scope {
        let stream = self.clone();
        move |scope| stream.serve(scope.registry())
    }

    /// A carrier's run: claims and runs the oldest unclaimed items until there are none, then
    /// leaves. Leaving is a handshake with the consumer's pulls: the carrier counts itself out,
    /// then looks for an item once more (and stays if it finds one); the consumer publishes an
    /// item, then reads the count (and spawns a carrier if there is none). All four SeqCst: one
    /// of the two sees the other, so no pulled item is left without a carrier unless the
    /// consumer knows it (it then runs the item itself, or waits for a carrier's admission).
    fn serve(&self, registry: &Registry) {
        loop {
            while self.run_one(registry) {}
            // SeqCst: see above.
            self.carriers.fetch_sub(1, Ordering::SeqCst);
            if self.claimed.load(Ordering::SeqCst) >= self.pulled.load(Ordering::SeqCst) {
                return;
            }
            // SeqCst: counted in again before it claims.
            self.carriers.fetch_add(1, Ordering::SeqCst);
        }
    }
}
