//! The environment a rayon program brings: `RAYON_NUM_THREADS` (and rayon-core's deprecated
//! `RAYON_RS_NUM_CPUS`) size pools built with `num_threads(0)`, after `TREEPOOL_NUM_THREADS`;
//! `TREEPOOL_MAX_INFLIGHT` sets the cap of pools built without `max_inflight`, the global pool
//! included, whose `Stats` `global_stats` reads; and rayon-core's deprecated `Configuration`,
//! `initialize`, `ThreadPool::new` and `breadth_first`. Each test changes the process's
//! environment or builds the global pool, so each runs alone in a child process. (From the
//! rayon-core compatibility work, issue 26.)

use crate::common;

use treepool::{ThreadPoolBuilder, MAX_INFLIGHT_ENV, NUM_THREADS_ENV};

/// Sets the environment variables `vars` (`None`: removed) and every other variable this file
/// tests removed. Only called in a child process running one test, before it starts a pool.
fn set_env(vars: &[(&str, Option<&str>)]) {
    for name in [NUM_THREADS_ENV, MAX_INFLIGHT_ENV]
        .into_iter()
        .chain(treepool::RAYON_NUM_THREADS_ENVS)
    {
        std::env::remove_var(name);
    }
    for (name, value) in vars {
        if let Some(value) = value {
            std::env::set_var(name, value);
        }
    }
}

/// The thread count a default builder gets under `vars`.
fn default_threads(vars: &[(&str, Option<&str>)]) -> usize {
    set_env(vars);
    ThreadPoolBuilder::new()
        .build()
        .expect("a default pool")
        .current_num_threads()
}

fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn rayon_num_threads_sizes_default_pools_after_treepool_num_threads() {
    common::isolated!(60, || {
        let rayon = "RAYON_NUM_THREADS";
        let old = "RAYON_RS_NUM_CPUS";
        assert_eq!(default_threads(&[(rayon, Some("3"))]), 3);
        assert_eq!(default_threads(&[(rayon, Some(" 3 "))]), 3);
        assert_eq!(default_threads(&[(old, Some("2"))]), 2);
        // As rayon-core: RAYON_NUM_THREADS first; a value that is no number is skipped,
        // 0 means the available parallelism.
        assert_eq!(default_threads(&[(rayon, Some("5")), (old, Some("2"))]), 5);
        assert_eq!(
            default_threads(&[(rayon, Some("many")), (old, Some("2"))]),
            2
        );
        assert_eq!(
            default_threads(&[(rayon, Some("0")), (old, Some("2"))]),
            available()
        );
        assert_eq!(default_threads(&[(rayon, Some("-1"))]), available());
        // TREEPOOL_NUM_THREADS wins over both.
        let both = [(NUM_THREADS_ENV, Some("2")), (rayon, Some("3"))];
        assert_eq!(default_threads(&both), 2);
        // An explicit count wins over every variable.
        set_env(&both);
        let pool = ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        assert_eq!(pool.current_num_threads(), 4);
        // TREEPOOL_NUM_THREADS stays strict when RAYON_NUM_THREADS is valid.
        set_env(&[(NUM_THREADS_ENV, Some("many")), (rayon, Some("3"))]);
        let err = ThreadPoolBuilder::new().build().unwrap_err();
        assert!(err.to_string().contains(NUM_THREADS_ENV), "{err}");
    },);
}

#[test]
fn max_inflight_env_sets_the_cap_of_pools_without_one() {
    common::isolated!(60, || {
        set_env(&[(MAX_INFLIGHT_ENV, Some("7"))]);
        let pool = ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(pool.max_inflight(), 7);
        let pool = common::pool(2, 3);
        assert_eq!(pool.max_inflight(), 3, "the builder's max_inflight wins");
        set_env(&[]);
        let pool = ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(pool.max_inflight(), 2 * treepool::DEFAULT_TOKENS_PER_THREAD);
        for bad in ["0", "many", "-3", "4294967296"] {
            set_env(&[(MAX_INFLIGHT_ENV, Some(bad))]);
            let err = ThreadPoolBuilder::new().num_threads(2).build().unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains(MAX_INFLIGHT_ENV) || message.contains("max_inflight"),
                "{bad}: {message}"
            );
        }
    },);
}

#[test]
fn global_pool_reads_both_variables_and_reports_its_stats() {
    common::isolated!(60, || {
        set_env(&[
            ("RAYON_NUM_THREADS", Some("3")),
            (MAX_INFLIGHT_ENV, Some("2")),
        ]);
        assert_eq!(treepool::current_num_threads(), 3);
        assert_eq!(treepool::global_max_inflight(), 2);
        let leaves = std::sync::atomic::AtomicUsize::new(0);
        treepool::scope(|s| {
            for _ in 0..50 {
                s.spawn(|s| {
                    for _ in 0..20 {
                        s.spawn(|_| {
                            leaves.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(leaves.into_inner(), 1000);
        let stats = treepool::global_stats();
        assert!(stats.peak_executing <= 2, "{stats:?}");
        assert!(stats.peak_inflight <= 2 * stats.peak_depth, "{stats:?}");
        assert_eq!(
            stats.admitted_on_loan + stats.admitted_from_pool,
            1051,
            "{stats:?}"
        );
        assert_eq!((stats.inflight, stats.executing), (0, 0), "{stats:?}");
        // From a worker of another pool, still the global pool's.
        let other = common::pool(2, 4);
        assert_eq!(other.install(treepool::global_stats), stats);
        assert_eq!(other.install(treepool::global_max_inflight), 2);
    },);
}

#[test]
#[allow(deprecated)]
fn rayon_core_deprecated_configuration_builds_pools() {
    common::isolated!(60, || {
        set_env(&[]);
        let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = started.clone();
        let config = treepool::Configuration::new()
            .num_threads(2)
            .thread_name(|i| format!("configured-{i}"))
            .stack_size(1 << 20)
            .breadth_first()
            .start_handler(move |_| {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
            .exit_handler(|_| {})
            .panic_handler(|_| {});
        assert!(
            format!("{config:?}").contains("num_threads: 2"),
            "{config:?}"
        );
        let pool = treepool::ThreadPool::new(config).expect("a pool from a Configuration");
        let name = pool.install(|| std::thread::current().name().map(str::to_owned));
        assert!(name.unwrap().starts_with("configured-"));
        common::spin_until(|| started.load(std::sync::atomic::Ordering::SeqCst) == 2);
        let bad = treepool::Configuration::new().thread_name(|_| "nul\0".into());
        assert!(bad.build().unwrap_err().to_string().contains("NUL"));

        treepool::initialize(treepool::Configuration::new().num_threads(3)).unwrap();
        assert_eq!(treepool::current_num_threads(), 3);
        let again = treepool::initialize(treepool::Configuration::new()).unwrap_err();
        assert!(again.to_string().contains("already"), "{again}");
    },);
}
