//! Tests for `examples/trace_view.rs`: they run the example binary on small handwritten traces
//! (the recorder's format, `TREEPOOL_TRACE`) whose answers are worked out by hand below, and
//! check its summary, its page and its errors.
//!
//! As in tests/pgz.rs, the first test that needs the binary builds it with
//! `common::build_example` (the profile and target directory of this test executable); every
//! run is under a watchdog, so a hang fails the test instead of the suite.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The example's binary, built once per test process.
fn trace_view_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| common::build_example("trace_view"))
}

/// What one run of the example did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// The page it wrote, if any.
    html: Option<String>,
}

/// Writes `trace` to `<name>.json` in a scratch directory and runs the example on it.
fn view(name: &str, trace: &str) -> Run {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace_view");
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let input = dir.join(format!("{name}.json"));
    std::fs::write(&input, trace).expect("write the trace");
    run_on(&input)
}

/// Runs the example on `input`, writing the page next to it.
fn run_on(input: &Path) -> Run {
    let page = input.with_extension("html");
    let _ = std::fs::remove_file(&page);
    let mut cmd = Command::new(trace_view_bin());
    cmd.arg(input).arg("-o").arg(&page).stdin(Stdio::null());
    let out = common::watchdog(120, move || cmd.output().expect("start trace_view"));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        html: std::fs::read_to_string(&page).ok(),
    }
}

impl Run {
    /// Asserts that the example exited with status 0, showing its output otherwise.
    fn assert_success(&self) {
        assert_eq!(
            self.code,
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }

    /// The summary line that starts (after indentation) with `start`.
    fn line(&self, start: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{}", self.stdout))
    }
}

/// The numbers in `line` that a `%` follows.
fn percentages(line: &str) -> Vec<f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let pairs = words.windows(2).filter(|w| w[1] == "%");
    pairs
        .map(|w| w[0].parse().expect("a number before %"))
        .collect()
}

/// The long type name of a job in the hand-worked trace: generics and a closure, as
/// `std::any::type_name` writes them.
const LEAF: &str = "my_crate::work::leaf<alloc::vec::Vec<u8>, &str>::{{closure}}";

/// Pool 1 has two workers over 0..100 µs, pool 2 one worker over 40..50 µs.
///
/// - pool 1 worker 0: `walk` 0..60 with `leaf_a` 10..30 run inside it (a wait ran it in place),
///   asleep 70..100: running 60 %, asleep 30 %, idle 10 % (60..70).
/// - pool 1 worker 1: LEAF 0..20, idle 20..80, `tail` 80..100 with an admission wait at
///   85..90: running 40 %, idle 60 %; its gap at 20 µs for 60 µs is the longest, and meanwhile
///   worker 0 ran `leaf_a` innermost for 10 µs (20..30) and `walk` for 30 µs (30..60); pool
///   2's worker ran `pool2_job` for 10 µs.
/// - pool 2 worker 0: `pool2_job` 40..50: running 100 % of its own pool's span.
///
/// Besides: two steals, one promotion, a counter event and an instant of an unknown kind (both
/// to be ignored), an unknown arg, and 3 events dropped on pool 1's worker 1.
fn hand_trace() -> String {
    let job = |tid, ts, dur, name: &str, cat, how| {
        format!(
            r#"{{"ph":"X","pid":1,"tid":{tid},"ts":{ts},"dur":{dur},"name":"{name}","cat":"{cat}","args":{{"how":"{how}","id":{ts},"future":1}}}}"#
        )
    };
    let events = [
        r#"{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"treepool pool 1 (2 threads)"}}"#.to_string(),
        r#"{"ph":"M","name":"thread_name","pid":1,"tid":0,"args":{"name":"worker 0"}}"#.to_string(),
        job(0, "10.0", "20.0", "app::tree::leaf_a", "join", "part"),
        job(0, "0.0", "60.0", "app::tree::walk::{{closure}}", "install", "admitted"),
        r#"{"ph":"X","pid":1,"tid":0,"ts":70.0,"dur":30.0,"name":"sleep","cat":"sleep","args":{}}"#.to_string(),
        job(1, "0.0", "20.0", LEAF, "spawn", "stolen"),
        job(1, "80.0", "20.0", "app::tree::tail", "scope_spawn", "admitted"),
        r#"{"ph":"X","pid":1,"tid":1,"ts":85.0,"dur":5.0,"name":"admission wait","cat":"admission","args":{"granted":"loan"}}"#.to_string(),
        r#"{"ph":"i","s":"t","pid":1,"tid":1,"ts":80.0,"name":"steal","cat":"steal","args":{"from":0}}"#.to_string(),
        r#"{"ph":"i","s":"t","pid":1,"tid":0,"ts":5.0,"name":"steal","cat":"steal","args":{"from":1}}"#.to_string(),
        r#"{"ph":"i","s":"t","pid":1,"tid":0,"ts":12.0,"name":"promote","cat":"promote"}"#.to_string(),
        r#"{"ph":"i","s":"t","pid":1,"tid":0,"ts":13.0,"name":"frob","cat":"frob"}"#.to_string(),
        r#"{"ph":"C","pid":1,"tid":0,"ts":14.0,"name":"c","args":{"v":1}}"#.to_string(),
        r#"{"ph":"X","pid":2,"tid":0,"ts":40.0,"dur":10.0,"name":"app::pool2_job","cat":"spawn","args":{"how":"admitted","id":7}}"#.to_string(),
    ];
    format!(
        r#"{{"traceEvents":[{}],"displayTimeUnit":"ns","otherData":{{"format":"treepool-trace 1","dropped":{{"1/1":3,"1/0":0}}}}}}"#,
        events.join(",\n")
    )
}

#[test]
fn utilization_per_worker_matches_the_hand_worked_trace() {
    let r = view("utilization", &hand_trace());
    r.assert_success();
    let cases = [
        ("pool 1 · worker 0", [60.0, 30.0, 10.0]),
        ("pool 1 · worker 1", [40.0, 0.0, 60.0]),
        ("pool 2 · worker 0", [100.0, 0.0, 0.0]),
    ];
    for (worker, expected) in cases {
        let line = r.line(worker);
        assert_eq!(percentages(line), expected, "{line}");
    }
    assert!(
        r.line("pool 1 · worker 0").contains("60.000 µs"),
        "{}",
        r.stdout
    );
}

#[test]
fn longest_idle_gap_and_what_ran_meanwhile() {
    let r = view("gaps", &hand_trace());
    r.assert_success();
    let first = r.line("1. ");
    assert!(
        first.contains("pool 1 · worker 1 at 20.000 µs for 60.000 µs"),
        "{first}"
    );
    // Innermost runs only, longest first, by their short names.
    let meanwhile = first.split("meanwhile: ").nth(1).expect("a meanwhile list");
    assert_eq!(
        meanwhile,
        "tree::walk::{closure} (30.000 µs), app::pool2_job (10.000 µs), tree::leaf_a (10.000 µs)"
    );
    // Worker 0's gap at 60..70 is the second.
    assert!(
        r.line("2. ")
            .contains("pool 1 · worker 0 at 60.000 µs for 10.000 µs"),
        "{}",
        r.stdout
    );
}

#[test]
fn waits_instants_and_drops_are_counted() {
    let r = view("counts", &hand_trace());
    r.assert_success();
    assert_eq!(
        r.line("admission waits:"),
        "admission waits: 1, total 5.000 µs, longest 5.000 µs (pool 1 · worker 1 at 85.000 µs)"
    );
    assert_eq!(
        r.line("instants:"),
        "instants: 2 steals, 1 promotions, 0 grants, 0 wakes"
    );
    assert!(r.line("dropped events:").contains("3 (pool/worker 1/1: 3)"));
}

#[test]
fn page_has_a_lane_per_worker_and_full_names_in_tooltips() {
    let r = view("page", &hand_trace());
    r.assert_success();
    let html = r.html.expect("the page");
    assert_eq!(html.matches("<g class=\"lane\">").count(), 3);
    for worker in [
        "pool 1 · worker 0",
        "pool 1 · worker 1",
        "pool 2 · worker 0",
    ] {
        assert!(
            html.contains(&format!(">{worker}</text>")),
            "no lane {worker}"
        );
    }
    let escaped = LEAF
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let title = format!("<title>{escaped}\nspawn · stolen · 20.000 µs\n");
    assert!(html.contains(&title), "no span titled {title:?}");
    // The nested run is drawn in the row below its parent, as its own rectangle.
    assert!(html.contains("<title>app::tree::leaf_a\njoin · part · 20.000 µs\nfrom 10.000 µs to 30.000 µs, depth 1</title>"));
    // Self-contained: nothing fetched, no scripts.
    for outside in ["<script", "src=", "href=", "<link"] {
        assert!(!html.contains(outside), "the page holds {outside}");
    }
}

#[test]
fn a_large_trace_gives_a_page_of_bounded_size() {
    // 200,000 runs of 0.4 µs, each inside a parent of 1 µs, over 0.2 s on 2 workers: far
    // narrower than a pixel, so they merge.
    let mut events = Vec::with_capacity(200_000);
    for i in 0..100_000u64 {
        let (tid, ts) = (i % 2, (i / 2) as f64 * 4.0);
        events.push(format!(r#"{{"ph":"X","pid":1,"tid":{tid},"ts":{ts},"dur":1.0,"name":"big::parent<u8>::{{{{closure}}}}","cat":"join","args":{{"how":"stolen","id":{i}}}}}"#));
        events.push(format!(r#"{{"ph":"X","pid":1,"tid":{tid},"ts":{},"dur":0.4,"name":"big::child","cat":"scope_spawn","args":{{"how":"part","id":{}}}}}"#, ts + 0.3, i + 1_000_000));
    }
    let r = view(
        "large",
        &format!(r#"{{"traceEvents":[{}]}}"#, events.join(",")),
    );
    r.assert_success();
    let html = r.html.as_deref().expect("the page");
    assert!(html.len() < 2_000_000, "the page is {} bytes", html.len());
    assert_eq!(percentages(r.line("pool 1 · worker 0"))[0], 25.0);
}

#[test]
fn bad_files_end_with_a_one_line_error() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace_view");
    let cases = [
        (run_on(&dir.join("no such file.json")), "cannot read"),
        (
            view("truncated", r#"{"traceEvents":[{"ph":"X","#),
            "is not valid JSON",
        ),
        (
            view("not_a_trace", r#"{"rows":[1,2,3]}"#),
            "is not a treepool trace",
        ),
        (
            view(
                "no_time",
                r#"{"traceEvents":[{"ph":"X","pid":1,"tid":0,"name":"a","cat":"join"}]}"#,
            ),
            "event 0: no ts",
        ),
        (view("empty", r#"{"traceEvents":[]}"#), "no workers"),
    ];
    for (r, expected) in cases {
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(r.stderr.starts_with("trace_view: "), "{}", r.stderr);
        assert!(r.stderr.contains(expected), "{}", r.stderr);
        assert!(r.html.is_none());
    }
}
