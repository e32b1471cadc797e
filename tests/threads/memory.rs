//! What a pool's workers commit: building a pool writes none of the memory its workers keep for
//! joins they have not made.
//!
//! Each worker keeps a split stack of `HALF_SLOTS` slots (2 MiB) for the `b`s of the joins it
//! nests, committed page by page as a thread nests that deep. When the slots were allocated
//! zeroed, the allocator wrote zeros over every slot whenever it handed back memory a freed
//! pool had used (glibc's `calloc` clears recycled memory), so a program that built a pool after
//! dropping one committed 2 MiB a worker: 128 MiB for a 64-thread pool, and a 4,096-thread build
//! in `environment.rs` spent most of its time clearing pages. (Found by profiling that test.)

use treepool::ThreadPoolBuilder;

use crate::common;

/// This process's resident set, in bytes (`VmRSS` of `/proc/self/status`).
fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a VmRSS line in kB");
    kib * 1024
}

/// Workers a pool gets in this test: enough that 2 MiB each stands far above the noise.
const WORKERS: usize = 64;

/// What a pool of `WORKERS` may add to the resident set while it lives: its deques, sleep
/// states and the first page of each worker's slots, with room to spare (the slots alone, were
/// they written, would be 128 MiB).
const BOUND: usize = 16 << 20;

#[test]
fn building_a_pool_commits_no_slots_for_joins_not_made() {
    common::isolated!(120, || {
        // No transparent huge pages in this child: where they are enabled "always", the kernel
        // may back the page a slot array's allocation header is written to with a whole 2 MiB
        // page, which this count would take for slots written.
        // SAFETY: `prctl` with these arguments changes only this process's paging policy.
        let disabled = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        assert_eq!(disabled, 0, "prctl(PR_SET_THP_DISABLE)");
        // Something else of the program allocates while each pool lives, so the pool's memory,
        // once freed, is recycled by the next build rather than given back.
        let mut kept = Vec::with_capacity(8);
        for round in 0..8 {
            let before = resident_bytes();
            // No worker thread starts (the handler drops each one), so nothing but the build
            // touches the workers' memory.
            let pool = ThreadPoolBuilder::new()
                .num_threads(WORKERS)
                .spawn_handler(|thread| {
                    drop(thread);
                    Ok(())
                })
                .build()
                .expect("a pool");
            let grown = resident_bytes().saturating_sub(before);
            assert!(
                grown < BOUND,
                "round {round}: building a pool of {WORKERS} workers made the process {grown} \
                 bytes larger (at most {BOUND})"
            );
            kept.push(std::hint::black_box(vec![round as u8; 4096]));
            drop(pool);
        }
    });
}
