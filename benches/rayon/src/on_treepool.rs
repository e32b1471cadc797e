//! The rayon programs of `programs.rs` on treepool (see benches/rayon.sh); after a run, the
//! global pool's `Stats` peaks.
mod programs;

fn main() {
    programs::main(|| {
        let stats = treepool::global_stats();
        vec![
            ("max_inflight", treepool::global_max_inflight() as u64),
            ("peak_executing", stats.peak_executing as u64),
            ("peak_inflight", stats.peak_inflight as u64),
            ("peak_depth", stats.peak_depth as u64),
            (
                "admitted",
                stats.admitted_on_loan + stats.admitted_from_pool,
            ),
            ("handed_back", stats.handed_back),
            ("admission_waits", stats.admission_waits),
        ]
    });
}
