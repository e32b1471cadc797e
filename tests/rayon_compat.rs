//! rayon on treepool: builds tests/rayon-compat (a crate of rayon programs whose `rayon-core` is
//! patched to this repository's compatibility crate, rayon-core/) and runs its programs, a
//! `par_iter().map().sum()`, a `par_sort`, a `par_bridge` over a slow iterator and a
//! `rayon::scope` fan-out, on rayon's global pool sized by `RAYON_NUM_THREADS` and capped by
//! `TREEPOOL_MAX_INFLIGHT`. Each checks its result against a sequential computation; this file
//! checks what it printed: the result, and that treepool's `Stats` for the global pool saw the
//! work (so rayon really ran on treepool), within the cap, and back to zero after.
//!
//! The crate builds with cargo into a target directory of its own under this test's temporary
//! directory (its own workspace: `links` keeps the real rayon-core, which treepool's tests
//! use, out of its graph); each program runs under `timeout`, so a hang fails the test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const THREADS: u64 = 2;
const CAP: u64 = 3;

/// The fixture's binary, built once per test process.
fn fixture() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rayon-compat/Cargo.toml");
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rayon-compat");
        let out = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            .stdin(Stdio::null())
            .output()
            .expect("run cargo build for tests/rayon-compat");
        assert!(
            out.status.success(),
            "cargo build of tests/rayon-compat failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("debug/rayon-compat")
    })
}

/// Runs `program` (at most 120 s) and returns the `key=value` lines it printed.
fn run(program: &str) -> HashMap<String, u64> {
    run_traced(program, None)
}

/// [`run`], with `TREEPOOL_TRACE` set to `trace` if given (else removed).
fn run_traced(program: &str, trace: Option<&Path>) -> HashMap<String, u64> {
    let mut command = Command::new("timeout");
    match trace {
        Some(path) => command.env("TREEPOOL_TRACE", path),
        None => command.env_remove("TREEPOOL_TRACE"),
    };
    let out = command
        .arg("120")
        .arg(fixture())
        .arg(program)
        .env("RAYON_NUM_THREADS", THREADS.to_string())
        .env("TREEPOOL_MAX_INFLIGHT", CAP.to_string())
        .env_remove("TREEPOOL_NUM_THREADS")
        .stdin(Stdio::null())
        .output()
        .expect("run the fixture");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rayon-compat {program}: {} (124: killed after 120 s)\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let values: HashMap<String, u64> = stdout
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_string(), value.parse().expect("a number")))
        .collect();
    check_stats(program, &values);
    values
}

/// The global pool's shape and bounds, as the environment set them.
fn check_stats(program: &str, v: &HashMap<String, u64>) {
    let at = |key: &str| v[key];
    assert_eq!(
        at("threads"),
        THREADS,
        "{program}: RAYON_NUM_THREADS sizes the pool"
    );
    assert_eq!(
        at("max_inflight"),
        CAP,
        "{program}: TREEPOOL_MAX_INFLIGHT caps it"
    );
    assert!(
        at("admitted") >= 1,
        "{program}: rayon's work went through treepool: {v:?}"
    );
    assert!(
        (1..=CAP).contains(&at("peak_executing")),
        "{program}: {v:?}"
    );
    assert!(
        at("peak_inflight") <= CAP * at("peak_depth"),
        "{program}: {v:?}"
    );
    let idle = (at("inflight"), at("executing"), at("tokens_in_use"));
    assert_eq!(idle, (0, 0, 0), "{program}: idle after: {v:?}");
}

#[test]
fn par_iter_map_sum() {
    let expected: u64 = (0..1_000_000u64).map(|x| x * x % 1_000_003).sum();
    assert_eq!(run("sum")["result"], expected);
}

#[test]
fn par_sort() {
    assert_eq!(run("sort")["result"], 1_000_000);
}

#[test]
fn par_bridge_over_a_slow_iterator() {
    assert_eq!(
        run("bridge")["result"],
        (0..200u64).map(|x| x * 2).sum::<u64>()
    );
}

#[test]
fn scope_fan_out() {
    let v = run("scope");
    assert_eq!(v["result"], 100 * 100);
    // Every spawn and the scope's root was admitted through the token table.
    assert_eq!(v["admitted"], 1 + 100 + 100 * 100, "{v:?}");
}

#[test]
fn a_rayon_program_is_traced_by_the_variable_alone() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rayon-compat-trace.json");
    let _ = std::fs::remove_file(&path);
    let v = run_traced("scope", Some(&path));
    assert_eq!(v["result"], 100 * 100);
    // Written at exit: rayon's global pool is treepool's, never dropped.
    let text = std::fs::read_to_string(&path).expect("the trace file was written at exit");
    let trace: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let events = trace["traceEvents"].as_array().unwrap();
    let spawns = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "scope_spawn")
        .count();
    let dropped: u64 = (trace["otherData"]["dropped"].as_object().unwrap())
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    // Every `rayon::scope` spawn is a treepool scope spawn (none overwritten at this size).
    assert_eq!((spawns, dropped), (100 + 100 * 100, 0), "{v:?}");
}
