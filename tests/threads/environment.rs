//! The environment a rayon program brings: `RAYON_NUM_THREADS` (and rayon-core's deprecated
//! `RAYON_RS_NUM_CPUS`) size pools built with `num_threads(0)`, after `TREEPOOL_NUM_THREADS`;
//! `TREEPOOL_MAX_INFLIGHT` sets the cap of pools built without `max_inflight`, the global pool
//! included, whose `Stats` `global_stats` reads; and rayon-core's deprecated `Configuration`,
//! `initialize`, `ThreadPool::new` and `breadth_first`. Each test changes the process's
//! environment or builds the global pool, so each runs alone in a child process. (From the
//! rayon-core compatibility work, issue 26.)
//!
//! Bad values (issue 36): rayon's two variables are read exactly as the real rayon-core 1.13
//! (a dev-dependency) reads them, which the tests check by building a rayon-core pool under the
//! same environment; every bad value of treepool's own two variables is a `BuildError` from
//! `build` and `build_global`, and a panic of the global pool's first use, that names the
//! variable and its value. Pools whose size is all a test reads are built with a spawn handler
//! that drops its threads unstarted: a size of 4096 (or rayon's 5000) costs no thread then.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::common;

use treepool::{ThreadPoolBuilder, MAX_INFLIGHT_ENV, NUM_THREADS_ENV};

/// Sets the environment variables `vars` (`None`: removed) and every other variable this file
/// tests removed. Only called in a child process running one test, before it starts a pool.
fn set_env(vars: &[(&str, Option<&str>)]) {
    let vars: Vec<_> = vars
        .iter()
        .map(|&(name, value)| (name, value.map(OsStr::new)))
        .collect();
    set_env_os(&vars);
}

/// [`set_env`] with values that need not be UTF-8.
fn set_env_os(vars: &[(&str, Option<&OsStr>)]) {
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

/// The size of a default treepool pool under the current environment, or its build error;
/// no worker thread starts (the spawn handler drops each one: a worker never run is allowed).
fn treepool_size() -> Result<usize, String> {
    let pool = ThreadPoolBuilder::new()
        .spawn_handler(|thread| {
            drop(thread);
            Ok(())
        })
        .build()
        .map_err(|err| err.to_string())?;
    Ok(pool.current_num_threads())
}

/// The size of a default pool of the real rayon-core under the current environment; no worker
/// thread starts.
fn rayon_core_size() -> usize {
    rayon::ThreadPoolBuilder::new()
        .spawn_handler(|thread| {
            drop(thread);
            Ok(())
        })
        .build()
        .expect("rayon-core builds whatever its variables hold")
        .current_num_threads()
}

/// Non-UTF-8 bytes, which `std::env::var` refuses.
fn not_utf8() -> &'static OsStr {
    OsStr::from_bytes(b"4\xff")
}

/// Bad or unusual values of a variable that reads a count. `5000` is above treepool's thread
/// limit (4096) and below rayon-core's (65535); `18446744073709551616` is `usize::MAX + 1`.
const ODD_VALUES: [&str; 17] = [
    "0",
    "-1",
    "-0",
    "+3",
    " 3 ",
    "3\n",
    "",
    " ",
    "many",
    "3.0",
    "0x10",
    "1e3",
    "٣",
    "4096",
    "4097",
    "5000",
    "18446744073709551616",
];

fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn rayon_variables_are_read_exactly_as_rayon_core_reads_them() {
    common::isolated!(120, || {
        let [rayon, old] = treepool::RAYON_NUM_THREADS_ENVS;
        let mut values: Vec<Option<&OsStr>> = vec![None, Some(OsStr::new("2")), Some(not_utf8())];
        values.extend(ODD_VALUES.map(|v| Some(OsStr::new(v))));
        // Every pair of values of the two variables: treepool's size is rayon-core's, reduced
        // to treepool's limit, and never an error.
        for &first in &values {
            for &second in &values {
                set_env_os(&[(rayon, first), (old, second)]);
                let want = rayon_core_size().min(treepool::max_num_threads());
                let got = treepool_size();
                assert_eq!(got, Ok(want), "{rayon}={first:?} {old}={second:?}");
            }
        }
        // The rules this follows, spelled out: RAYON_NUM_THREADS first; a value that is not a
        // number (whitespace included) is skipped; 0 means the available parallelism, also in
        // RAYON_NUM_THREADS when RAYON_RS_NUM_CPUS holds a number.
        assert_eq!(default_threads(&[(rayon, Some("3"))]), 3);
        assert_eq!(default_threads(&[(old, Some("2"))]), 2);
        assert_eq!(default_threads(&[(rayon, Some("5")), (old, Some("2"))]), 5);
        assert_eq!(
            default_threads(&[(rayon, Some("many")), (old, Some("2"))]),
            2
        );
        assert_eq!(
            default_threads(&[(rayon, Some(" 3 ")), (old, Some("2"))]),
            2
        );
        assert_eq!(default_threads(&[(rayon, Some("-1")), (old, Some("2"))]), 2);
        assert_eq!(
            default_threads(&[(rayon, Some("0")), (old, Some("2"))]),
            available()
        );
        assert_eq!(default_threads(&[(rayon, Some("-1"))]), available());
        set_env(&[(rayon, Some("5000"))]);
        assert_eq!(treepool_size(), Ok(treepool::max_num_threads()));
    },);
}

#[test]
fn treepool_num_threads_wins_and_an_explicit_count_wins_over_it() {
    common::isolated!(60, || {
        let rayon = "RAYON_NUM_THREADS";
        // TREEPOOL_NUM_THREADS wins over rayon's variables.
        let both = [(NUM_THREADS_ENV, Some("2")), (rayon, Some("3"))];
        assert_eq!(default_threads(&both), 2);
        assert_eq!(default_threads(&[(NUM_THREADS_ENV, Some(" 3 "))]), 3);
        set_env(&[(NUM_THREADS_ENV, Some("4096"))]);
        assert_eq!(treepool_size(), Ok(treepool::max_num_threads()));
        // An explicit count wins over every variable, and a bad one is then not read.
        set_env(&both);
        let pool = ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        assert_eq!(pool.current_num_threads(), 4);
        set_env(&[(NUM_THREADS_ENV, Some("0"))]);
        let pool = ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        assert_eq!(pool.current_num_threads(), 1);
    },);
}

/// Checks that a build under `name=value` (every other variable of this file removed) fails
/// from `build` and `build_global` with a message that starts with the variable and its value,
/// as `VAR="value"` (Rust's quoting: an empty or non-UTF-8 value stays visible). Returns the
/// message.
fn assert_refused(name: &str, value: &OsStr, also_set: &[(&str, Option<&OsStr>)]) -> String {
    let mut vars = vec![(name, Some(value))];
    vars.extend_from_slice(also_set);
    set_env_os(&vars);
    let named = format!("{name}={value:?}");
    let message = match ThreadPoolBuilder::new().num_threads(0).build() {
        Ok(pool) => panic!(
            "{named}: built a pool of {} threads and {} tokens",
            pool.current_num_threads(),
            pool.max_inflight()
        ),
        Err(err) => err.to_string(),
    };
    assert!(message.starts_with(&named), "{named}: {message}");
    let global = ThreadPoolBuilder::new().build_global().unwrap_err();
    assert_eq!(global.to_string(), message, "{named}: build_global");
    message
}

/// The values of a count variable that treepool refuses: everything in [`ODD_VALUES`] that is
/// not a number from 1 to `max` (surrounding whitespace allowed), and a value that is not UTF-8.
fn refused_values(max: u64) -> Vec<&'static OsStr> {
    let mut bad: Vec<&OsStr> = ODD_VALUES
        .into_iter()
        .filter(|v| {
            !v.trim()
                .parse::<u64>()
                .is_ok_and(|n| (1..=max).contains(&n))
        })
        .map(OsStr::new)
        .collect();
    bad.push(not_utf8());
    bad
}

#[test]
fn every_bad_treepool_num_threads_is_an_error_naming_it() {
    common::isolated!(60, || {
        let bad = refused_values(treepool::max_num_threads() as u64);
        for needed in [
            "0",
            "-1",
            "",
            " ",
            "many",
            "3.0",
            "4097",
            "18446744073709551616",
        ] {
            assert!(bad.contains(&OsStr::new(needed)), "{needed}");
        }
        for value in bad {
            let message = assert_refused(NUM_THREADS_ENV, value, &[]);
            assert!(message.contains("from 1 to 4096"), "{message}");
            // Strict also when rayon's variable holds a good number.
            let rayon = Some(OsStr::new("3"));
            assert_refused(NUM_THREADS_ENV, value, &[("RAYON_NUM_THREADS", rayon)]);
        }
    },);
}

#[test]
fn every_bad_treepool_max_inflight_is_an_error_naming_it() {
    common::isolated!(60, || {
        // The token table's limit, 2^32 - 1 (`max_inflight`'s documentation).
        let max = u32::MAX as u64;
        let mut bad = refused_values(max);
        bad.extend(["4294967296", "-4294967295"].map(OsStr::new));
        for needed in ["0", "-1", "", " ", "many", "3.0", "18446744073709551616"] {
            assert!(bad.contains(&OsStr::new(needed)), "{needed}");
        }
        for value in bad {
            let message = assert_refused(MAX_INFLIGHT_ENV, value, &[]);
            assert!(message.contains("from 1 to 4294967295"), "{message}");
        }
        // The largest cap is accepted, and a cap set in code is checked on its own: the
        // variable is then not read.
        set_env(&[(MAX_INFLIGHT_ENV, Some("4294967295"))]);
        let pool = ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        assert_eq!(pool.max_inflight() as u64, max);
        set_env(&[(MAX_INFLIGHT_ENV, Some("0"))]);
        assert_eq!(common::pool(1, 3).max_inflight(), 3);
        let err = ThreadPoolBuilder::new()
            .max_inflight(0)
            .build()
            .unwrap_err();
        assert!(!err.to_string().contains(MAX_INFLIGHT_ENV), "{err}");
    },);
}

#[test]
fn global_pool_first_use_panics_naming_a_bad_variable() {
    common::isolated!(60, || {
        for (name, value) in [
            (NUM_THREADS_ENV, "0"),
            (NUM_THREADS_ENV, "many"),
            (NUM_THREADS_ENV, "4097"),
            (MAX_INFLIGHT_ENV, "0"),
            (MAX_INFLIGHT_ENV, "-2"),
            (MAX_INFLIGHT_ENV, "4294967296"),
        ] {
            set_env(&[(name, Some(value))]);
            let message = common::catch(treepool::current_num_threads).unwrap_err();
            let named = format!("{name}={value:?}");
            assert!(message.contains("global pool"), "{message}");
            assert!(message.contains(&named), "{named}: {message}");
        }
        // A failed first use leaves no global pool behind: the next one builds it.
        set_env(&[(NUM_THREADS_ENV, Some("2")), (MAX_INFLIGHT_ENV, Some("3"))]);
        assert_eq!(treepool::current_num_threads(), 2);
        assert_eq!(treepool::global_max_inflight(), 3);
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
        // The same counts; how many workers are idle this instant is not a count.
        let mut seen = other.install(treepool::global_stats);
        seen.idle_workers = stats.idle_workers;
        assert_eq!(seen, stats);
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
