//! STUB: sequential stand-in with the final public contract. Replaced by the real pool.
#![allow(missing_docs, clippy::new_without_default)]
use std::fmt;
use std::marker::PhantomData;

#[derive(Default)]
pub struct ThreadPoolBuilder { threads: usize, cap: Option<usize> }
impl ThreadPoolBuilder {
    pub fn new() -> Self { Self::default() }
    pub fn num_threads(mut self, n: usize) -> Self { self.threads = n; self }
    pub fn max_inflight(mut self, cap: usize) -> Self { self.cap = Some(cap); self }
    pub fn thread_name<F: FnMut(usize) -> String + 'static>(self, _f: F) -> Self { self }
    pub fn stack_size(self, _bytes: usize) -> Self { self }
    pub fn pin_threads(self, _pin: bool) -> Self { self }
    pub fn build(self) -> Result<ThreadPool, BuildError> {
        if self.cap == Some(0) { return Err(BuildError("max_inflight must be at least 1".into())); }
        Ok(ThreadPool { threads: self.threads.max(1), cap: self.cap.unwrap_or(64) })
    }
    pub fn build_global(self) -> Result<(), BuildError> { Ok(()) }
}
#[derive(Debug)]
pub struct BuildError(String);
impl fmt::Display for BuildError { fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(&self.0) } }
impl std::error::Error for BuildError {}

pub struct ThreadPool { threads: usize, cap: usize }
impl ThreadPool {
    pub fn install<OP: FnOnce() -> R + Send, R: Send>(&self, op: OP) -> R { op() }
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where A: FnOnce() -> RA + Send, B: FnOnce() -> RB + Send, RA: Send, RB: Send { (a(), b()) }
    pub fn scope<'scope, OP, R>(&self, op: OP) -> R
    where OP: FnOnce(&Scope<'scope>) -> R + Send, R: Send { scope(op) }
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) { f() }
    pub fn current_num_threads(&self) -> usize { self.threads }
    pub fn max_inflight(&self) -> usize { self.cap }
    pub fn stats(&self) -> Stats { Stats::default() }
}
pub struct Scope<'scope> { _m: PhantomData<&'scope ()> }
impl<'scope> Scope<'scope> {
    pub fn spawn<F: FnOnce(&Scope<'scope>) + Send + 'scope>(&self, f: F) { f(self) }
}
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where A: FnOnce() -> RA + Send, B: FnOnce() -> RB + Send, RA: Send, RB: Send { (a(), b()) }
pub fn scope<'scope, OP, R>(op: OP) -> R
where OP: FnOnce(&Scope<'scope>) -> R + Send, R: Send { op(&Scope { _m: PhantomData }) }
pub fn spawn<F: FnOnce() + Send + 'static>(f: F) { f() }
pub fn current_thread_index() -> Option<usize> { None }
pub fn current_num_threads() -> usize { 1 }

#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub inflight: usize,
    pub peak_inflight: usize,
    pub executing: usize,
    pub peak_executing: usize,
    pub tokens_in_use: usize,
    pub peak_depth: usize,
    pub admitted_on_loan: u64,
    pub admitted_from_pool: u64,
    pub admission_waits: u64,
    pub steals: u64,
}
