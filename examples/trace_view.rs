//! Turns a treepool trace into one self-contained HTML page and prints a summary.
//!
//! With `TREEPOOL_TRACE=<file>` every pool writes a timeline of what each worker ran, in
//! Chrome's Trace Event Format (the fields are fixed by the recorder's contract: job runs as
//! complete events whose `cat` is the job's kind, sleeps and admission waits as complete events,
//! steals, promotions, grants and wakes as instants). This example reads such a file and
//!
//! - writes an HTML page (`-o`, default: the trace's path with `.html`) holding one inline SVG,
//!   no scripts and nothing fetched: a lane per worker, grouped by pool, with job runs coloured
//!   by kind and nested runs in sub-rows below their parent, sleep hatched, idle time (neither
//!   running nor asleep) tinted, admission waits as a red bar under the lane, instants as ticks
//!   above it, and beneath the lanes a step chart of the workers busy running a job and of the
//!   jobs started but unfinished (the sum of the nesting depths), on the same time axis. Every
//!   run has a tooltip (an SVG `<title>`) with its full type name, kind, how it ran and its
//!   duration. Runs narrower than a pixel are merged with their neighbours into one rectangle
//!   whose opacity is the share of its width they cover, so the page stays a few MB however
//!   many runs the trace holds;
//! - prints on stdout, per worker, the share of its pool's span spent running jobs, asleep and
//!   idle, the five longest idle gaps and what ran meanwhile on the other workers, the admission
//!   waits, the counts of instants and the events the recorder dropped.
//!
//! Unknown event phases and categories are skipped, except complete events of an unknown
//! category, which are job runs of an unknown kind (drawn grey), so a newer recorder still reads.
//! A missing file, invalid JSON or JSON that is not a trace ends with a one-line error and
//! status 1; bad arguments with usage and status 2.
//!
//! ```text
//! TREEPOOL_TRACE=trace.json cargo run --release --example dirhash
//! cargo run --release --example trace_view -- trace.json -o trace.html
//! benches/trace_picture.sh trace.html trace.png     # the page as a picture, headless Chromium
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use serde::Deserialize;

#[derive(Parser, Debug)]
#[command(
    name = "trace_view",
    about = "Draws a treepool trace (TREEPOOL_TRACE) as an HTML page and summarizes it"
)]
/// The command line.
struct Args {
    /// The trace file, as the recorder wrote it.
    trace: PathBuf,
    /// The HTML page to write (default: the trace's path with the extension .html).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Width of the picture in pixels.
    #[arg(long, default_value_t = 1600, value_parser = clap::value_parser!(u32).range(400..=20000))]
    width: u32,
}

/// Runs the command: status 1 and a one-line error on failure (clap exits 2 on bad arguments).
fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("trace_view: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the trace, prints the summary and writes the page.
fn run(args: &Args) -> Result<(), String> {
    let trace = load(&args.trace)?;
    let summary = summarize(&trace);
    print!("{summary}");
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| args.trace.with_extension("html"));
    let html = page(&trace, &summary, args.width as f64, &args.trace);
    std::fs::write(&out, &html).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    eprintln!("wrote {} ({} KB)", out.display(), html.len().div_ceil(1024));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The file, as serde reads it: only the fields the contract names; serde skips the others.

#[derive(Deserialize)]
#[serde(expecting = "an object with a \"traceEvents\" array")]
struct RawFile {
    #[serde(rename = "traceEvents")]
    events: Vec<RawEvent>,
    #[serde(rename = "otherData", default)]
    other: RawOther,
}

#[derive(Deserialize, Default)]
struct RawOther {
    #[serde(default)]
    dropped: BTreeMap<String, u64>,
}

#[derive(Deserialize)]
struct RawEvent {
    ph: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    cat: String,
    pid: Option<u64>,
    tid: Option<u64>,
    ts: Option<f64>,
    dur: Option<f64>,
    #[serde(default)]
    args: RawArgs,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    how: Option<String>,
    name: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// The trace, as the page and the summary see it. Times are in microseconds, as in the file.

/// Strings many events share (type names, kinds, hows), stored once: a trace of a million runs
/// names a few hundred closures.
#[derive(Default)]
struct Names {
    index: HashMap<String, u32>,
    all: Vec<String>,
}

impl Names {
    /// The id of `s`, added if new.
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = self.all.len() as u32;
        self.all.push(s.to_string());
        self.index.insert(s.to_string(), id);
        id
    }

    /// The string of an id.
    fn get(&self, id: u32) -> &str {
        &self.all[id as usize]
    }
}

/// One job run on one worker.
struct Job {
    start: f64,
    end: f64,
    name: u32,
    kind: u32,
    how: u32,
    /// Runs it lies inside on its worker (0: a top-level run).
    depth: usize,
}

/// A stretch of time on one worker whose innermost run is `name`.
struct Segment {
    start: f64,
    end: f64,
    name: u32,
}

/// The instants the contract names.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mark {
    Steal,
    Promote,
    Grant,
    Wake,
}

/// Each instant with its `cat` in the file and its plural in the summary.
const MARKS: [(Mark, &str, &str); 4] = [
    (Mark::Steal, "steal", "steals"),
    (Mark::Promote, "promote", "promotions"),
    (Mark::Grant, "grant", "grants"),
    (Mark::Wake, "wake", "wakes"),
];

/// One worker's events.
#[derive(Default)]
struct Lane {
    pid: u64,
    tid: u64,
    jobs: Vec<Job>,
    sleeps: Vec<(f64, f64)>,
    admissions: Vec<(f64, f64)>,
    marks: Vec<(f64, Mark)>,
    /// Time covered by runs, innermost run first (filled by `nest`).
    segments: Vec<Segment>,
    /// Time covered by runs or sleeps, merged.
    busy: Vec<(f64, f64)>,
    max_depth: usize,
}

impl Lane {
    /// "pool 1 · worker 0": how the page and the summary name a worker.
    fn label(&self) -> String {
        format!("pool {} · worker {}", self.pid, self.tid)
    }
}

impl Pool {
    /// The recorder's name for the pool (`process_name`), else "pool N".
    fn heading(&self) -> String {
        match self.title.as_str() {
            "" => format!("pool {}", self.pid),
            title => title.to_string(),
        }
    }
}

/// One pool: its lanes and the span from its first event to its last.
struct Pool {
    pid: u64,
    title: String,
    lanes: std::ops::Range<usize>,
    start: f64,
    end: f64,
}

/// A whole trace file, sorted into pools and lanes.
struct Trace {
    names: Names,
    lanes: Vec<Lane>,
    pools: Vec<Pool>,
    /// `otherData.dropped`, nonzero entries.
    dropped: Vec<(String, u64)>,
    start: f64,
    end: f64,
}

/// Reads and checks the file; every failure is one line.
fn load(path: &Path) -> Result<Trace, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let raw: RawFile = serde_json::from_slice(&bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            format!("{} is not a treepool trace: {e}", path.display())
        }
        _ => format!("{} is not valid JSON: {e}", path.display()),
    })?;
    build(raw).map_err(|e| format!("{}: {e}", path.display()))
}

/// Sorts the events into lanes and pools.
fn build(raw: RawFile) -> Result<Trace, String> {
    let mut names = Names::default();
    let mut lanes: BTreeMap<(u64, u64), Lane> = BTreeMap::new();
    let mut titles = BTreeMap::new();
    for (i, event) in raw.events.into_iter().enumerate() {
        add_event(event, &mut names, &mut lanes, &mut titles)
            .map_err(|e| format!("event {i}: {e}"))?;
    }
    if lanes.is_empty() {
        return Err("no workers: the trace holds no events of a pool".into());
    }
    let mut lanes: Vec<Lane> = lanes.into_values().collect();
    lanes.iter_mut().for_each(nest);
    let pools = pools(&lanes, &titles);
    let start = pools.iter().map(|p| p.start).fold(f64::INFINITY, f64::min);
    let end = pools
        .iter()
        .map(|p| p.end)
        .fold(f64::NEG_INFINITY, f64::max);
    let dropped = raw.other.dropped.into_iter().filter(|d| d.1 > 0).collect();
    Ok(Trace {
        names,
        lanes,
        pools,
        dropped,
        start,
        end,
    })
}

/// Files one event in its lane; skips what the contract does not name.
fn add_event(
    e: RawEvent,
    names: &mut Names,
    lanes: &mut BTreeMap<(u64, u64), Lane>,
    titles: &mut BTreeMap<u64, String>,
) -> Result<(), String> {
    let (Some(pid), Some(tid)) = (e.pid, e.tid) else {
        return match e.ph.as_str() {
            "X" | "i" | "I" | "M" => Err(format!("a \"{}\" event without pid and tid", e.ph)),
            _ => Ok(()),
        };
    };
    let lane = lanes.entry((pid, tid)).or_insert_with(|| Lane {
        pid,
        tid,
        ..Lane::default()
    });
    match e.ph.as_str() {
        "X" => add_complete(&e, names, lane)?,
        "i" | "I" => {
            if let Some(&(mark, _, _)) = MARKS.iter().find(|m| m.1 == e.cat) {
                lane.marks.push((time(e.ts, "ts")?, mark));
            }
        }
        "M" if e.name == "process_name" => {
            titles.insert(pid, e.args.name.unwrap_or_default());
        }
        _ => {}
    }
    Ok(())
}

/// A job run, a sleep or an admission wait.
fn add_complete(e: &RawEvent, names: &mut Names, lane: &mut Lane) -> Result<(), String> {
    let start = time(e.ts, "ts")?;
    let end = start + time(e.dur, "dur")?;
    match e.cat.as_str() {
        "sleep" => lane.sleeps.push((start, end)),
        "admission" => lane.admissions.push((start, end)),
        _ => lane.jobs.push(Job {
            start,
            end,
            name: names.id(&e.name),
            kind: names.id(&e.cat),
            how: names.id(e.args.how.as_deref().unwrap_or("?")),
            depth: 0,
        }),
    }
    Ok(())
}

/// A time field of a complete event or instant: present, finite, not negative.
fn time(value: Option<f64>, field: &str) -> Result<f64, String> {
    match value {
        Some(t) if t.is_finite() && t >= 0.0 => Ok(t),
        Some(t) => Err(format!("{field} is {t}")),
        None => Err(format!("no {field}")),
    }
}

/// Sorts a lane's events and works out the nesting: runs on one worker nest, so sorted by start
/// (the longer first at a tie) each run lies inside the open runs it starts within.
fn nest(lane: &mut Lane) {
    lane.jobs
        .sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
    lane.sleeps.sort_by(|a, b| a.0.total_cmp(&b.0));
    lane.admissions.sort_by(|a, b| a.0.total_cmp(&b.0));
    lane.marks.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut open: Vec<(f64, u32)> = Vec::new();
    let mut at = 0.0;
    for job in &mut lane.jobs {
        close_until(job.start, &mut open, &mut at, &mut lane.segments);
        if let Some(&(_, name)) = open.last() {
            push_segment(&mut lane.segments, at, job.start, name);
        }
        at = job.start;
        job.depth = open.len();
        lane.max_depth = lane.max_depth.max(open.len() + 1);
        open.push((job.end, job.name));
    }
    close_until(f64::INFINITY, &mut open, &mut at, &mut lane.segments);
    let runs = lane.segments.iter().map(|s| (s.start, s.end));
    lane.busy = union(runs.chain(lane.sleeps.iter().copied()));
}

/// Ends the open runs that end by `t`, innermost first, recording the time each covered last.
fn close_until(t: f64, open: &mut Vec<(f64, u32)>, at: &mut f64, out: &mut Vec<Segment>) {
    while let Some(&(end, name)) = open.last() {
        if end > t {
            break;
        }
        push_segment(out, *at, end, name);
        *at = at.max(end);
        open.pop();
    }
}

/// Appends a segment unless it is empty (a child that the file's rounding ends after its parent).
fn push_segment(out: &mut Vec<Segment>, start: f64, end: f64, name: u32) {
    if end > start {
        out.push(Segment { start, end, name });
    }
}

/// The union of intervals, as sorted disjoint intervals.
fn union(intervals: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut all: Vec<(f64, f64)> = intervals.collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Groups the lanes (sorted by pool, then worker) into pools.
fn pools(lanes: &[Lane], titles: &BTreeMap<u64, String>) -> Vec<Pool> {
    let mut pools: Vec<Pool> = Vec::new();
    for (i, lane) in lanes.iter().enumerate() {
        let (start, end) = lane_extent(lane);
        match pools.last_mut() {
            Some(pool) if pool.pid == lane.pid => {
                pool.lanes.end = i + 1;
                pool.start = pool.start.min(start);
                pool.end = pool.end.max(end);
            }
            _ => pools.push(Pool {
                pid: lane.pid,
                title: titles.get(&lane.pid).cloned().unwrap_or_default(),
                lanes: i..i + 1,
                start,
                end,
            }),
        }
    }
    pools
}

/// The first and last time a lane's events cover (infinite bounds for a lane without any).
fn lane_extent(lane: &Lane) -> (f64, f64) {
    let spans = lane.busy.iter().chain(&lane.admissions).copied();
    let points = spans.chain(lane.marks.iter().map(|m| (m.0, m.0)));
    points.fold((f64::INFINITY, f64::NEG_INFINITY), |(s, e), (a, b)| {
        (s.min(a), e.max(b))
    })
}

// ---------------------------------------------------------------------------------------------
// The summary.

/// One worker's time, split three ways over its pool's span.
struct Usage {
    running: f64,
    asleep: f64,
    idle: f64,
    span: f64,
}

/// A stretch in which a worker neither ran a job nor slept.
struct Gap {
    lane: usize,
    start: f64,
    end: f64,
}

/// The summary's text.
struct Summary {
    text: String,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The text the page shows under the picture and the command prints.
fn summarize(trace: &Trace) -> Summary {
    let mut text = String::new();
    let runs: usize = trace.lanes.iter().map(|l| l.jobs.len()).sum();
    let _ = writeln!(
        text,
        "{} pools, {} workers, {} job runs, from {} to {} ({})",
        trace.pools.len(),
        trace.lanes.len(),
        runs,
        duration(trace.start),
        duration(trace.end),
        duration(trace.end - trace.start)
    );
    utilization_table(trace, &mut text);
    idle_gaps(trace, &mut text);
    admission_waits(trace, &mut text);
    instant_counts(trace, &mut text);
    dropped(trace, &mut text);
    Summary { text }
}

/// A worker's running, asleep and idle time over its pool's span.
fn usage(lane: &Lane, pool: &Pool) -> Usage {
    let covered = |v: &[(f64, f64)]| v.iter().map(|(s, e)| e - s).sum::<f64>();
    let running: f64 = lane.segments.iter().map(|s| s.end - s.start).sum();
    let busy = covered(&lane.busy);
    let span = pool.end - pool.start;
    Usage {
        running,
        asleep: (busy - running).max(0.0),
        idle: (span - busy).max(0.0),
        span,
    }
}

/// The table of each worker's usage, pool by pool.
fn utilization_table(trace: &Trace, text: &mut String) {
    let _ = writeln!(
        text,
        "\nper worker, over its pool's span (first to last event):"
    );
    let _ = writeln!(
        text,
        "  {:<22} {:>20} {:>20} {:>20}",
        "worker", "running", "asleep", "idle"
    );
    for pool in &trace.pools {
        let _ = writeln!(
            text,
            "  {}: span {} from {}",
            pool.heading(),
            duration(pool.end - pool.start),
            duration(pool.start)
        );
        for lane in &trace.lanes[pool.lanes.clone()] {
            let u = usage(lane, pool);
            let share = |t: f64| format!("{:.1} % {:>11}", percent(t, u.span), duration(t));
            let _ = writeln!(
                text,
                "  {:<22} {:>20} {:>20} {:>20}",
                lane.label(),
                share(u.running),
                share(u.asleep),
                share(u.idle)
            );
        }
    }
}

/// `part` as a percentage of `whole` (0 for an empty whole).
fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// The stretches of a worker's pool's span it neither ran a job nor slept in, in time order.
fn lane_gaps(lane: &Lane, pool: &Pool) -> Vec<(f64, f64)> {
    let mut gaps = Vec::new();
    let mut at = pool.start;
    for &(s, e) in lane.busy.iter().chain([&(pool.end, pool.end)]) {
        if s > at {
            gaps.push((at, s));
        }
        at = at.max(e);
    }
    gaps
}

/// The gaps of every worker, longest first.
fn gaps(trace: &Trace) -> Vec<Gap> {
    let mut gaps = Vec::new();
    for pool in &trace.pools {
        for lane in pool.lanes.clone() {
            let of_lane = lane_gaps(&trace.lanes[lane], pool).into_iter();
            gaps.extend(of_lane.map(|(start, end)| Gap { lane, start, end }));
        }
    }
    gaps.sort_by(|a, b| (b.end - b.start).total_cmp(&(a.end - a.start)));
    gaps
}

/// The five longest idle gaps and what ran meanwhile.
fn idle_gaps(trace: &Trace, text: &mut String) {
    let _ = writeln!(text, "\nlongest idle gaps (neither running nor asleep):");
    let gaps = gaps(trace);
    if gaps.is_empty() {
        let _ = writeln!(text, "  none");
    }
    for (n, gap) in gaps.iter().take(5).enumerate() {
        let _ = writeln!(
            text,
            "  {}. {} at {} for {}; meanwhile: {}",
            n + 1,
            trace.lanes[gap.lane].label(),
            duration(gap.start),
            duration(gap.end - gap.start),
            meanwhile(trace, gap)
        );
    }
}

/// The type names that ran longest on the other workers during a gap (innermost runs only, so
/// a job that waits is not counted for the time its children ran).
fn meanwhile(trace: &Trace, gap: &Gap) -> String {
    let mut time: HashMap<u32, f64> = HashMap::new();
    let others = trace.lanes.iter().enumerate().filter(|l| l.0 != gap.lane);
    for (_, lane) in others {
        let first = lane.segments.partition_point(|s| s.end <= gap.start);
        for s in lane.segments[first..]
            .iter()
            .take_while(|s| s.start < gap.end)
        {
            let overlap = s.end.min(gap.end) - s.start.max(gap.start);
            *time.entry(s.name).or_default() += overlap.max(0.0);
        }
    }
    let mut top: Vec<(u32, f64)> = time.into_iter().collect();
    let name = |id| trace.names.get(id);
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| name(a.0).cmp(name(b.0))));
    if top.is_empty() {
        return "nothing".into();
    }
    let names = top.iter().take(3);
    let parts: Vec<String> = names
        .map(|&(n, t)| format!("{} ({})", short_name(name(n)), duration(t)))
        .collect();
    parts.join(", ")
}

/// Count, total and longest of the admission waits.
fn admission_waits(trace: &Trace, text: &mut String) {
    let waits: Vec<(&Lane, f64, f64)> = trace
        .lanes
        .iter()
        .flat_map(|l| l.admissions.iter().map(move |&(s, e)| (l, s, e)))
        .collect();
    let total: f64 = waits.iter().map(|w| w.2 - w.1).sum();
    let (count, total) = (waits.len(), duration(total));
    let _ = write!(text, "\nadmission waits: {count}, total {total}");
    match waits
        .iter()
        .max_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1)))
    {
        Some((lane, s, e)) => {
            let (label, length) = (lane.label(), duration(e - s));
            let _ = writeln!(text, ", longest {length} ({label} at {})", duration(*s));
        }
        None => text.push('\n'),
    }
}

/// How many steals, promotions, grants and wakes the trace holds.
fn instant_counts(trace: &Trace, text: &mut String) {
    let all = trace.lanes.iter().flat_map(|l| l.marks.iter());
    let mut counts = [0usize; MARKS.len()];
    for &(_, mark) in all {
        counts[mark as usize] += 1;
    }
    let parts: Vec<String> = MARKS
        .iter()
        .zip(counts)
        .map(|((_, _, plural), n)| format!("{n} {plural}"))
        .collect();
    let _ = writeln!(text, "instants: {}", parts.join(", "));
}

/// The events the recorder's rings overwrote, if any.
fn dropped(trace: &Trace, text: &mut String) {
    if trace.dropped.is_empty() {
        return;
    }
    let total: u64 = trace.dropped.iter().map(|d| d.1).sum();
    let each: Vec<String> = trace
        .dropped
        .iter()
        .map(|(who, n)| format!("{who}: {n}"))
        .collect();
    let _ = writeln!(
        text,
        "dropped events: {total} (pool/worker {}); those workers' timelines miss their oldest events",
        each.join(", ")
    );
}

/// A duration or time in microseconds, in the unit that suits its size.
fn duration(us: f64) -> String {
    let a = us.abs();
    if a < 5e-4 {
        // Below the file's nanosecond precision: a difference of sums, rounding.
        "0 µs".into()
    } else if a < 1.0 {
        format!("{:.0} ns", us * 1e3)
    } else if a < 1e3 {
        format!("{us:.3} µs")
    } else if a < 1e6 {
        format!("{:.3} ms", us / 1e3)
    } else {
        format!("{:.3} s", us / 1e6)
    }
}

/// A label for a type name: generic arguments dropped, the last two path segments kept, and a
/// closure's `{{closure}}` tail shortened to one `{closure}` (full names run to hundreds of
/// characters: `treepool::api::join::join<fib::{{closure}}, ...>::{{closure}}`).
fn short_name(full: &str) -> String {
    let mut plain = String::with_capacity(full.len());
    let mut angle = 0usize;
    for c in full.chars() {
        match c {
            '<' => angle += 1,
            '>' => angle = angle.saturating_sub(1),
            _ if angle == 0 => plain.push(c),
            _ => {}
        }
    }
    let parts: Vec<&str> = plain.split("::").filter(|p| !p.is_empty()).collect();
    let closure = parts.last().is_some_and(|p| *p == "{{closure}}");
    let named: Vec<&str> = parts.into_iter().filter(|p| *p != "{{closure}}").collect();
    let mut short = named[named.len().saturating_sub(2)..].join("::");
    if short.is_empty() {
        return full.to_string();
    }
    if closure {
        short.push_str("::{closure}");
    }
    short
}

// ---------------------------------------------------------------------------------------------
// The picture.

/// Maps times to x coordinates.
struct Scale {
    t0: f64,
    t1: f64,
    x0: f64,
    x1: f64,
}

impl Scale {
    /// The x coordinate of time `t`.
    fn x(&self, t: f64) -> f64 {
        self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)
    }
}

/// Fills by kind, and the other colours, as CSS classes: one short attribute a rectangle.
const STYLE: &str = "
body{font:13px system-ui,sans-serif;margin:12px;color:#222}
h1{font-size:17px;margin:0 0 4px}
.warn{color:#b00020;font-weight:600}
pre{font:12px ui-monospace,monospace;background:#f6f6f6;padding:8px}
svg text{font:11px system-ui,sans-serif;fill:#222}
svg .small{font-size:9px;fill:#fff;pointer-events:none}
svg .axis{fill:#555;font-size:10px}
.k-join{fill:#0072b2}.k-scope_spawn{fill:#e69f00}.k-spawn{fill:#009e73}
.k-install{fill:#cc79a7}.k-broadcast{fill:#56b4e9}.k-other{fill:#8c8c8c}
.idle{fill:#fbe0d4}.sleep{fill:url(#hatch)}.adm{fill:#c00000}
.m-steal{stroke:#000}.m-promote{stroke:#8e44ad}.m-grant{stroke:#c00000}.m-wake{stroke:#00838f}
.grid{stroke:#e4e4e4}.busy{stroke:#0b3c5d;fill:none;stroke-width:1.5}
.flight{stroke:#e66100;fill:none;stroke-width:1.5;stroke-dasharray:5 3}
";

/// The kinds the contract names, in legend order.
const KINDS: [&str; 5] = ["join", "scope_spawn", "spawn", "install", "broadcast"];

/// Row of top-level runs, in pixels: tall enough for a label.
const TOP_ROW: f64 = 16.0;
/// Row of each nesting level below it.
const SUB_ROW: f64 = 7.0;
/// Rows a lane has at most: deeper runs share the last.
const MAX_ROWS: usize = 8;
/// Band of instant ticks above a lane's runs.
const MARK_BAND: f64 = 6.0;
/// Band of admission waits below them.
const ADM_BAND: f64 = 4.0;
/// Space between lanes.
const LANE_GAP: f64 = 5.0;
/// A pool's heading.
const POOL_HEAD: f64 = 20.0;
/// Height of the jobs-running chart.
const CHART: f64 = 130.0;
/// Width of the column of lane labels.
const LABEL_W: f64 = 150.0;

/// Where each part of the picture lies.
struct Layout {
    scale: Scale,
    /// One a lane, in the trace's order.
    lanes: Vec<LaneBox>,
    /// The top of each pool's heading.
    pools: Vec<f64>,
    /// The top of the time axis's labels.
    axis_top: f64,
    chart_top: f64,
    /// Of the whole picture.
    height: f64,
}

/// A lane's place: its top and its rows of runs.
struct LaneBox {
    top: f64,
    rows: usize,
}

impl LaneBox {
    /// The top of its first row of runs, under the band of instants.
    fn jobs_top(&self) -> f64 {
        self.top + MARK_BAND
    }

    /// The height of its rows of runs.
    fn jobs_h(&self) -> f64 {
        TOP_ROW + (self.rows - 1) as f64 * SUB_ROW
    }

    /// The top and height of the row of runs at nesting depth `row`.
    fn row(&self, row: usize) -> (f64, f64) {
        match row {
            0 => (self.jobs_top(), TOP_ROW),
            _ => (
                self.jobs_top() + TOP_ROW + (row - 1) as f64 * SUB_ROW,
                SUB_ROW,
            ),
        }
    }
}

/// Places the pools, lanes and chart of a picture `width` pixels wide.
fn layout(trace: &Trace, width: f64) -> Layout {
    let span = (trace.end - trace.start).max(1e-3);
    let scale = Scale {
        t0: trace.start,
        t1: trace.start + span,
        x0: LABEL_W,
        x1: width - 40.0,
    };
    let axis_top = 46.0;
    let mut y = axis_top + 22.0;
    let (mut lanes, mut pools) = (Vec::new(), Vec::new());
    for pool in &trace.pools {
        pools.push(y);
        y += POOL_HEAD;
        for lane in &trace.lanes[pool.lanes.clone()] {
            let rows = lane.max_depth.clamp(1, MAX_ROWS);
            let b = LaneBox { top: y, rows };
            y += MARK_BAND + b.jobs_h() + ADM_BAND + LANE_GAP;
            lanes.push(b);
        }
    }
    let chart_top = y + 16.0;
    Layout {
        scale,
        lanes,
        pools,
        axis_top,
        chart_top,
        height: chart_top + CHART + 40.0,
    }
}

/// The HTML page: a header, the picture, the summary.
fn page(trace: &Trace, summary: &Summary, width: f64, path: &Path) -> String {
    let name = escape(&path.display().to_string());
    let mut html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>treepool trace: {name}</title>\
         <style>{STYLE}</style></head><body>\n<h1>treepool trace: {name}</h1>\n"
    );
    if !trace.dropped.is_empty() {
        html.push_str("<p class=\"warn\">The recorder dropped events (see the summary): some timelines miss their oldest part.</p>\n");
    }
    html.push_str(&svg(trace, width));
    let _ = write!(
        html,
        "\n<pre>{}</pre>\n</body></html>\n",
        escape(&summary.text)
    );
    html
}

/// The picture: legend, axis, pools and their lanes, chart.
fn svg(trace: &Trace, width: f64) -> String {
    let l = layout(trace, width);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{:.0}\" viewBox=\"0 0 {width} {:.0}\" style=\"max-width:100%;height:auto\">\n",
        l.height, l.height
    );
    s.push_str("<defs><pattern id=\"hatch\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"5\" height=\"5\" fill=\"#eef1f4\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"#9aa5b1\" stroke-width=\"2\"/></pattern></defs>\n");
    legend(&mut s);
    axis(&mut s, &l, l.axis_top, l.chart_top + CHART);
    for (pool, &y) in trace.pools.iter().zip(&l.pools) {
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{:.1}\" font-weight=\"600\">{}</text>",
            y + 14.0,
            escape(&pool.heading())
        );
        for i in pool.lanes.clone() {
            lane(&mut s, trace, pool, i, &l);
        }
    }
    chart(&mut s, trace, &l);
    s.push_str("</svg>");
    s
}

/// A swatch per kind and state, a tick per instant, and how to read merged runs.
fn legend(s: &mut String) {
    let mut x = 4.0;
    let mut item = |s: &mut String, class: &str, label: &str| {
        let _ = write!(
            s,
            "<rect x=\"{x}\" y=\"8\" width=\"14\" height=\"12\" class=\"{class}\"/><text x=\"{}\" y=\"18\">{label}</text>",
            x + 18.0
        );
        x += 26.0 + 6.5 * label.len() as f64;
    };
    for kind in KINDS {
        item(s, &format!("k-{kind}"), kind);
    }
    item(s, "k-other", "other kind");
    item(s, "sleep", "asleep");
    item(s, "idle", "idle (searching)");
    item(s, "adm", "admission wait");
    for (mark, name, _) in MARKS {
        let _ = write!(
            s,
            "<line x1=\"{x}\" y1=\"8\" x2=\"{x}\" y2=\"20\" class=\"{}\" stroke-width=\"2\"/><text x=\"{}\" y=\"18\">{name}</text>",
            mark_class(mark),
            x + 5.0
        );
        x += 18.0 + 6.5 * name.len() as f64;
    }
    s.push_str(
        "\n<text x=\"4\" y=\"36\" class=\"axis\">nested runs in rows below their parent; runs narrower than a pixel merged, paler where they cover less of it; hover for details</text>\n",
    );
}

/// The CSS class of an instant's tick.
fn mark_class(mark: Mark) -> &'static str {
    ["m-steal", "m-promote", "m-grant", "m-wake"][mark as usize]
}

/// Tick spacing: 1, 2 or 5 times a power of ten, about 10 ticks over the span.
fn tick_step(span: f64) -> f64 {
    let raw = span / 10.0;
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * power)
}

/// A tick label: in the unit of the step, with as many decimals as the step needs.
fn tick_label(t: f64, step: f64) -> String {
    let (div, unit) = [(1e6, "s"), (1e3, "ms"), (1.0, "µs"), (1e-3, "ns")]
        .into_iter()
        .find(|&(div, _)| step >= div)
        .unwrap_or((1e-3, "ns"));
    let decimals = (-(step / div).log10().floor()).max(0.0) as usize;
    format!("{:.*} {unit}", decimals, t / div)
}

/// Ticks and grid lines from `top` to `bottom`, labelled at the top and the bottom.
fn axis(s: &mut String, l: &Layout, top: f64, bottom: f64) {
    let sc = &l.scale;
    let step = tick_step(sc.t1 - sc.t0);
    let mut t = (sc.t0 / step).ceil() * step;
    while t <= sc.t1 + step * 1e-9 {
        let x = sc.x(t);
        let label = tick_label(t, step);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" class=\"grid\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"middle\">{label}</text>\
             <text x=\"{x:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"middle\">{label}</text>",
            top + 6.0,
            top + 2.0,
            bottom + 14.0
        );
        t += step;
    }
}

/// One piece of a row: a run a pixel wide or more alone, or narrower runs less than a pixel
/// apart merged into one.
struct Piece {
    x0: f64,
    x1: f64,
    /// Indices (into the row's list) of the runs it holds.
    items: std::ops::Range<usize>,
    /// Time the runs cover.
    covered: f64,
    /// Made of runs narrower than a pixel: more may join.
    open: bool,
}

/// Cuts a row of intervals, sorted by start, into pieces: how the page stays small.
fn pieces(row: &[(f64, f64)], sc: &Scale) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for (i, &(s, e)) in row.iter().enumerate() {
        let (x0, x1) = (sc.x(s), sc.x(e));
        let narrow = x1 - x0 < 1.0;
        match out.last_mut() {
            Some(p) if narrow && p.open && x0 <= p.x1 + 1.0 => {
                p.x1 = p.x1.max(x1);
                p.items.end = i + 1;
                p.covered += e - s;
            }
            _ => out.push(Piece {
                x0,
                x1,
                items: i..i + 1,
                covered: e - s,
                open: narrow,
            }),
        }
    }
    out
}

impl Piece {
    /// The time it starts at and the time its width stands for.
    fn extent(&self, sc: &Scale) -> (f64, f64) {
        let per_px = (sc.t1 - sc.t0) / (sc.x1 - sc.x0);
        let start = sc.t0 + (self.x0 - sc.x0) * per_px;
        (start, (self.x1 - self.x0).max(1.0) * per_px)
    }

    /// The share of its width its runs cover, as an opacity (merged runs look paler).
    fn opacity(&self, sc: &Scale) -> f64 {
        (self.covered / self.extent(sc).1).clamp(0.3, 1.0)
    }
}

/// A piece's rectangle, at least a pixel wide, from `y` down `h` pixels, paler for a merged
/// piece the less of it its intervals cover, with a tooltip.
fn rect(s: &mut String, p: &Piece, sc: &Scale, (y, h): (f64, f64), class: &str, title: &str) {
    let (x0, op) = (p.x0, p.opacity(sc));
    // A hairline of background between wide neighbours, so back-to-back runs of one kind read
    // as several runs.
    let width = if p.x1 - x0 > 3.0 {
        p.x1 - x0 - 0.6
    } else {
        (p.x1 - x0).max(1.0)
    };
    let _ = write!(
        s,
        "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{h:.1}\" class=\"{class}\"",
    );
    if op < 0.99 {
        let _ = write!(s, " fill-opacity=\"{op:.2}\"");
    }
    let _ = writeln!(s, "><title>{}</title></rect>", escape(title));
}

/// One worker's lane: label, idle time, sleep, runs row by row, admission waits, instants.
fn lane(s: &mut String, trace: &Trace, pool: &Pool, i: usize, l: &Layout) {
    let (lane, b, sc) = (&trace.lanes[i], &l.lanes[i], &l.scale);
    let _ = writeln!(
        s,
        "<g class=\"lane\"><text x=\"4\" y=\"{:.1}\">{}</text>",
        b.jobs_top() + TOP_ROW / 2.0 + 4.0,
        lane.label()
    );
    // Idle time and sleep share the top row with the top-level runs: that row reads as the
    // worker's state, the rows below only as what nests.
    for p in pieces(&lane_gaps(lane, pool), sc) {
        let title = format!("idle{}", piece_note(&p, sc));
        rect(s, &p, sc, (b.jobs_top(), TOP_ROW), "idle", &title);
    }
    for p in pieces(&lane.sleeps, sc) {
        let title = format!("asleep{}", piece_note(&p, sc));
        rect(s, &p, sc, (b.jobs_top(), TOP_ROW), "sleep", &title);
    }
    for row in 0..b.rows {
        job_row(s, trace, lane, row, b, sc);
    }
    let adm_top = b.jobs_top() + b.jobs_h();
    for p in pieces(&lane.admissions, sc) {
        let title = format!("admission wait{}", piece_note(&p, sc));
        rect(s, &p, sc, (adm_top + 0.5, ADM_BAND - 1.0), "adm", &title);
    }
    marks(s, lane, b, sc);
    s.push_str("</g>\n");
}

/// " 1.250 µs at 3.000 ms" for one interval; " ×12 merged: 3.000 µs in 9.000 µs at 3.000 ms"
/// for a merged piece.
fn piece_note(p: &Piece, sc: &Scale) -> String {
    let (start, width) = p.extent(sc);
    let (covered, at) = (duration(p.covered), duration(start));
    match p.items.len() {
        1 => format!(" {covered} at {at}"),
        n => format!(" ×{n} merged: {covered} in {} at {at}", duration(width)),
    }
}

/// The runs at one depth (the last row: that depth and deeper).
fn job_row(s: &mut String, trace: &Trace, lane: &Lane, row: usize, b: &LaneBox, sc: &Scale) {
    let in_row = |j: &&Job| j.depth.min(MAX_ROWS - 1) == row;
    let jobs: Vec<&Job> = lane.jobs.iter().filter(in_row).collect();
    let intervals: Vec<(f64, f64)> = jobs.iter().map(|j| (j.start, j.end)).collect();
    let (y, h) = b.row(row);
    for p in pieces(&intervals, sc) {
        let held = &jobs[p.items.clone()];
        let lead = leading(held);
        let class = kind_class(trace.names.get(lead.kind));
        let title = match held {
            [job] => job_title(trace, job),
            _ => merged_title(trace, held, &p, sc),
        };
        rect(s, &p, sc, (y + 0.5, h - 1.0), class, &title);
        if held.len() == 1 && row == 0 && p.x1 - p.x0 > 40.0 {
            label(
                s,
                &short_name(trace.names.get(lead.name)),
                &p,
                y + h / 2.0 + 3.5,
            );
        }
    }
}

/// The run of a piece that covers most time: its kind colours the piece.
fn leading<'a>(jobs: &[&'a Job]) -> &'a Job {
    jobs.iter()
        .max_by(|a, b| (a.end - a.start).total_cmp(&(b.end - b.start)))
        .expect("a piece holds a run")
}

/// The CSS class that colours a run of kind `kind` (grey for kinds the contract does not name).
fn kind_class(kind: &str) -> &'static str {
    match kind {
        "join" => "k-join",
        "scope_spawn" => "k-scope_spawn",
        "spawn" => "k-spawn",
        "install" => "k-install",
        "broadcast" => "k-broadcast",
        _ => "k-other",
    }
}

/// The tooltip of one run: full type name, kind, how, duration, when, depth.
fn job_title(trace: &Trace, job: &Job) -> String {
    let n = |id| trace.names.get(id);
    format!(
        "{}\n{} · {} · {}\nfrom {} to {}, depth {}",
        n(job.name),
        n(job.kind),
        n(job.how),
        duration(job.end - job.start),
        duration(job.start),
        duration(job.end),
        job.depth
    )
}

/// The tooltip of merged runs: how many, the time they cover, the longest of them.
fn merged_title(trace: &Trace, jobs: &[&Job], p: &Piece, sc: &Scale) -> String {
    let lead = leading(jobs);
    format!(
        "runs{} (each narrower than a pixel)\nlongest: {} ({} · {}, {})",
        piece_note(p, sc),
        trace.names.get(lead.name),
        trace.names.get(lead.kind),
        trace.names.get(lead.how),
        duration(lead.end - lead.start)
    )
}

/// A run's short name inside its rectangle, cut to the rectangle's width.
fn label(s: &mut String, name: &str, p: &Piece, y: f64) {
    let fits = ((p.x1 - p.x0 - 6.0) / 5.5) as usize;
    let text: String = if name.chars().count() > fits {
        let mut cut: String = name.chars().take(fits.saturating_sub(1)).collect();
        cut.push('…');
        cut
    } else {
        name.to_string()
    };
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{y:.1}\" class=\"small\">{}</text>",
        p.x0 + 3.0,
        escape(&text)
    );
}

/// Instants as ticks above the lane, one a pixel and kind.
fn marks(s: &mut String, lane: &Lane, b: &LaneBox, sc: &Scale) {
    let mut drawn: Vec<(i64, Mark)> = lane
        .marks
        .iter()
        .map(|&(t, m)| (sc.x(t).round() as i64, m))
        .collect();
    drawn.sort();
    drawn.dedup();
    for (x, mark) in drawn {
        let _ = writeln!(
            s,
            "<line x1=\"{x}\" y1=\"{:.1}\" x2=\"{x}\" y2=\"{:.1}\" class=\"{}\" stroke-width=\"1.5\"/>",
            b.top + 0.5,
            b.jobs_top() + 2.0,
            mark_class(mark)
        );
    }
}

/// The step chart: workers busy running a job, and jobs started but unfinished.
fn chart(s: &mut String, trace: &Trace, l: &Layout) {
    let sc = &l.scale;
    let cols = (sc.x1 - sc.x0).ceil() as usize + 1;
    let busy = column_means(steps(trace, |j| j.depth == 0), sc, cols);
    let flight = column_means(steps(trace, |_| true), sc, cols);
    let high = flight.iter().chain(&busy).fold(1.0f64, |a, &b| a.max(b));
    let top = high.ceil() as u32;
    let y = |v: f64| l.chart_top + CHART - CHART * v / top as f64;
    let _ = writeln!(
        s,
        "<text x=\"4\" y=\"{:.1}\" font-weight=\"600\">jobs running</text>\
         <text x=\"4\" y=\"{:.1}\" class=\"axis\">— workers busy</text>\
         <text x=\"4\" y=\"{:.1}\" class=\"axis\" style=\"fill:#e66100\">- - started, unfinished</text>\
         <text x=\"4\" y=\"{:.1}\" class=\"axis\">(mean over each pixel)</text>",
        l.chart_top + 10.0,
        l.chart_top + 26.0,
        l.chart_top + 40.0,
        l.chart_top + 54.0
    );
    for v in (0..=top).step_by((top as usize).div_ceil(5).max(1)) {
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"end\">{v}</text>",
            sc.x0, y(v as f64), sc.x1, y(v as f64), sc.x0 - 4.0, y(v as f64) + 3.0
        );
    }
    step_path(s, &flight, sc.x0, &y, "flight");
    step_path(s, &busy, sc.x0, &y, "busy");
}

/// +1 at the start and -1 at the end of every run `pick` takes, sorted by time, ends first at a
/// tie (so back-to-back runs do not count twice).
fn steps(trace: &Trace, pick: impl Fn(&Job) -> bool) -> Vec<(f64, i32)> {
    let jobs = trace.lanes.iter().flat_map(|l| l.jobs.iter());
    let mut steps: Vec<(f64, i32)> = jobs
        .filter(|j| pick(j))
        .flat_map(|j| [(j.start, 1), (j.end, -1)])
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    steps
}

/// The mean level of a step function over each pixel column: one point a column however many
/// runs the trace holds. The mean, not the peak: a column of a dense trace holds hundreds of
/// runs, and its peak would show every worker busy through idle time.
fn column_means(steps: Vec<(f64, i32)>, sc: &Scale, cols: usize) -> Vec<f64> {
    let mut area = vec![0.0; cols];
    let (mut level, mut at) = (0i64, sc.x0);
    for (t, d) in steps.into_iter().chain([(sc.t1, 0)]) {
        let x = sc.x(t);
        spread(&mut area, level as f64, at - sc.x0, x - sc.x0);
        (level, at) = (level + d as i64, x);
    }
    area
}

/// Adds `level` over the pixel span `from..to` (relative to the plot's left) to each column's
/// mean, in proportion to the part of the column it covers.
fn spread(area: &mut [f64], level: f64, from: f64, to: f64) {
    if level == 0.0 || to <= from {
        return;
    }
    let first = from.floor() as usize;
    let columns = area.iter_mut().enumerate().skip(first);
    for (col, sum) in columns.take_while(|(col, _)| (*col as f64) < to) {
        let c = col as f64;
        *sum += level * (to.min(c + 1.0) - from.max(c)).max(0.0);
    }
}

/// A step line through one value a pixel column.
fn step_path(s: &mut String, means: &[f64], x0: f64, y: &impl Fn(f64) -> f64, class: &str) {
    let mut d = format!("M{x0:.0} {:.1}", y(0.0));
    let mut last = 0.0;
    for (col, &v) in means.iter().enumerate() {
        if (v - last).abs() > 1e-3 {
            let _ = write!(d, "H{:.0}V{:.1}", x0 + col as f64, y(v));
            last = v;
        }
    }
    let _ = write!(d, "H{:.0}", x0 + means.len() as f64);
    let _ = writeln!(s, "<path d=\"{d}\" class=\"{class}\"/>");
}

/// Text for HTML and SVG: type names hold `<`, `>` and `&`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}
