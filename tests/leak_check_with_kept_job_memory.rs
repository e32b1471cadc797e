//! LeakSanitizer finds no leak in the memory of finished jobs while a pool is alive, as at the
//! exit of every ASan test binary whose pools outlive `main` (the global pool's among them).
//! From the review of the reuse of freed jobs' memory (src/base/job_memory.rs): a block kept in
//! a thread's lists was reported as leaked, so under `--cfg treepool_asan` the lists are off.
//!
//! Only under AddressSanitizer with `--cfg treepool_asan` (as `.ci/run` builds it): elsewhere
//! there is no leak checker to ask.
#![cfg(treepool_asan)]

mod common;

use std::os::raw::c_int;

extern "C" {
    /// LeakSanitizer's leak check, on demand: reports leaks on stderr and returns non-zero if
    /// it found any, without ending the process.
    fn __lsan_do_recoverable_leak_check() -> c_int;
}

#[test]
fn a_leak_check_while_a_worker_keeps_freed_jobs_reports_no_leak() {
    common::watchdog(60, || {
        let pool = common::pool(1, 64);
        // Spawned from this thread (not a worker): the jobs' memory comes from the global
        // allocator, and the worker that runs and frees them keeps it, one list of one size.
        for _ in 0..100 {
            pool.spawn(|| {});
        }
        common::wait_idle(&pool);
        // SAFETY: LeakSanitizer's interface, linked in by `-Zsanitizer=address`.
        let leaks = unsafe { __lsan_do_recoverable_leak_check() };
        assert_eq!(leaks, 0, "LeakSanitizer reported leaks (see stderr)");
        drop(pool);
    });
}
