//! Tracing: each worker's ring of recent events, the process-wide list of trace files, and the
//! writer of those files (Chrome's trace event format, as `docs/design.md` §3.8 specifies).
//!
//! This module owns the event types, the rings ([`Ring`]: the last N events of one worker), the
//! owner's side of a ring ([`Recorder`]: ids, the job being run, the time), a pool's trace
//! ([`PoolTrace`]) and the writing of files, at a pool's end or at process exit. It knows no
//! worker, job or token: the layers above call it with what happened. It must never block a
//! worker (recording is one uncontended CAS and a copy), never allocate per event, and never
//! panic or lose work when a file cannot be written (one line on stderr instead).

use std::any::type_name;
use std::cell::{Cell, UnsafeCell};
use std::fmt::Write as _;
use std::io::Write as _;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// The environment variable that turns tracing on for every pool built without
/// `ThreadPoolBuilder::trace`: the path of the file to write (empty: off).
pub const TRACE_ENV: &str = "TREEPOOL_TRACE";

/// The environment variable for the ring size per worker, when `trace_events` is not given.
pub const TRACE_EVENTS_ENV: &str = "TREEPOOL_TRACE_EVENTS";

/// Events kept per worker by default: the last 65,536.
pub const DEFAULT_TRACE_EVENTS: usize = 1 << 16;

/// The most events a ring may keep per worker (an event takes 56 bytes).
pub const MAX_TRACE_EVENTS: usize = 1 << 24;

/// What kind of job ran (the file's `cat`). A broadcast's job is told by its closure's type
/// name when the file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A join's `b`.
    Join,
    /// A job of a scope.
    ScopeSpawn,
    /// A detached spawn.
    Spawn,
    /// A root job: a call from outside the pool.
    Install,
}

/// How a job came to run where it ran (the file's `args.how`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// A join's `b` run by its joiner after `a`.
    Inline,
    /// Run as part of the job that waits for it, by that job's wait.
    Part,
    /// Run after admission from a deque, an inbox or the injector.
    Admitted,
    /// Taken from another worker.
    Stolen,
    /// Run on credit (a join half below a call into another pool).
    Credit,
}

/// One recorded event.
#[derive(Clone, Copy, Debug)]
enum What {
    Job {
        kind: Kind,
        how: How,
        name: &'static str,
        id: u64,
        /// 0: none.
        parent: u64,
    },
    Sleep,
    /// `granted`: `Some(true)` on a loan, `Some(false)` on a pool token, `None` unknown.
    AdmissionWait {
        granted: Option<bool>,
    },
    Steal {
        from: u32,
    },
    Promote,
    Grant,
    Wake,
}

#[derive(Clone, Copy, Debug)]
struct Event {
    /// Nanoseconds since the epoch.
    start: u64,
    /// Nanoseconds; 0 for an instant.
    dur: u64,
    what: What,
}

/// Nobody touches the ring's cells.
const FREE: u8 = 0;
/// Its worker is writing an event.
const BUSY: u8 = 1;
/// The writer took it: no event is recorded any more.
const CLOSED: u8 = 2;

/// One worker's last events, overwritten oldest first.
///
/// The cells are touched under `state` only: the recording thread (one at a time: the thread
/// that is the ring's worker) moves it `FREE -> BUSY -> FREE`, the writer `FREE -> CLOSED` for
/// good, so the two never touch the cells at once.
pub struct Ring {
    state: AtomicU8,
    /// Emptied when the ring closes, so a finished pool's trace keeps only its rendered text.
    slots: UnsafeCell<Box<[UnsafeCell<MaybeUninit<Event>>]>>,
    /// Events recorded so far (the next one goes to `written % slots.len()`).
    written: UnsafeCell<u64>,
}

// SAFETY: every access to the cells is made under `state` (see the type's doc), which gives
// the recorder and the writer exclusive access in turn, with acquire/release between them.
unsafe impl Sync for Ring {}
// SAFETY: as above; the events hold only `&'static str`s and numbers.
unsafe impl Send for Ring {}

impl Ring {
    fn new(capacity: usize) -> Self {
        Ring {
            state: AtomicU8::new(FREE),
            slots: UnsafeCell::new(
                (0..capacity)
                    .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                    .collect(),
            ),
            written: UnsafeCell::new(0),
        }
    }

    /// Records `event`, unless the writer closed the ring.
    fn push(&self, event: Event) {
        // Acquire: the writer's reads (if it took the ring before and gave it back: never, it
        // closes for good) and the previous record happen before this one's writes.
        if self
            .state
            .compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // SAFETY: BUSY gives this thread the cells alone (the type's doc).
        unsafe {
            let written = &mut *self.written.get();
            let slots = &*self.slots.get();
            let slot = (*written % slots.len() as u64) as usize;
            (*slots[slot].get()).write(event);
            *written += 1;
        }
        // Release: the writer that closes the ring next sees this event.
        self.state.store(FREE, Ordering::Release);
    }

    /// Closes the ring for good (waiting for a record in progress to end) and returns its
    /// events, oldest first, with the number overwritten.
    fn close(&self) -> (Vec<Event>, u64) {
        loop {
            // Acquire: pairs with the recorder's release, so its events are seen.
            match self
                .state
                .compare_exchange(FREE, CLOSED, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(CLOSED) => return (Vec::new(), 0),
                Err(_) => std::thread::yield_now(),
            }
        }
        // SAFETY: CLOSED gives this thread the cells for good (a push refuses a closed ring, so
        // the slots taken out here are never touched again); the slots below `written` (at most
        // `len` of them) were written.
        unsafe {
            let written = *self.written.get();
            let slots = std::mem::take(&mut *self.slots.get());
            let len = slots.len() as u64;
            let kept = written.min(len);
            let events = (written - kept..written)
                .map(|i| (*slots[(i % len) as usize].get()).assume_init())
                .collect();
            (events, written - kept)
        }
    }
}

/// The process-wide epoch: the first traced pool's creation.
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the epoch.
fn now() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One pool's trace: its rings, and its place in its file.
pub struct PoolTrace {
    /// The pool's number in its file (`pid`), from 1.
    pid: u32,
    rings: Box<[Ring]>,
    file: Arc<TraceFile>,
    /// Worker threads of the pool still running (see [`PoolTrace::worker_exited`]).
    running: AtomicUsize,
    /// The pool's events as the file's text, once it is finished.
    rendered: OnceLock<String>,
}

/// A file and the pools traced into it.
struct TraceFile {
    path: PathBuf,
    pools: Mutex<Vec<Arc<PoolTrace>>>,
}

/// `path` with its directory resolved (`dir/../dir/t.json` and `./t.json` name one file, and the
/// pools traced there go into it together); as given if the directory cannot be resolved (the
/// write then reports why).
fn one_spelling(path: PathBuf) -> PathBuf {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return path;
    };
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    match std::fs::canonicalize(dir) {
        Ok(dir) => dir.join(name),
        Err(_) => path,
    }
}

/// Every trace file of the process.
static FILES: Mutex<Vec<Arc<TraceFile>>> = Mutex::new(Vec::new());

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl PoolTrace {
    /// The trace of a new pool of `threads` workers, `running` of them threads that drain the
    /// pool once it is dropped and then call [`PoolTrace::worker_exited`] (the threads it
    /// started, or a one-thread pool's borrowed thread), keeping `events` per worker, written to
    /// `path` with the other pools traced there. A pool's file is written when its last
    /// draining thread is done, and at process exit for every pool not written by then.
    pub fn new(path: PathBuf, threads: usize, running: usize, events: usize) -> Arc<Self> {
        EPOCH.get_or_init(Instant::now);
        at_exit_once();
        let path = one_spelling(path);
        let file = {
            let mut files = lock(&FILES);
            match files.iter().find(|f| f.path == path) {
                Some(file) => file.clone(),
                None => {
                    let file = Arc::new(TraceFile {
                        path,
                        pools: Mutex::new(Vec::new()),
                    });
                    files.push(file.clone());
                    file
                }
            }
        };
        let mut pools = lock(&file.pools);
        let trace = Arc::new(PoolTrace {
            pid: pools.len() as u32 + 1,
            rings: (0..threads).map(|_| Ring::new(events)).collect(),
            file: file.clone(),
            running: AtomicUsize::new(running),
            rendered: OnceLock::new(),
        });
        pools.push(trace.clone());
        trace
    }

    /// The recorder of worker `index`, for the thread that is that worker.
    pub fn recorder(self: &Arc<Self>, index: usize) -> Recorder {
        Recorder {
            pool: self.clone(),
            index,
            seq: Cell::new(0),
            current: Cell::new(0),
            stolen: Cell::new(false),
        }
    }

    /// A worker thread the pool started has exited; the last one writes the file.
    pub fn worker_exited(&self) {
        // AcqRel: the last one sees every other's exit (their records are under the rings'
        // own ordering anyway).
        if self.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finish();
        }
    }

    /// Closes the rings, renders the pool, and writes its file.
    fn finish(&self) {
        self.render();
        self.file.write(false);
    }

    /// The pool's events as the file's text (closing its rings, once).
    fn render(&self) -> &str {
        self.rendered.get_or_init(|| {
            let mut out = String::new();
            let pid = self.pid;
            let n = self.rings.len();
            let _ = writeln!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\
                 \"args\":{{\"name\":\"treepool pool {pid} ({n} thread{})\"}}}},",
                if n == 1 { "" } else { "s" }
            );
            for tid in 0..n {
                let _ = writeln!(
                    out,
                    "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\
                     \"args\":{{\"name\":\"worker {tid}\"}}}},"
                );
            }
            let mut dropped = String::new();
            for (tid, ring) in self.rings.iter().enumerate() {
                let (events, lost) = ring.close();
                if lost > 0 {
                    let _ = write!(dropped, "\"{pid}/{tid}\":{lost},");
                }
                for event in events {
                    render_event(&mut out, pid, tid, &event);
                }
            }
            // The dropped counts ride at the end, after a marker line the file writer splits.
            out.push('\u{0}');
            out.push_str(dropped.trim_end_matches(','));
            out
        })
    }
}

impl TraceFile {
    /// Writes the file with every finished pool, and at exit every live one too. A file that
    /// cannot be written is reported on stderr, once per attempt, and never panics.
    fn write(&self, at_exit: bool) {
        let pools = lock(&self.pools);
        let mut events = String::new();
        let mut dropped = Vec::new();
        for pool in pools.iter() {
            if !at_exit && pool.rendered.get().is_none() {
                continue;
            }
            let (text, lost) = pool.render().split_once('\u{0}').unwrap_or_default();
            events.push_str(text);
            if !lost.is_empty() {
                dropped.push(lost);
            }
        }
        let events = events.trim_end_matches([',', '\n']);
        let text = format!(
            "{{\"traceEvents\":[\n{events}\n],\n\"displayTimeUnit\":\"ns\",\n\
             \"otherData\":{{\"format\":\"treepool-trace 1\",\"dropped\":{{{}}}}}}}\n",
            dropped.join(",")
        );
        if let Err(err) = self.replace_with(&text) {
            let _ = writeln!(
                std::io::stderr(),
                "treepool: cannot write the trace file {}: {err}",
                self.path.display()
            );
        }
    }
}

impl TraceFile {
    /// Writes `text` beside the file, then renames it over the file: a reader sees the old file
    /// or the new one, whole, never one cut short.
    fn replace_with(&self, text: &str) -> std::io::Result<()> {
        let mut beside = self.path.clone().into_os_string();
        beside.push(format!(".{}.tmp", std::process::id()));
        std::fs::write(&beside, text)?;
        std::fs::rename(&beside, &self.path).inspect_err(|_| {
            let _ = std::fs::remove_file(&beside);
        })
    }
}

/// Microseconds with three decimals, from nanoseconds.
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

fn render_event(out: &mut String, pid: u32, tid: usize, event: &Event) {
    let (ts, dur) = (Micros(event.start), Micros(event.dur));
    let head = format!("\"pid\":{pid},\"tid\":{tid},\"ts\":{ts}");
    let _ = match event.what {
        What::Job {
            kind,
            how,
            name,
            id,
            parent,
        } => {
            let (user, broadcast) = user_name(name);
            let cat = match kind {
                Kind::ScopeSpawn | Kind::Spawn if broadcast => "broadcast",
                Kind::Join => "join",
                Kind::ScopeSpawn => "scope_spawn",
                Kind::Spawn => "spawn",
                Kind::Install => "install",
            };
            let how = match how {
                How::Inline => "inline",
                How::Part => "part",
                How::Admitted => "admitted",
                How::Stolen => "stolen",
                How::Credit => "credit",
            };
            let parent = match parent {
                0 => String::new(),
                p => format!(",\"parent\":{p}"),
            };
            writeln!(
                out,
                "{{\"ph\":\"X\",{head},\"dur\":{dur},\"name\":\"{}\",\"cat\":\"{cat}\",\
                 \"args\":{{\"how\":\"{how}\",\"id\":{id}{parent}}}}},",
                Escaped(user)
            )
        }
        What::Sleep => writeln!(
            out,
            "{{\"ph\":\"X\",{head},\"dur\":{dur},\"name\":\"sleep\",\"cat\":\"sleep\"}},"
        ),
        What::AdmissionWait { granted } => {
            let args = match granted {
                Some(true) => ",\"args\":{\"granted\":\"loan\"}",
                Some(false) => ",\"args\":{\"granted\":\"pool\"}",
                None => "",
            };
            writeln!(
                out,
                "{{\"ph\":\"X\",{head},\"dur\":{dur},\"name\":\"admission wait\",\
                 \"cat\":\"admission\"{args}}},"
            )
        }
        What::Steal { from } => writeln!(
            out,
            "{{\"ph\":\"i\",\"s\":\"t\",{head},\"name\":\"steal\",\"cat\":\"steal\",\
             \"args\":{{\"from\":{from}}}}},"
        ),
        What::Promote | What::Grant | What::Wake => {
            let name = match event.what {
                What::Promote => "promote",
                What::Grant => "grant",
                _ => "wake",
            };
            writeln!(
                out,
                "{{\"ph\":\"i\",\"s\":\"t\",{head},\"name\":\"{name}\",\"cat\":\"{name}\"}},"
            )
        }
    };
}

/// A string as the inside of a JSON string literal.
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// The user's closure in the type name of a closure that treepool wrapped around it
/// (`treepool::api::scope::job_body<treepool::api::scope::Scope, app::main::{{closure}}>::{{closure}}`
/// names `app::main::{{closure}}`), and whether a broadcast wrapped it. A name that is not
/// treepool's is the user's already.
fn user_name(mut name: &'static str) -> (&'static str, bool) {
    let mut broadcast = false;
    while let Some(inner) = name.strip_prefix("treepool::") {
        broadcast |= inner.starts_with("api::broadcast::");
        let Some(args) = generic_args(name) else {
            break;
        };
        let closure = args.iter().rev().find(|a| a.ends_with("}}"));
        let other = || {
            args.iter()
                .rev()
                .find(|a| !a.starts_with("treepool::") && a.contains("::"))
        };
        match closure.or_else(other) {
            Some(arg) => name = arg,
            None => break,
        }
    }
    (name, broadcast)
}

/// The generic arguments of the first generic path segment of `name`, split at depth 1.
fn generic_args(name: &'static str) -> Option<Vec<&'static str>> {
    let open = name.find('<')?;
    let mut depth = 0;
    let mut args = Vec::new();
    let mut start = open + 1;
    let mut prev = ' ';
    for (i, c) in name.char_indices().skip_while(|&(i, _)| i < open) {
        let after = std::mem::replace(&mut prev, c);
        match c {
            '<' => depth += 1,
            // The arrow of a function type (`fn() -> u8`) closes nothing.
            '>' if after == '-' => {}
            '>' => {
                depth -= 1;
                if depth == 0 {
                    args.push(name[start..i].trim());
                    return Some(args);
                }
            }
            ',' if depth == 1 => {
                args.push(name[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    None
}

/// Registers the writing of every trace file at process exit, once (Linux: `atexit`; the
/// global pool is never dropped, so this is where its trace is written).
fn at_exit_once() {
    #[cfg(target_os = "linux")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        extern "C" fn write_all() {
            let files: Vec<_> = lock(&FILES).clone();
            for file in files {
                file.write(true);
            }
        }
        // SAFETY: `write_all` is a plain `extern "C" fn()` that never unwinds (it catches
        // nothing because nothing in it panics: locks are poison-tolerant, errors printed).
        ONCE.call_once(|| unsafe {
            libc::atexit(write_all);
        });
    }
}

/// The recording side of one worker's ring, owned by the worker's thread.
pub struct Recorder {
    pool: Arc<PoolTrace>,
    index: usize,
    /// Jobs started here so far (ids).
    seq: Cell<u64>,
    /// The id of the job running now (0: none).
    current: Cell<u64>,
    /// The next job to start was stolen (set by [`Recorder::steal`]).
    stolen: Cell<bool>,
}

impl Recorder {
    fn push(&self, start: u64, what: What) {
        let dur = match what {
            What::Job { .. } | What::Sleep | What::AdmissionWait { .. } => now() - start,
            _ => 0,
        };
        self.pool.rings[self.index].push(Event { start, dur, what });
    }

    /// The time now, to pass back to a record of a span that starts now.
    pub fn now(&self) -> u64 {
        now()
    }

    /// Runs `run`, the run of a job of `kind` whose closure is `N`, recorded as one span (also
    /// when it unwinds). `how` [`How::Admitted`] becomes [`How::Stolen`] after a steal.
    #[cold]
    #[inline(never)]
    pub fn job<N: ?Sized, T>(&self, kind: Kind, how: How, run: impl FnOnce() -> T) -> T {
        /// Records the span when dropped, and makes the outer job current again.
        struct Span<'a> {
            recorder: &'a Recorder,
            start: u64,
            outer: u64,
            what: What,
        }
        impl Drop for Span<'_> {
            fn drop(&mut self) {
                self.recorder.current.set(self.outer);
                self.recorder.push(self.start, self.what);
            }
        }
        let how = match (how, self.stolen.replace(false)) {
            (How::Admitted, true) => How::Stolen,
            (how, _) => how,
        };
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        let id = ((self.pool.pid as u64) << 44) | ((self.index as u64) << 32) | (seq & 0xffff_ffff);
        let outer = self.current.replace(id);
        let parent = match how {
            How::Inline | How::Part => outer,
            _ => 0,
        };
        let _span = Span {
            recorder: self,
            start: now(),
            outer,
            what: What::Job {
                kind,
                how,
                name: type_name::<N>(),
                id,
                parent,
            },
        };
        run()
    }

    /// This worker took a job or a half from worker `from`: the next job it starts was stolen.
    #[cold]
    pub fn steal(&self, from: usize) {
        self.stolen.set(true);
        self.push(now(), What::Steal { from: from as u32 });
    }

    /// This worker made a private join half public.
    #[cold]
    pub fn promote(&self) {
        self.push(now(), What::Promote);
    }

    /// This worker granted a token to a waiting job.
    #[cold]
    pub fn grant(&self) {
        self.push(now(), What::Grant);
    }

    /// This worker slept from `since` until now, and was woken.
    #[cold]
    pub fn slept(&self, since: u64) {
        self.push(since, What::Sleep);
        self.push(now(), What::Wake);
    }

    /// A spawn of this worker waited from `since` until now for its token (`loan`: whether it
    /// got its parent's, if known).
    #[cold]
    pub fn admission_wait(&self, since: u64, loan: Option<bool>) {
        self.push(since, What::AdmissionWait { granted: loan });
    }
}

#[cfg(test)]
mod tests {
    use super::user_name;

    #[test]
    fn user_names_of_wrapped_closures() {
        let scope = "treepool::api::scope::job_body<treepool::api::scope::Scope, app::main::{{closure}}>::{{closure}}";
        assert_eq!(user_name(scope), ("app::main::{{closure}}", false));
        let broadcast = "treepool::api::scope::job_body<treepool::api::scope::Scope, treepool::api::broadcast::broadcast_here<app::f::{{closure}}, ()>::{{closure}}>::{{closure}}";
        assert_eq!(user_name(broadcast), ("app::f::{{closure}}", true));
        let detached = "treepool::api::pool::detached_job<app::leaf>::{{closure}}";
        assert_eq!(user_name(detached), ("app::leaf", false));
        assert_eq!(
            user_name("app::g::{{closure}}"),
            ("app::g::{{closure}}", false)
        );
    }
}
