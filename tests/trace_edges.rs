//! Adversarial review of tracing (`TREEPOOL_TRACE`, `ThreadPoolBuilder::trace`): edges of the
//! recorder and the file writer that tests/trace.rs does not reach. Each test names the
//! behaviour it checks; the ones that fail against the recorder as merged are listed in the
//! review report with their diagnosis.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use treepool::{ThreadPool, ThreadPoolBuilder};

fn trace_path(test: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("trace-edges-{test}.json"));
    let _ = std::fs::remove_file(&path);
    path
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

fn finish((pool, workers): (ThreadPool, Workers)) {
    drop(pool);
    for worker in std::mem::take(&mut *workers.lock().unwrap()) {
        worker.join().unwrap();
    }
}

fn read_trace(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("the trace file was written");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the trace file is JSON: {e}\n{text}"))
}

fn jobs(trace: &Value) -> Vec<&Value> {
    let kinds = ["join", "scope_spawn", "spawn", "install", "broadcast"];
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && kinds.contains(&e["cat"].as_str().unwrap()))
        .collect()
}

fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

/// Unique ids, parents enclose their children on the same thread, spans of a thread nest.
fn check_nesting(trace: &Value) {
    let jobs = jobs(trace);
    let mut by_id = HashMap::new();
    for j in &jobs {
        let id = j["args"]["id"].as_u64().unwrap();
        assert!(by_id.insert(id, *j).is_none(), "unique ids: {id} twice");
    }
    let span = |j: &Value| (ns(&j["ts"]), ns(&j["ts"]) + ns(&j["dur"]));
    for j in &jobs {
        if let Some(parent) = j["args"]["parent"].as_u64() {
            let p = by_id
                .get(&parent)
                .unwrap_or_else(|| panic!("parent {parent} of {j} is in the file"));
            assert_eq!((&p["pid"], &p["tid"]), (&j["pid"], &j["tid"]), "{p} / {j}");
            let ((ps, pe), (s, e)) = (span(p), span(j));
            assert!(ps <= s && e <= pe, "the parent encloses the job: {p} / {j}");
        }
    }
    let mut threads: HashMap<(u64, u64), Vec<(i64, i64)>> = HashMap::new();
    for e in trace["traceEvents"].as_array().unwrap() {
        // Every span (jobs, sleeps, admission waits) of one thread nests.
        if e["ph"] == "X" {
            let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            threads.entry(key).or_default().push(span(e));
        }
    }
    for spans in threads.values_mut() {
        spans.sort_by_key(|&(s, e)| (s, -e));
        let mut open: Vec<i64> = Vec::new();
        for &(s, e) in spans.iter() {
            while open.last().is_some_and(|&end| end <= s) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(
                    e <= end,
                    "spans on one thread nest: ({s}, {e}) crosses {end}"
                );
            }
            open.push(e);
        }
    }
}

/// The type name of a value's type (a closure's, here).
fn name_of<T>(_: &T) -> &'static str {
    std::any::type_name::<T>()
}

/// Spawns a closure made in a generic function (`T` only shapes its type name), on `pool`;
/// returns the closure's type name.
#[allow(clippy::extra_unused_type_parameters)] // `T` is the point: it is in the closure's name
fn spawn_in_generic<T>(pool: &ThreadPool, done: Arc<AtomicUsize>) -> &'static str {
    let f = move || {
        done.fetch_add(1, Ordering::SeqCst);
    };
    let name = name_of(&f);
    pool.spawn(f);
    name
}

/// As [`spawn_in_generic`], with a scope spawn.
#[allow(clippy::extra_unused_type_parameters)] // as above
fn scope_spawn_in_generic<T>(pool: &ThreadPool) -> &'static str {
    let f = |_: &treepool::Scope<'_>| {};
    let name = name_of(&f);
    pool.scope(|s| s.spawn(f));
    name
}

/// A detached spawn and a scope spawn of a closure made in a generic function whose type
/// argument is a function pointer type with a return type (`fn() -> u8`: a `->` inside the
/// generic arguments) are named by their closure's type in the file (design §3.8: "a closure
/// treepool wrapped around the user's ... is named by the user's closure inside it").
#[test]
fn wrapped_closures_of_generic_fns_keep_their_type_name() {
    common::watchdog(60, || {
        let path = trace_path("generic-names");
        let traced = traced_builder(&path, 2, ThreadPoolBuilder::new());
        let done = Arc::new(AtomicUsize::new(0));
        let detached = spawn_in_generic::<fn() -> u8>(&traced.0, done.clone());
        let scoped = scope_spawn_in_generic::<fn(&str) -> Option<u8>>(&traced.0);
        common::spin_until(|| done.load(Ordering::SeqCst) == 1);
        finish(traced);
        let trace = read_trace(&path);
        let names: Vec<_> = jobs(&trace)
            .iter()
            .filter(|j| j["cat"] == "spawn" || j["cat"] == "scope_spawn")
            .map(|j| {
                (
                    j["cat"].as_str().unwrap().to_string(),
                    j["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert!(
            names.contains(&("spawn".into(), detached.into())),
            "the detached spawn is named {detached}: {names:?}"
        );
        assert!(
            names.contains(&("scope_spawn".into(), scoped.into())),
            "the scope spawn is named {scoped}: {names:?}"
        );
    });
}

/// A one-thread `use_current_thread` pool dropped on another thread while a detached spawn is
/// still queued in it: the builder's thread runs the spawn at its next look (design §4.11), and
/// the guide promises the dropped pool's file is written "once its queued work ran". The job
/// must appear in the file.
#[test]
fn a_borrowed_pool_dropped_elsewhere_traces_its_drained_work() {
    common::watchdog(60, || {
        let path = trace_path("borrowed-drop");
        let ran = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<ThreadPool>();
        let (back_tx, back_rx) = std::sync::mpsc::channel::<()>();
        let builder_thread = {
            let (path, ran) = (path.clone(), ran.clone());
            std::thread::spawn(move || {
                let pool = ThreadPoolBuilder::new()
                    .num_threads(1)
                    .use_current_thread()
                    .trace(&path)
                    .build()
                    .unwrap();
                pool.install(|| treepool::join(|| 1, || 2));
                let ran2 = ran.clone();
                pool.spawn(move || ran2.store(true, Ordering::SeqCst));
                tx.send(pool).unwrap(); // dropped on the test's thread
                back_rx.recv().unwrap();
                // The next look of this thread drains the terminated pool.
                let _ = treepool::current_thread_index();
                assert!(
                    ran.load(Ordering::SeqCst),
                    "the queued spawn ran at the look"
                );
            })
        };
        drop(rx.recv().unwrap());
        back_tx.send(()).unwrap();
        builder_thread.join().unwrap();
        assert!(ran.load(Ordering::SeqCst));
        let trace = read_trace(&path);
        check_nesting(&trace);
        let spawns = jobs(&trace).iter().filter(|j| j["cat"] == "spawn").count();
        assert_eq!(spawns, 1, "the drained spawn is in the file");
    });
}

/// Two pools traced to one file named two ways (`dir/t.json` and `dir/../dir/t.json`) share
/// it: design §3.8 "Pools traced to one path share the file"; each write must not clobber the
/// other's pool.
#[test]
fn pools_traced_to_one_file_by_two_spellings_both_appear() {
    common::watchdog(60, || {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-edges-dir");
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("t.json");
        let _ = std::fs::remove_file(&plain);
        let other = dir.join("..").join("trace-edges-dir").join("t.json");
        let first = traced_builder(&plain, 1, ThreadPoolBuilder::new());
        let second = traced_builder(&other, 1, ThreadPoolBuilder::new());
        first.0.install(|| treepool::join(|| 1, || 2));
        second.0.install(|| treepool::join(|| 1, || 2));
        finish(first);
        finish(second);
        let trace = read_trace(&plain);
        let installs = jobs(&trace)
            .iter()
            .filter(|j| j["cat"] == "install")
            .count();
        assert_eq!(installs, 2, "both pools' installs are in the one file");
    });
}

fn ctx_tree(depth: u32, seen: &AtomicUsize) -> u64 {
    if depth == 0 {
        return 1;
    }
    let (a, b) = treepool::join_context(
        |_| ctx_tree(depth - 1, seen),
        |ctx| {
            if ctx.migrated() {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            ctx_tree(depth - 1, seen)
        },
    );
    a + b
}

fn plain_tree(depth: u32) -> u64 {
    if depth == 0 {
        return 1;
    }
    let (a, b) = treepool::join(|| plain_tree(depth - 1), || plain_tree(depth - 1));
    a + b
}

/// `join_context`, scopes whose jobs join, a panicking `b`, a broadcast, and a call into a
/// second traced pool from inside the first, all under tracing: every join half once (by its
/// closure's name), ids unique, parents enclosing, spans nesting on each thread, and the
/// pools' counts back to zero after the panic (B4). A passing probe where it passes.
#[test]
fn mixed_calls_under_tracing_record_each_job_once_and_nest() {
    common::watchdog(120, || {
        let path = trace_path("mixed");
        let outer = traced_builder(&path, 3, ThreadPoolBuilder::new());
        let inner = traced_builder(&path, 2, ThreadPoolBuilder::new());
        let seen = AtomicUsize::new(0);
        let total = outer.0.install(|| ctx_tree(9, &seen));
        assert_eq!(total, 512);
        outer.0.scope(|s| {
            for _ in 0..8 {
                s.spawn(|_| {
                    plain_tree(4);
                });
            }
        });
        let caught = outer.0.install(|| {
            std::panic::catch_unwind(|| {
                treepool::join(|| plain_tree(3), || -> u64 { panic!("b panics") })
            })
        });
        assert!(caught.is_err());
        let indexes = outer.0.broadcast(|ctx| ctx.index());
        assert_eq!(indexes, [0, 1, 2]);
        let cross = outer
            .0
            .install(|| treepool::join(|| inner.0.install(|| plain_tree(5)), || plain_tree(5)));
        assert_eq!(cross, (32, 32));
        for pool in [&outer.0, &inner.0] {
            common::spin_until(|| {
                let s = pool.stats();
                s.inflight == 0 && s.executing == 0 && s.tokens_in_use == 0
            });
        }
        finish(inner);
        finish(outer);
        let trace = read_trace(&path);
        check_nesting(&trace);
        let count = |pid: u64, name: &str| {
            jobs(&trace)
                .iter()
                .filter(|j| j["pid"] == pid && j["cat"] == "join" && j["name"] == name)
                .count()
        };
        // join_context tree of depth 9: 511 b halves.
        assert_eq!(
            count(1, "trace_edges::ctx_tree::{{closure}}"),
            511,
            "every join_context b once"
        );
        // scope: 8 trees of depth 4 (15 b each); the panic test: a tree of depth 3 (7);
        // the cross call: one tree of depth 5 on each pool (31 each).
        assert_eq!(
            count(1, "trace_edges::plain_tree::{{closure}}"),
            8 * 15 + 7 + 31
        );
        assert_eq!(count(2, "trace_edges::plain_tree::{{closure}}"), 31);
        let panicked = jobs(&trace)
            .iter()
            .filter(|j| {
                j["cat"] == "join"
                    && j["name"]
                        .as_str()
                        .unwrap()
                        .starts_with("trace_edges::mixed_calls")
            })
            .count();
        assert_eq!(
            panicked, 2,
            "the panicking b's span, and the cross join's b, once each"
        );
    });
}

/// A traced pool dropped inside one of its own jobs, and a traced pool dropped on a worker of
/// another traced pool, while many threads build and drop traced pools into one file: every
/// file write leaves valid JSON, every job is in it once. A passing probe where it passes.
#[test]
fn pools_built_and_dropped_concurrently_into_one_file() {
    common::watchdog(120, || {
        let path = trace_path("concurrent");
        let host = traced_builder(&path, 2, ThreadPoolBuilder::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        let traced =
                            traced_builder(&path, 2, ThreadPoolBuilder::new().trace_events(1));
                        traced.0.install(|| plain_tree(3));
                        finish(traced);
                    }
                })
            })
            .collect();
        // A pool dropped inside its own job, and one dropped on another pool's worker.
        let (own_pool, own_workers) = traced_builder(&path, 2, ThreadPoolBuilder::new());
        own_pool.install(|| {
            plain_tree(4);
        });
        let slot = Arc::new(Mutex::new(None::<ThreadPool>));
        let (dropped_tx, dropped_rx) = std::sync::mpsc::channel();
        {
            let slot = slot.clone();
            own_pool.spawn(move || {
                common::spin_until(|| slot.lock().unwrap().is_some());
                drop(slot.lock().unwrap().take());
                dropped_tx.send(()).unwrap();
            });
        }
        *slot.lock().unwrap() = Some(own_pool);
        dropped_rx.recv().unwrap();
        let elsewhere = traced_builder(&path, 2, ThreadPoolBuilder::new());
        elsewhere.0.install(|| plain_tree(4));
        let (pool, workers) = elsewhere;
        host.0.install(move || drop(pool));
        for worker in std::mem::take(&mut *workers.lock().unwrap()) {
            worker.join().unwrap();
        }
        for worker in std::mem::take(&mut *own_workers.lock().unwrap()) {
            worker.join().unwrap();
        }
        for t in threads {
            t.join().unwrap();
        }
        finish(host);
        let trace = read_trace(&path);
        check_nesting(&trace);
        let pools = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "process_name")
            .count();
        assert_eq!(pools, 1 + 20 + 2, "every pool once");
    });
}

/// A pool's file, read once the pool was dropped and its threads joined, is whole JSON even
/// while other pools traced to the same file finish meanwhile (each finish rewrites the file:
/// design §3.8). A reader (the viewer, a test) must never see a truncated file.
#[test]
fn a_finished_pools_file_is_whole_while_other_pools_finish() {
    common::watchdog(120, || {
        let path = trace_path("rewrites");
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let traced = traced_builder(&path, 1, ThreadPoolBuilder::new());
                        traced.0.install(|| plain_tree(6));
                        finish(traced);
                        let text = std::fs::read_to_string(&path).unwrap();
                        if let Err(e) = serde_json::from_str::<Value>(&text) {
                            return Err(format!("{e}: {} bytes read", text.len()));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for t in threads {
            t.join()
                .unwrap()
                .expect("the file read whole after its pool finished");
        }
    });
}
