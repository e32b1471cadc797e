//! Smoke tests for `examples/designs.rs` and `examples/pipeline.rs`: each runs the example
//! through `cargo run` with small sizes, under a watchdog that kills it after 120 s.

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const WATCHDOG: Duration = Duration::from_secs(120);

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
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
}

/// `cargo run --example <name> -- <args>`, killed if it outlives the watchdog.
fn run_example(name: &str, args: &[&str]) -> Run {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let mut child = Command::new(env!("CARGO"))
        .args([
            "run",
            "--quiet",
            "--manifest-path",
            manifest,
            "--example",
            name,
            "--",
        ])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start cargo");
    let drain = |mut r: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("cannot wait for cargo") {
            break status;
        }
        if start.elapsed() > WATCHDOG {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "example {name} {args:?} still running after {WATCHDOG:?}; killed\n{}",
                err.join().unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    Run {
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The table row of `design` in the output of `designs`.
fn row<'a>(out: &'a str, design: &str) -> &'a str {
    out.lines()
        .find(|l| l.trim_start().starts_with(&format!("{design}:")))
        .unwrap_or_else(|| panic!("no row for {design} in:\n{out}"))
}

/// The number that follows `label` in `line`.
fn number_after(line: &str, label: &str) -> usize {
    let rest = &line[line
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"))
        + label.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {line:?}"))
}

#[test]
fn designs_hold_is_stuck_and_lend_stays_under_the_cap() {
    let cap = 2;
    let r = run_example(
        "designs",
        &[
            "--files",
            "50",
            "--cap",
            "2",
            "--chunk-us",
            "200",
            "--stuck-ms",
            "1000",
            "--threads",
            "2",
        ],
    );
    r.assert_success();
    assert!(!r.stdout.contains("WRONG CHECKSUM"), "{}", r.stdout);

    // A cap of 2 with parents that hold their permit deadlocks; the example must say so.
    assert!(row(&r.stdout, "hold").contains("stuck"), "{}", r.stdout);

    for design in ["release", "per_level", "helping", "lend"] {
        let line = row(&r.stdout, design);
        assert!(!line.contains("stuck") && !line.contains("error"), "{line}");
    }
    for design in ["per_level", "lend"] {
        let line = row(&r.stdout, design);
        assert!(number_after(line, "peak files in flight") <= cap, "{line}");
        assert!(number_after(line, "peak chunks running") <= cap, "{line}");
    }
}

#[test]
fn pipeline_counts_match_a_sequential_count() {
    let cap = 2;
    let r = run_example(
        "pipeline",
        &[
            "--size",
            "1MB",
            "--block",
            "64KB",
            "--cap",
            "2",
            "--threads",
            "2",
            "--verify",
        ],
    );
    r.assert_success();
    assert!(r.stdout.contains("verify: ok"), "{}", r.stdout);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("peak blocks alive"))
        .expect("no peak blocks line");
    // The generator holds one block while its spawn waits; at most `cap` block jobs are admitted.
    assert!(number_after(line, "peak blocks alive") <= cap + 1, "{line}");
}

#[test]
fn examples_reject_bad_arguments_with_status_2() {
    for (name, args) in [
        ("designs", &["--cap", "0"][..]),
        ("designs", &["--designs", "nope"][..]),
        ("pipeline", &["--size", "12 parsecs"][..]),
        ("pipeline", &["--cap", "0"][..]),
    ] {
        let r = run_example(name, args);
        assert_eq!(r.code, Some(2), "{name} {args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("Usage") || r.stderr.contains("--help"),
            "{}",
            r.stderr
        );
    }
}
