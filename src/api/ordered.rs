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
//! result (design §4.8): that work could bury the result the consumer waits for.

use std::cell::UnsafeCell;
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::panic;

use crate::api::scope::Scope;
use crate::base::job_ref::{drop_quietly, JobResult};
use crate::base::wake::WakeTarget;
use crate::worker::registry::Registry;
use crate::worker::thread::WorkerThread;
use crate::worker::wait::wait_on;
use crossbeam_utils::{Backoff, CachePadded};

use crate::base::sync::{fence, lock, Arc, AtomicBool, AtomicU8, AtomicUsize, Mutex, Ordering};

/// Spins, then yields, for a moment, until `ready` (crossbeam's `Backoff`: 127 spins, then
/// yields): a carrier with nothing to claim waits so for the consumer's next pull, and a
/// consumer for its next result, before either does anything dearer (leave and be spawned
/// again, or sleep and be woken). Returns whether `ready` held.
fn linger(ready: impl Fn() -> bool) -> bool {
    let backoff = Backoff::new();
    for _ in 0..LINGER_ROUNDS {
        if ready() {
            return true;
        }
        backoff.snooze();
    }
    ready()
}

/// How many times [`linger`] backs off. In `benches/ordered.rs` (1 µs items, a plain-thread
/// consumer, 2 workers on 2 cores), yielding at once cost about 30% more than pariter; backing
/// off from spins to yields brought it to pariter's cost; fewer rounds let carriers leave and
/// be spawned again, more kept three threads competing for two cores.
const LINGER_ROUNDS: usize = 64;

/// The most slots a stream allocates, whatever its window (see [`OrderedMap::window`]).
const MAX_SLOTS: usize = 1 << 16;

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
    /// running, or waiting for their turn). Default: 2 × the pool's `max_inflight`. A window
    /// above 65,536 items holds 65,536: its slots are allocated when the stream starts.
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
            slots: (0..self.window.min(MAX_SLOTS))
                .map(|_| CachePadded::new(Slot::default()))
                .collect(),
            handoff: Handoff::new(),
            stop: AtomicUsize::new(usize::MAX),
            consumer: Mutex::new(self.scope.registry().waker_for(here)),
        });
        self.stream = Some(stream.clone());
        stream
    }

    /// Pulls items while the window has room and nothing failed.
    fn pull(&mut self, stream: &Stream<I::Item, O, F>) {
        // Relaxed: a hint; an item pulled past a failure is dropped unrun anyway.
        while !self.source_done
            && self.pulled - self.handed < stream.slots.len()
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
            stream.handoff.publish(self.pulled);
        }
    }

    /// Spawns carriers while there are fewer than unclaimed items, as long as tokens are free;
    /// a consumer that cannot run items itself makes sure at least one carrier lives, waiting for
    /// its admission by [`Scope::spawn`]'s rules.
    fn add_carriers(&mut self, stream: &Arc<Stream<I::Item, O, F>>, inline: bool) {
        while let Some(carriers) = stream.handoff.add_carrier(self.pulled) {
            if self.scope.try_spawn(Stream::carrier(stream)) {
                continue;
            }
            if inline || carriers > 0 {
                // The consumer runs the items itself, or a carrier lives.
                stream.handoff.remove_carrier();
            } else {
                self.scope.spawn_awaited(Stream::carrier(stream));
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
        // Wait site "stream consumer": a consumer running items inline on a worker of the
        // scope's pool waits in context (that pool, its job) by OwnItems (ConsumerRunsOwnItems,
        // sleeping aside); any other consumer waits in its own context by AnyAdmitted, or Park.
        // A result is often a moment away: spin a little before the wait proper (which parks a
        // plain thread at once).
        if linger(&done) {
            return;
        }
        // The thread may have changed kind since the last wait (the builder's thread of a
        // `use_current_thread` pool is that pool's worker only inside its calls): the target is
        // the thread as it waits now, published before the flag that makes completers read it.
        let here = WorkerThread::current();
        *lock(&stream.consumer) = self.scope.registry().waker_for(here);
        stream.handoff.arm();
        match self.inline_worker() {
            Some(worker) => worker.wait_for_own(&done, own),
            None => wait_on(here, &done),
        }
        stream.handoff.disarm();
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
        while let Some(index) = stream.handoff.claim() {
            stream.drop_claimed(index, registry);
        }
        let pulled = self.pulled;
        let all_done = || stream.handoff.completed() == pulled;
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
    slots: Box<[CachePadded<Slot<T, O>>]>,
    handoff: Handoff,
    /// Items at or past this index are dropped unrun (a failure, a panic, or the stream's end).
    stop: AtomicUsize,
    /// Who to wake: the consumer as it waits now (set by each wait before it raises the
    /// `waiting` flag; read by a completer that saw the flag).
    consumer: Mutex<WakeTarget>,
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
        if self.handoff.complete() {
            let consumer = lock(&self.consumer).clone();
            consumer.wake(registry.sleep());
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
        self.handoff
            .claim()
            .map(|index| self.run(index, registry))
            .is_some()
    }

    /// A carrier job's closure.
    fn carrier(this: &Arc<Self>) -> impl FnOnce(&Scope<'scope>) + Send + 'scope {
        let stream = this.clone();
        move |scope| stream.serve(scope.registry())
    }

    /// A carrier's run: claims and runs the oldest unclaimed items until there are none, lingers
    /// a little, then leaves (`Handoff::stays`).
    fn serve(&self, registry: &Registry) {
        loop {
            while self.run_one(registry) {}
            // Linger a little: the consumer is likely about to pull the next item, and a carrier
            // that is still here saves a spawn and a wake-up per item.
            if linger(|| self.handoff.has_unclaimed()) {
                continue;
            }
            if !self.handoff.stays() {
                return;
            }
        }
    }
}

/// The counters through which the consumer hands pulled items to the threads that run them, and
/// the two handshakes on them (modelled in `tests/loom/ordered.rs`):
///
/// * *leaving*: a carrier counts itself out, fences, then looks for an unclaimed item once more
///   (and counts itself back in if there is one); the consumer publishes an item, fences, then
///   reads the carrier count (and adds a carrier if it counts fewer carriers than unclaimed
///   items). With a SeqCst fence on each side, one of the two sees the other: no pulled item is
///   left without a carrier unless the consumer knows it (and then runs the item itself, or
///   spawns a carrier that waits for admission);
/// * *waking*: a completer counts its item, fences, then reads `waiting`; the consumer raises
///   `waiting`, fences, then checks its condition. One of the two sees the other (the latch
///   rule of design §3.4), so a consumer never waits for a completion that has happened.
pub struct Handoff {
    /// Items published by the consumer (written by it alone: a line of its own).
    pulled: CachePadded<AtomicUsize>,
    /// Items claimed (to run, or to drop), oldest first.
    claimed: CachePadded<AtomicUsize>,
    /// Claimed items whose slot is done.
    completed: CachePadded<AtomicUsize>,
    /// Carriers spawned that have not left.
    carriers: AtomicUsize,
    /// The consumer waits (or is about to): completers wake it.
    waiting: AtomicBool,
}

impl Default for Handoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Handoff {
    /// No item, no carrier.
    pub fn new() -> Self {
        Handoff {
            pulled: CachePadded::new(AtomicUsize::new(0)),
            claimed: CachePadded::new(AtomicUsize::new(0)),
            completed: CachePadded::new(AtomicUsize::new(0)),
            carriers: AtomicUsize::new(0),
            waiting: AtomicBool::new(false),
        }
    }

    /// The consumer publishes the items before index `pulled`, which it has written.
    pub fn publish(&self, pulled: usize) {
        // Release: the items written before are visible to whoever acquires the count.
        self.pulled.store(pulled, Ordering::Release);
    }

    /// The consumer (which published `pulled` items): if there are more unclaimed items than
    /// carriers, counts one more carrier and returns how many there were before; else `None`.
    pub fn add_carrier(&self, pulled: usize) -> Option<usize> {
        // SeqCst fence: the consumer's half of the leaving handshake (after the publication).
        fence(Ordering::SeqCst);
        // Relaxed loads: ordered by the fence; a stale claim count only overestimates the
        // unclaimed items (one carrier too many, which leaves).
        let carriers = self.carriers.load(Ordering::Relaxed);
        let unclaimed = pulled - self.claimed.load(Ordering::Relaxed);
        if unclaimed <= carriers {
            return None;
        }
        // Relaxed: the carrier is not spawned yet; its spawn publishes everything it reads.
        self.carriers.fetch_add(1, Ordering::Relaxed);
        Some(carriers)
    }

    /// The consumer could not spawn the carrier it counted in.
    pub fn remove_carrier(&self) {
        // Relaxed: no carrier ran; the consumer runs the items or another carrier lives.
        self.carriers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether an item was published and not claimed yet.
    pub fn has_unclaimed(&self) -> bool {
        // Relaxed: a hint for a lingering carrier, which claims (acquire) before it uses one.
        self.claimed.load(Ordering::Relaxed) < self.pulled.load(Ordering::Relaxed)
    }

    /// Claims the oldest published item not claimed yet, if there is one.
    pub fn claim(&self) -> Option<usize> {
        // Relaxed first read: the CAS decides.
        let mut claimed = self.claimed.load(Ordering::Relaxed);
        loop {
            // Acquire: pairs with `publish`, so the claimed item is visible.
            if claimed >= self.pulled.load(Ordering::Acquire) {
                return None;
            }
            // Relaxed: the winner owns the index; the item came with the `pulled` acquire.
            match self.claimed.compare_exchange_weak(
                claimed,
                claimed + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(claimed),
                Err(now) => claimed = now,
            }
        }
    }

    /// A carrier with nothing to claim counts itself out; returns whether it must stay after
    /// all (counted back in), because an item was published meanwhile.
    pub fn stays(&self) -> bool {
        // Relaxed RMW, then a SeqCst fence: the carrier's half of the leaving handshake.
        self.carriers.fetch_sub(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.has_unclaimed() {
            // Relaxed: as in `add_carrier`.
            self.carriers.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// A claimed item is done (its output stored and its slot marked): counts it, and returns
    /// whether the consumer waits and must be woken.
    pub fn complete(&self) -> bool {
        // Release: the output (and the slot's state) is visible to `completed`'s acquire.
        self.completed.fetch_add(1, Ordering::Release);
        // SeqCst fence, then the flag: the completer's half of the waking handshake.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fences.
        self.waiting.load(Ordering::Relaxed)
    }

    /// How many claimed items are done.
    pub fn completed(&self) -> usize {
        // Acquire: pairs with `complete`, so their outputs are visible.
        self.completed.load(Ordering::Acquire)
    }

    /// The consumer is about to wait: completers from now on wake it.
    pub fn arm(&self) {
        // Relaxed store, then a SeqCst fence: the consumer's half of the waking handshake.
        self.waiting.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// The consumer's wait is over.
    pub fn disarm(&self) {
        // Relaxed: a stale `true` costs a completer one needless wake.
        self.waiting.store(false, Ordering::Relaxed);
    }
}
