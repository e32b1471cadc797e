//! Shared test helpers: a watchdog that turns a hang into a failure, child processes for tests
//! that may abort or must run alone ([`isolated!`]), pools, waiting for pools to be idle and
//! checking their stats ([`settle`]), and a PRNG.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// AddressSanitizer's defaults for every test binary, read once at start-up (`ASAN_OPTIONS`
/// overrides them; other builds never call this). ASan checks use after return by giving each
/// frame a slot in a per-thread fake stack: one region a size class, whose size follows the
/// thread's stack, 1 MiB at most by default (8,192 frames of 128 bytes, half as many of twice
/// that size). A deep tree at one token nests thousands of job frames on one worker; once a
/// size class is full, every further frame scans the whole class before it falls back to the
/// real stack, unchecked. The 38-city TSP at 1/1 (tests/stacks) took 60 to 115 s there instead
/// of 2 s. 4 MiB a size class keeps every frame of the deep-tree tests checked.
#[no_mangle]
pub extern "C" fn __asan_default_options() -> *const std::ffi::c_char {
    c"min_uar_stack_size_log=22:max_uar_stack_size_log=22".as_ptr()
}

/// Runs `f` on its own thread and fails the test if it has not returned within `secs` seconds
/// (a hang becomes a failure instead of a stuck CI run). A panic in `f` fails the test too.
pub fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let runner = std::thread::Builder::new()
        .name("watched".into())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(result);
        })
        .expect("spawn the watched thread");
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(value)) => {
            runner.join().expect("the watched thread exits");
            value
        }
        Ok(Err(payload)) => std::panic::resume_unwind(payload),
        Err(_) => panic!("watchdog: the test did not finish within {secs} s (hang)"),
    }
}

/// The last `max` bytes of `text` or a little less (whole characters), with a note of what was
/// left out before them.
pub fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[{start} bytes left out]\n{}", &text[start..])
}

/// Runs the test `name` of this test binary alone in a child process, with the environment
/// variable `env` set to `value`, and returns its stdout if it passed within `secs` seconds;
/// kills it after that. The error is a report of what went wrong: the child's status and the
/// last 16 KB of its stdout and of its stderr. A test that may abort the process (a stack
/// overflow, a double panic) fails this way instead of taking the whole test binary down. The
/// child knows it is one by `env`.
pub fn child_outcome(name: &str, env: &str, value: &str, secs: u64) -> Result<String, String> {
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env, value)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the child");
    // Drained on their own threads while the child runs: a full pipe would block it.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("the child's stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("the child's stderr")));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            break (status, false);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break (child.wait().expect("reap the child"), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().expect("the child's stdout");
    let stderr = stderr.join().expect("the child's stderr");
    let report = || {
        format!(
            "child {name} ({env}={value}): {status}\n--- stdout\n{}\n--- stderr\n{}",
            tail(&stdout, 16_000),
            tail(&stderr, 16_000)
        )
    };
    if timed_out {
        Err(format!("killed after {secs} s (hang); {}", report()))
    } else if !status.success() {
        Err(report())
    } else if !stdout.contains("1 passed") {
        Err(format!("the child ran no test; {}", report()))
    } else {
        Ok(stdout)
    }
}

/// Set in a child process that [`isolated!`] starts: the name of the test it runs.
pub const CHILD_ENV: &str = "TREEPOOL_TEST_CHILD";

/// The name libtest gives the test whose body this is called in (`module::test`, what
/// `--exact` takes), read off the path of a function item declared in place.
#[allow(unused_macros)]
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::common::test_path(::std::any::type_name_of_val(&here))
    }};
}
#[allow(unused_imports)]
pub(crate) use test_name;

/// The libtest name of the test whose function holds the item at `path`
/// (`crate::module::test::{{closure}}::here` is `module::test`).
pub fn test_path(path: &str) -> String {
    let mut parts: Vec<&str> = path.split("::").filter(|p| *p != "{{closure}}").collect();
    parts.pop();
    parts.remove(0);
    parts.join("::")
}

/// `isolated!(secs, body)`, for a test whose failure may be a hang or an abort (or that sets the
/// environment or builds the global pool): in the test's own process, runs this test alone in a
/// child process of the binary and asserts that it passes within `secs` seconds (killing it
/// otherwise, see [`child_outcome`]); in that child, runs `body`. The test is found by its own
/// name ([`test_name!`]), so call it in the test's function, not in a helper.
#[allow(unused_macros)]
macro_rules! isolated {
    ($secs:expr, $body:expr $(,)?) => {
        $crate::common::isolated_as(&$crate::common::test_name!(), $secs, $body)
    };
}
#[allow(unused_imports)]
pub(crate) use isolated;

/// What [`isolated!`] runs for the test `name`.
pub fn isolated_as(name: &str, secs: u64, body: impl FnOnce()) {
    if std::env::var(CHILD_ENV).is_ok_and(|child| child == name) {
        body();
    } else if let Err(report) = child_outcome(name, CHILD_ENV, name, secs) {
        panic!("{report}");
    }
}

/// Builds the example `name` with cargo, in the profile and target directory of the running
/// test binary (so `cargo test --release` tests a release build), and returns its path.
pub fn build_example(name: &str) -> std::path::PathBuf {
    use std::path::Path;
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let target_dir = profile_dir.parent().expect("target dir");
    let profile = match profile_dir.file_name().and_then(std::ffi::OsStr::to_str) {
        Some("debug") | None => "dev".to_string(),
        Some(p) => p.to_string(),
    };
    let out = Command::new(env!("CARGO"))
        .args(["build", "--example", name, "--profile", &profile])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(
        out.status.success(),
        "cargo build --example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = profile_dir.join("examples").join(name);
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}

/// A pool of `threads` workers and `cap` tokens.
pub fn pool(threads: usize, cap: usize) -> treepool::ThreadPool {
    treepool::ThreadPoolBuilder::new()
        .num_threads(threads)
        .max_inflight(cap)
        .build()
        .expect("build a pool")
}

/// A pool of `threads` workers and `cap` tokens whose worker 0 is the calling thread
/// (`use_current_thread`): a worker while it is inside a call into the pool.
pub fn borrowed_pool(threads: usize, cap: usize) -> treepool::ThreadPool {
    treepool::ThreadPoolBuilder::new()
        .num_threads(threads)
        .max_inflight(cap)
        .use_current_thread()
        .build()
        .expect("build a pool on the current thread")
}

/// Waits (spinning, under the caller's watchdog) until `cond` holds.
pub fn spin_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        std::thread::yield_now();
    }
}

/// Waits (under the caller's watchdog) until `cond` holds, joining empty halves meanwhile, for a
/// join's `a` that waits for its own `b` to start elsewhere. `b` is private to the joiner until
/// an idle worker asks for work and the joiner reaches a `join` (or a wait of the pool): a plain
/// spin never gets there, and `b` would wait for `a` forever if the idle worker had not asked
/// yet when the outer join began. Each join entry here serves a pending request, promoting the
/// oldest private half, which is that `b`.
pub fn join_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        treepool::join(|| {}, std::hint::spin_loop);
    }
}

/// Fibonacci by `treepool::join` on the current pool (the global one from outside any pool).
pub fn fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = treepool::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

/// Runs `f`, catching a panic as what its payload says ([`describe`]).
pub fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(describe)
}

/// Busy-waits `us` microseconds (a job that takes a while without sleeping its thread).
pub fn spin_us(us: u64) {
    let until = Instant::now() + Duration::from_micros(us);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// A small deterministic PRNG (xorshift64*), so random trees are reproducible from a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Asserts the invariants B1 and B2 on a snapshot.
pub fn assert_bounds(stats: &treepool::Stats, cap: usize) {
    assert!(
        stats.executing <= cap,
        "B1: executing {} > cap {cap}",
        stats.executing
    );
    assert!(
        stats.tokens_in_use <= cap,
        "B1: tokens {} > cap {cap}",
        stats.tokens_in_use
    );
    assert!(
        stats.inflight <= cap * stats.peak_depth.max(1),
        "B2: inflight {} > cap {cap} x levels {}",
        stats.inflight,
        stats.peak_depth
    );
}

/// Asserts B1 and B2 on the peaks of a snapshot: at most `cap` jobs ever executed at once, at
/// most `cap` tokens were ever in use, and the most jobs ever in flight is at most `cap` × the
/// deepest level admitted (which only grows, so it bounds every earlier instant too). Only for
/// pools that no other pool's jobs called into (those add credit tokens to the bounds).
pub fn assert_peak_bounds(stats: &treepool::Stats, cap: usize) {
    assert!(
        stats.peak_executing <= cap,
        "B1: peak executing {} > cap {cap}",
        stats.peak_executing
    );
    assert!(
        stats.peak_inflight <= cap * stats.peak_depth.max(1),
        "B2: peak inflight {} > cap {cap} x levels {}",
        stats.peak_inflight,
        stats.peak_depth
    );
}

/// Waits (under the caller's watchdog) until the pool is idle again: nothing in flight and every
/// token back, credit tokens of calls from other pools included. A job's in-flight count drops
/// just before its token moves on, so for detached work, where the caller cannot know when the
/// last job ends, all are waited for.
pub fn wait_idle(pool: &treepool::ThreadPool) {
    spin_until(|| {
        let stats = pool.stats();
        stats.inflight == 0 && stats.executing == 0
    });
}

/// Asserts B4: nothing in flight, no token in use.
pub fn assert_idle(stats: &treepool::Stats) {
    assert_eq!(stats.inflight, 0, "B4: inflight after idle: {stats:?}");
    assert_eq!(stats.executing, 0, "B4: executing after idle: {stats:?}");
    assert_eq!(stats.tokens_in_use, 0, "B4: tokens after idle: {stats:?}");
}

/// Waits (under the caller's watchdog) until every pool of `pools` is idle ([`wait_idle`]), then
/// asserts B4 on each ([`assert_idle`]) and returns their stats, for further checks.
pub fn settle<const N: usize>(pools: [&treepool::ThreadPool; N]) -> [treepool::Stats; N] {
    for pool in pools {
        wait_idle(pool);
    }
    pools.map(|pool| {
        let stats = pool.stats();
        assert_idle(&stats);
        stats
    })
}

/// A panic payload whose `Drop` panics.
pub struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("drop bomb");
    }
}

/// What a caught panic payload says: its message, or `"<Bomb>"` for a [`Bomb`], which is leaked
/// (dropping it here would panic).
pub fn describe(payload: Box<dyn std::any::Any + Send>) -> String {
    if payload.is::<Bomb>() {
        std::mem::forget(payload);
        return "<Bomb>".to_string();
    }
    match payload.downcast::<&str>() {
        Ok(s) => s.to_string(),
        Err(payload) => match payload.downcast::<String>() {
            Ok(s) => *s,
            Err(_) => "<non-string payload>".to_string(),
        },
    }
}

/// A panic's message: its payload if it is a `String` or a `&str`.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        "<not a string>".to_owned()
    }
}

/// Keeps intended panics, those whose `String` message starts with `prefix`, off stderr (the
/// default hook prints every panic); any other panic, such as a failed assertion, is printed as
/// usual. Each prefix is added once, for the rest of the process.
pub fn quiet_panics_starting_with(prefix: &'static str) {
    static PREFIXES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    static HOOK: std::sync::Once = std::sync::Once::new();
    let quiet = |message: &str| {
        let prefixes = PREFIXES.lock().unwrap_or_else(|e| e.into_inner());
        prefixes.iter().any(|p| message.starts_with(p))
    };
    {
        let mut prefixes = PREFIXES.lock().unwrap_or_else(|e| e.into_inner());
        if !prefixes.contains(&prefix) {
            prefixes.push(prefix);
        }
    }
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let intended = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| quiet(m));
            if !intended {
                default(info);
            }
        }));
    });
}
