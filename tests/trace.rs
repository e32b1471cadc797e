//! Tracing (`ThreadPoolBuilder::trace`, `TREEPOOL_TRACE`): on known trees (a join tree, a scope
//! spawn tree, detached spawns, install, broadcast) every job appears in the file exactly once,
//! with its kind and its closure's type name, and the runs on each worker nest; the file has the
//! shape `docs/design.md` §3.8 gives it (Chrome's trace event format); a small ring keeps at
//! most its size of events per worker and counts the rest; several pools share one file; the
//! environment variable alone traces a process (global pool included, written at exit); a file
//! that cannot be written costs one line on stderr and nothing else.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use treepool::{ThreadPool, ThreadPoolBuilder};

/// A fresh path for a test's trace file.
fn trace_path(test: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("trace-{test}.json"));
    let _ = std::fs::remove_file(&path);
    path
}

/// A traced pool of `threads` workers, with the handles of its worker threads: the last one
/// out writes the file, so a test drops the pool and joins them ([`finish`]) before it reads.
fn traced_pool(path: &Path, threads: usize) -> (ThreadPool, Workers) {
    traced_builder(path, threads, ThreadPoolBuilder::new())
}

type Workers = Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>;

fn traced_builder(
    path: &Path,
    threads: usize,
    builder: ThreadPoolBuilder,
) -> (ThreadPool, Workers) {
    let workers = Workers::default();
    let handles = workers.clone();
    let pool = builder
        .num_threads(threads)
        .trace(path)
        .spawn_handler(move |worker| {
            let handle = std::thread::spawn(|| worker.run());
            handles.lock().unwrap().push(handle);
            Ok(())
        })
        .build()
        .unwrap();
    (pool, workers)
}

/// Drops `pool` and waits for its worker threads: its trace file is written then.
fn finish((pool, workers): (ThreadPool, Workers)) {
    drop(pool);
    for worker in std::mem::take(&mut *workers.lock().unwrap()) {
        worker.join().unwrap();
    }
}

/// The file, parsed and checked against the format: the top-level keys, one `process_name` per
/// pool and one `thread_name` per worker, and every event's types.
fn read_trace(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("the trace file was written");
    let trace: Value = serde_json::from_str(&text).expect("the trace file is JSON");
    assert_eq!(trace["displayTimeUnit"], "ns");
    assert_eq!(trace["otherData"]["format"], "treepool-trace 1");
    assert!(trace["otherData"]["dropped"].is_object());
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut pools = HashMap::new();
    let mut threads = HashMap::new();
    for e in events {
        let ph = e["ph"].as_str().expect("ph is a string");
        assert!(e["pid"].as_u64().is_some_and(|p| p >= 1), "pid: {e}");
        assert!(e["tid"].as_u64().is_some(), "tid: {e}");
        match ph {
            "M" => {
                let name = e["args"]["name"].as_str().expect("a metadata name");
                match e["name"].as_str().unwrap() {
                    "process_name" => *pools.entry(e["pid"].as_u64()).or_insert(0) += 1,
                    "thread_name" => {
                        assert_eq!(name, format!("worker {}", e["tid"]));
                        *threads
                            .entry((e["pid"].as_u64(), e["tid"].as_u64()))
                            .or_insert(0) += 1
                    }
                    other => panic!("unknown metadata {other}"),
                }
            }
            "X" => {
                assert!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "ts: {e}");
                assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "dur: {e}");
                assert!(e["name"].is_string() && e["cat"].is_string(), "{e}");
            }
            "i" => {
                assert_eq!(e["s"], "t");
                assert!(e["ts"].as_f64().is_some());
                assert_eq!(e["name"], e["cat"]);
            }
            other => panic!("unknown ph {other}"),
        }
    }
    assert!(
        pools.values().all(|&n| n == 1),
        "one process_name a pool: {pools:?}"
    );
    assert!(
        threads.values().all(|&n| n == 1),
        "one thread_name a worker"
    );
    for (pid, _) in threads.keys() {
        assert!(pools.contains_key(pid), "a thread of a named pool");
    }
    trace
}

/// The job spans (ph "X" of a job kind) of `trace`.
fn jobs(trace: &Value) -> Vec<&Value> {
    let kinds = ["join", "scope_spawn", "spawn", "install", "broadcast"];
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && kinds.contains(&e["cat"].as_str().unwrap()))
        .collect()
}

/// Nanoseconds of a time in microseconds with three decimals.
fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

/// Job ids are unique, a job's parent (when given) is a job of the file that encloses it on the
/// same thread, and the job spans of each thread nest (two spans are disjoint or one holds the
/// other): a job a wait ran lies inside the waiting job.
fn check_nesting(trace: &Value) {
    let jobs = jobs(trace);
    let mut by_id = HashMap::new();
    for j in &jobs {
        assert!(
            by_id
                .insert(j["args"]["id"].as_u64().unwrap(), *j)
                .is_none(),
            "unique ids"
        );
    }
    let span = |j: &Value| (ns(&j["ts"]), ns(&j["ts"]) + ns(&j["dur"]));
    for j in &jobs {
        if let Some(parent) = j["args"]["parent"].as_u64() {
            let p = by_id[&parent];
            assert_eq!(
                (p["pid"].clone(), p["tid"].clone()),
                (j["pid"].clone(), j["tid"].clone())
            );
            let ((ps, pe), (s, e)) = (span(p), span(j));
            assert!(ps <= s && e <= pe, "the parent encloses the job: {p} / {j}");
        }
    }
    let mut threads: HashMap<(u64, u64), Vec<(i64, i64)>> = HashMap::new();
    for j in &jobs {
        let key = (j["pid"].as_u64().unwrap(), j["tid"].as_u64().unwrap());
        threads.entry(key).or_default().push(span(j));
    }
    for spans in threads.values_mut() {
        // Outer first at equal starts.
        spans.sort_by_key(|&(s, e)| (s, -e));
        let mut open: Vec<i64> = Vec::new();
        for &(s, e) in spans.iter() {
            while open.last().is_some_and(|&end| end <= s) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(
                    e <= end,
                    "spans on one thread nest: ({s}, {e}) crosses the end {end}"
                );
            }
            open.push(e);
        }
    }
}

/// How many job spans of `kind` named `name` the file has.
fn count(trace: &Value, kind: &str, name: &str) -> usize {
    jobs(trace)
        .iter()
        .filter(|j| j["cat"] == kind && j["name"] == name)
        .count()
}

fn join_tree(depth: u32) -> u64 {
    if depth == 0 {
        return 1;
    }
    let (a, b) = treepool::join(|| join_tree(depth - 1), || join_tree(depth - 1));
    a + b
}

#[test]
fn join_tree_each_b_once_nested() {
    common::watchdog(60, || {
        let path = trace_path("join-tree");
        let traced = traced_pool(&path, 2);
        assert_eq!(traced.0.install(|| join_tree(10)), 1024);
        finish(traced);
        let trace = read_trace(&path);
        assert_eq!(count(&trace, "join", "trace::join_tree::{{closure}}"), 1023);
        let install = jobs(&trace)
            .into_iter()
            .filter(|j| j["cat"] == "install")
            .count();
        assert_eq!(install, 1);
        let hows: Vec<_> = jobs(&trace)
            .iter()
            .map(|j| j["args"]["how"].clone())
            .collect();
        assert!(
            hows.contains(&Value::from("inline")),
            "b taken back is recorded inline"
        );
        check_nesting(&trace);
    });
}

fn spawn_tree<'s>(s: &treepool::Scope<'s>, depth: u32, ran: &'s AtomicUsize) {
    ran.fetch_add(1, Ordering::Relaxed);
    if depth > 0 {
        for _ in 0..2 {
            s.spawn(move |s| spawn_tree(s, depth - 1, ran));
        }
    }
}

#[test]
fn scope_spawn_tree_each_job_once() {
    common::watchdog(60, || {
        let path = trace_path("spawn-tree");
        let traced = traced_pool(&path, 2);
        let ran = AtomicUsize::new(0);
        traced.0.scope(|s| spawn_tree(s, 8, &ran));
        assert_eq!(ran.into_inner(), 511);
        finish(traced);
        let trace = read_trace(&path);
        assert_eq!(
            count(&trace, "scope_spawn", "trace::spawn_tree::{{closure}}"),
            510
        );
        check_nesting(&trace);
    });
}

#[test]
fn detached_spawns_and_broadcast() {
    common::watchdog(60, || {
        let path = trace_path("detached");
        let traced = traced_pool(&path, 2);
        let pool = &traced.0;
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..100 {
            let tx = tx.clone();
            pool.spawn(move || tx.send(i).unwrap());
        }
        assert_eq!(rx.iter().take(100).count(), 100);
        let indexes = pool.broadcast(|ctx| ctx.index());
        assert_eq!(indexes, [0, 1]);
        finish(traced);
        let trace = read_trace(&path);
        let name = "trace::detached_spawns_and_broadcast::{{closure}}::{{closure}}";
        assert_eq!(
            count(&trace, "spawn", name),
            100,
            "every detached spawn once"
        );
        let broadcasts: Vec<_> = jobs(&trace)
            .into_iter()
            .filter(|j| j["cat"] == "broadcast")
            .collect();
        assert_eq!(broadcasts.len(), 2, "one broadcast job a worker");
        let mut tids: Vec<_> = broadcasts.iter().map(|j| j["tid"].as_u64()).collect();
        tids.sort();
        assert_eq!(tids, [Some(0), Some(1)]);
        assert!(
            broadcasts.iter().all(|j| j["name"] == name),
            "{broadcasts:?}"
        );
        check_nesting(&trace);
    });
}

#[test]
fn a_small_ring_keeps_its_last_events_and_counts_the_rest() {
    common::watchdog(60, || {
        let path = trace_path("ring");
        let traced = traced_builder(&path, 1, ThreadPoolBuilder::new().trace_events(8));
        traced.0.install(|| join_tree(8));
        finish(traced);
        let trace = read_trace(&path);
        let kept = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] != "M")
            .count();
        assert_eq!(kept, 8);
        let dropped = trace["otherData"]["dropped"]["1/0"].as_u64().unwrap();
        // 255 join halves and the install at least.
        assert!(dropped + 8 >= 256, "dropped {dropped}");
    });
}

#[test]
fn pools_share_a_file() {
    common::watchdog(60, || {
        let path = trace_path("pools");
        let first = traced_pool(&path, 1);
        let second = traced_pool(&path, 2);
        first.0.install(|| join_tree(3));
        second.0.install(|| join_tree(4));
        finish(first);
        finish(second);
        let trace = read_trace(&path);
        let per_pool = |pid: u64| {
            jobs(&trace)
                .iter()
                .filter(|j| j["pid"] == pid && j["cat"] == "join")
                .count()
        };
        assert_eq!((per_pool(1), per_pool(2)), (7, 15));
    });
}

/// A drop returns at once, as without tracing, even while queued work waits for the dropping
/// thread; the work runs, and the file is written after it.
#[test]
fn a_traced_drop_does_not_wait_for_queued_work() {
    common::watchdog(60, || {
        let path = trace_path("drop");
        let traced = traced_pool(&path, 1);
        let (go, wait) = std::sync::mpsc::channel::<()>();
        traced.0.spawn(move || wait.recv().unwrap());
        let (pool, workers) = traced;
        drop(pool); // the spawned job waits for `go`, sent after the drop
        go.send(()).unwrap();
        finish((
            ThreadPoolBuilder::new().num_threads(1).build().unwrap(),
            workers,
        ));
        let trace = read_trace(&path);
        assert_eq!(
            jobs(&trace).iter().filter(|j| j["cat"] == "spawn").count(),
            1
        );
    });
}

#[test]
fn bad_settings_are_build_errors() {
    let err = ThreadPoolBuilder::new()
        .trace_events(0)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("trace_events"), "{err}");
    let err = ThreadPoolBuilder::new().trace("").build().unwrap_err();
    assert!(err.to_string().contains("trace"), "{err}");
}

/// Set in the child processes of the tests below: what the child does.
const CHILD: &str = "TREEPOOL_TRACE_TEST_CHILD";

/// Runs `child` of this binary with `TREEPOOL_TRACE=path`; returns its stderr once it passed.
fn run_child(mode: &str, path: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env(treepool::TRACE_ENV, path)
        .env_remove(treepool::TRACE_EVENTS_ENV)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {mode}: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("1 passed"), "child {mode} ran: {stdout}");
    stderr
}

/// In a child process of the tests below: a pool built without `trace`, and the global pool
/// (never dropped: written at exit).
#[test]
fn child() {
    match std::env::var(CHILD).as_deref() {
        Ok("env") => {
            let pool = ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            pool.install(|| join_tree(5));
            drop(pool);
            assert_eq!(join_tree(4), 16); // the global pool, from outside
        }
        Ok("unwritable") => {
            let pool = ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            assert_eq!(pool.install(|| join_tree(5)), 32);
            drop(pool);
        }
        _ => {}
    }
}

#[test]
fn the_variable_alone_traces_every_pool() {
    common::watchdog(120, || {
        let path = trace_path("env");
        run_child("env", &path);
        let trace = read_trace(&path);
        let per_pool = |pid: u64| {
            jobs(&trace)
                .iter()
                .filter(|j| j["pid"] == pid && j["cat"] == "join")
                .count()
        };
        // The built pool (dropped), then the global pool (at exit).
        assert_eq!((per_pool(1), per_pool(2)), (31, 15));
        check_nesting(&trace);
    });
}

#[test]
fn an_unwritable_file_costs_one_line_on_stderr() {
    common::watchdog(120, || {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-dir/trace.json");
        let stderr = run_child("unwritable", &path);
        let lines: Vec<_> = stderr
            .lines()
            .filter(|l| l.starts_with("treepool: cannot write the trace file"))
            .collect();
        assert!(!lines.is_empty(), "{stderr}");
        assert!(lines[0].contains("no-such-dir"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    });
}
