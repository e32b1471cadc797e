#!/usr/bin/env bash
# Runs treepool's benchmark suite (issue 4) and regenerates its part of docs/benchmarks.md (between
# the markers `<!-- suite: begin ... -->` and `<!-- suite: end -->`; other scripts write the rest).
#
#   benches/report.sh                      # full run (criterion defaults), both thread settings
#   TREEPOOL_BENCH_QUICK=1 benches/report.sh   # smoke run: ~0.25 s per function, 1 memory run
#   TREEPOOL_REPORT_SKIP_RUN=1 benches/report.sh   # only rebuild the doc from existing results
#
# Environment:
#   TREEPOOL_BENCH_QUICK=1          short warm-up/measurement (criterion) and 1 untimed memory run
#   TREEPOOL_REPORT_THREADS="2 max" thread settings to run (numbers or `max` =
#                                   available_parallelism; duplicates dropped)
#   TREEPOOL_BENCH_CAPS=1,2,4,8,16,64  max_inflight sweep for the indexer and producer ("" = none)
#   TREEPOOL_BENCH_CAP=N            max_inflight of the treepool under test (default: builder's)
#   TREEPOOL_BENCH_MEM_RUNS=N       untimed runs per memory figure (default 3; 1 when quick)
#   TREEPOOL_BENCH_IDLE_SECS=S      idle window of the idle bench (default 1.0)
#   TREEPOOL_REPORT_BENCHES="..."   subset of: join_tree fib quicksort scope_fanout indexer
#                                   producer idle deep install_latency (default: all)
#   TREEPOOL_REPORT_CRITERION_ARGS  extra arguments for criterion (e.g. "--sample-size 20")
#   TREEPOOL_REPORT_OUT=path        output file (default docs/benchmarks.md)
#
# Results come from target/criterion/<group>/<function>/new/estimates.json (median) and
# target/treepool-bench/*.json (memory, idle and sweep figures written by the bench binaries).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

all_benches="join_tree fib quicksort scope_fanout indexer producer idle deep install_latency"
benches="${TREEPOOL_REPORT_BENCHES:-$all_benches}"
out="${TREEPOOL_REPORT_OUT:-docs/benchmarks.md}"
quick="${TREEPOOL_BENCH_QUICK:-0}"
[[ "$quick" == "0" ]] && quick=""
export TREEPOOL_BENCH_CAPS="${TREEPOOL_BENCH_CAPS-1,2,4,8,16,64}"
if [[ -n "$quick" ]]; then
    export TREEPOOL_BENCH_QUICK=1
    export TREEPOOL_BENCH_MEM_RUNS="${TREEPOOL_BENCH_MEM_RUNS:-1}"
fi

avail="$(nproc)"
threads=()
for t in ${TREEPOOL_REPORT_THREADS:-2 max}; do
    [[ "$t" == "max" || "$t" == "0" ]] && t="$avail"
    [[ " ${threads[*]-} " == *" $t "* ]] || threads+=("$t")
done

target_dir="$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
started="$(date +%s)"

stamp="$target_dir/treepool-bench/run-stamp"
if [[ -z "${TREEPOOL_REPORT_SKIP_RUN:-}" ]]; then
    mkdir -p "$(dirname "$stamp")"
    # When and on what commit the measurements were taken, for a later SKIP_RUN rebuild.
    printf '%s\n%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(git rev-parse --short HEAD)" >"$stamp"
    cargo bench --no-run
    for t in "${threads[@]}"; do
        for b in $benches; do
            echo "=== $b, $t threads${quick:+ (quick)}" >&2
            # shellcheck disable=SC2086
            TREEPOOL_BENCH_THREADS="$t" cargo bench -q --bench "$b" -- \
                ${TREEPOOL_REPORT_CRITERION_ARGS:-}
        done
    done
else
    started=0
fi

mkdir -p "$(dirname "$out")"
REPORT_TARGET="$target_dir" REPORT_THREADS="${threads[*]}" REPORT_QUICK="$quick" \
REPORT_STARTED="$started" REPORT_AVAIL="$avail" REPORT_OUT="$out" REPORT_BENCHES="$benches" \
python3 - <<'PY'
import datetime
import json
import os
import pathlib
import platform
import re
import subprocess

target = pathlib.Path(os.environ["REPORT_TARGET"])
crit = target / "criterion"
figs = target / "treepool-bench"
threads = [int(t) for t in os.environ["REPORT_THREADS"].split()]
quick = bool(os.environ["REPORT_QUICK"])
started = int(os.environ["REPORT_STARTED"])
out = pathlib.Path(os.environ["REPORT_OUT"])
stale_seen = []


def median_ns(group, func):
    p = crit / group / func / "new" / "estimates.json"
    if not p.exists():
        return None
    if p.stat().st_mtime < started:
        stale_seen.append(f"{group}/{func}")
    return json.loads(p.read_text())["median"]["point_estimate"]


def rows(name, t):
    p = figs / f"{name}_t{t}.json"
    if not p.exists():
        return []
    if p.stat().st_mtime < started:
        stale_seen.append(p.name)
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def fmt_ns(ns):
    if ns is None:
        return "—"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 100 else f"{ns / scale:.1f} {unit}"
    return f"{ns:.3g} ns"


def fmt_bytes(b):
    if b is None:
        return "—"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b} B"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}"


def verdict(ok):
    return "—" if ok is None else ("met" if ok else "**missed**")


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            key, _, val = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return val.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cmd(*args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


logical = os.cpu_count()
try:
    cores, phys, core = set(), "0", None
    for l in open("/proc/cpuinfo"):
        k, _, v = l.partition(":")
        if k.strip() == "physical id":
            phys = v.strip()
        elif k.strip() == "core id":
            cores.add((phys, v.strip()))
    physical = len(cores) or None
except OSError:
    physical = None

md = []
w = md.append
w("Regenerate this part of the file with `benches/report.sh` (it runs every bench target in "
  "`benches/`, then rewrites what stands between this part's two markers; the sections after "
  "them are written by their own scripts, and the measurement notes are in "
  "docs/benchmarks-notes.md). `TREEPOOL_BENCH_QUICK=1 benches/report.sh` is a smoke run with "
  "very short measurement times; `TREEPOOL_REPORT_SKIP_RUN=1` rebuilds the part from the last "
  "results; `TREEPOOL_REPORT_THREADS=\"2 max\"` picks the pool sizes (`max` = "
  "`nproc`), `TREEPOOL_BENCH_CAPS=1,2,4,8,16,64` the `max_inflight` sweep. "
  "Single workloads: `cargo bench --bench <name>` with `join_tree`, `fib`, `quicksort`, "
  "`scope_fanout`, `indexer`, `producer`, `idle`, `deep`, `install_latency`; the thread count comes from "
  "`TREEPOOL_BENCH_THREADS` (default 2). `spawn_shapes` (issue 27's spawn shapes, 1 and 2 "
  "threads in one process) is run by `benches/spawn_shapes.sh`, which writes its own section, "
  "\"Spawn shapes side by side\". See the header of `benches/report.sh` for every knob.\n")
w("Times are criterion medians (`target/criterion/<group>/<function>/new/estimates.json`). The "
  "treepool and rayon pools have the same number of workers, are built once per group and "
  "run the work through `pool.install`. Sections 1 and 2 also show chili (a heartbeat-scheduled "
  "fork-join pool): its `Config::thread_count` counts the calling thread, which runs the "
  "scope's work, so it is given the same count (that many threads run joins; chili adds a "
  "heartbeat thread that runs no jobs), and the work runs through `pool.scope()` where the "
  "others use `install`. "
  "Memory figures come from separate untimed runs on fresh pools "
  "(`target/treepool-bench/*.json`): *peak alive* is a user-side count of live 100 KB buffers, "
  "*peak heap* the peak of a counting global allocator above the level before the run.\n")
stamp = target / "treepool-bench" / "run-stamp"
run_date, run_commit = (stamp.read_text().split("\n")[:2] if stamp.exists() else (
    f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
    cmd('git', 'rev-parse', '--short', 'HEAD')))
w(f"- Date of the measurements: {run_date}")
w(f"- Machine: {cpu_model()}; {logical} logical CPUs"
  + (f" ({physical} physical cores)" if physical else "")
  + f", `nproc` = {os.environ['REPORT_AVAIL']}"
  + f"; {platform.system()} {platform.release()}")
w(f"- Toolchain: {cmd('rustc', '--version')}; measured at commit {run_commit}")
w(f"- Mode: {'QUICK smoke run (short measurement, not for decisions)' if quick else 'full'}; "
  f"pool sizes: {', '.join(str(t) for t in threads)} threads")
w("")


def time_table(title, target, groups, check):
    """groups: [(label, group_base[, has_target])]; check(ratio) -> verdict text."""
    w(f"## {title}\n")
    w(f"Target: {target}\n")
    w("| workload | threads | treepool | rayon | treepool/rayon | target |")
    w("|---|---:|---:|---:|---:|---|")
    for t in threads:
        for label, base, *has_target in groups:
            g = f"{base}_t{t}"
            tp, ry = median_ns(g, "treepool"), median_ns(g, "rayon")
            r = ratio(tp, ry)
            v = check(r) if r is not None and (not has_target or has_target[0]) else "—"
            w(f"| {label} | {t} | {fmt_ns(tp)} | {fmt_ns(ry)} | {fmt_ratio(r)} | {v} |")
    w("")


def le(limit):
    return lambda r: verdict(r <= limit)


def chili_table(title, target, groups):
    """Like time_table, with chili beside rayon. groups: [(label, group_base, rayon_limit,
    chili_limit)]; a limit of None = no target on that ratio."""
    w(f"## {title}\n")
    w(f"Target: {target}\n")
    w("| workload | threads | treepool | rayon | chili | chili, every join² | treepool/rayon | "
      "treepool/chili | treepool/chili, every join | target vs rayon | target vs chili |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")

    def check(r, limit):
        return "—" if r is None or limit is None else f"≤ {limit:.2f}: {verdict(r <= limit)}"

    for t in threads:
        for label, base, ry_limit, ch_limit in groups:
            g = f"{base}_t{t}"
            tp, ry, ch, che = (median_ns(g, f)
                               for f in ("treepool", "rayon", "chili", "chili_every_join"))
            rr, rc, rce = ratio(tp, ry), ratio(tp, ch), ratio(tp, che)
            w(f"| {label} | {t} | {fmt_ns(tp)} | {fmt_ns(ry)} | {fmt_ns(ch)} | {fmt_ns(che)} | "
              f"{fmt_ratio(rr)} | {fmt_ratio(rc)} | {fmt_ratio(rce)} | {check(rr, ry_limit)} | "
              f"{check(rc, ch_limit)} |")
    w("")
    w("² chili's `join` goes through its frame (the half a heartbeat can share) only once in 64 "
      "joins while its thread's queue holds 3 frames or more, and runs the others as plain "
      "calls, `b` then `a`, whose `b` no other thread can take; treepool's and rayon's every "
      "join offers its `b`. *chili, every join* is the same pool with every join through the "
      "frame (`join_with_heartbeat_every::<1>`): the comparison of the same mechanism "
      "(docs/benchmarks-notes.md, \"What chili's join skips\").\n")


def per_join_table(rows):
    """rows: [(label, group_base, joins)]; per-join overhead of the 1-thread pools."""
    w("| workload | joins | group threads | sequential | treepool 1 thread | rayon 1 thread | "
      "chili 1 thread | treepool ns/join | rayon ns/join | chili ns/join¹ | treepool/rayon | "
      "treepool/chili |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in threads:
        for label, base, joins in rows:
            g = f"{base}_t{t}"
            seq, tp1, ry1, ch1 = (median_ns(g, f) for f in
                                  ("sequential", "treepool_1t", "rayon_1t", "chili_1t"))
            # chili runs `b` before `a`: its overhead is over the right-first walk, where the
            # group has one.
            seq_ch = median_ns(g, "sequential_right_first") or seq
            per = lambda x, s=seq: None if x is None or s is None else (x - s) / joins
            ptp, pry, pch = per(tp1), per(ry1), per(ch1, seq_ch)
            # A negative overhead means the sequential run was slowed by noise (other load).
            fj = lambda x: "—" if x is None else (f"{x:.2f}" if x >= 0 else f"{x:.2f} (noise)")
            rr = lambda o: (fmt_ratio(ratio(ptp, o))
                            if ptp is not None and ptp >= 0 and o is not None and o > 0 else "—")
            w(f"| {label} | {joins:,} | {t} | {fmt_ns(seq)} | {fmt_ns(tp1)} | {fmt_ns(ry1)} | "
              f"{fmt_ns(ch1)} | {fj(ptp)} | {fj(pry)} | {fj(pch)} | {rr(pry)} | {rr(pch)} |")
    w("")
    w("¹ chili's `join` runs `b` before `a`, so its overhead is taken over the right-first "
      "sequential walk (`sequential_right_first`) where the group has one, else over "
      "`sequential`.\n")


# 1. Join overhead
chili_table("1. Join overhead: binary tree sum, one join per node",
            "treepool/rayon ≤ 1.00; for tree 2^20−1: treepool/rayon ≤ 0.40 and treepool/chili "
            "≤ 0.90; for tree 1,023 × 200: treepool/rayon ≤ 0.80 and treepool/chili ≤ 0.90 "
            "(issue 39)",
            [("tree 1,023 nodes", "join_tree_1023", 1.00, None),
             ("tree 2^20−1 nodes", "join_tree_1048575", 0.40, 0.90),
             ("tree 1,023 nodes × 200 (200 sums in a row per iteration)", "join_tree_1023x200",
              0.80, 0.90),
             ("tree 2^20−1 nodes allocated level by level (no target; see below)",
              "join_tree_levelorder_1048575", None, None),
             ("install round-trip (`pool.install` of an empty closure; chili: make and drop a "
              "scope; no target)", "install_roundtrip", None, None)])
w("The tree sums are timed inside one `install` (chili: one scope) per sample, so the install "
  "round-trip (its own row above) is not in them. Per-join overhead = (1-thread pool time − "
  "sequential time) / joins, joins = nodes (leaves join two empty halves).\n")
per_join_table([("tree 1,023 nodes", "join_tree_1023", 1023),
                ("tree 2^20−1 nodes", "join_tree_1048575", 1048575),
                ("tree 2^20−1 nodes, level order", "join_tree_levelorder_1048575", 1048575)])
w("The 2^20−1 tree of the target row is allocated children before parent, so chili, whose "
  "`join` runs `b` (the right subtree) before `a`, walks it in falling address order: its "
  "sequential right-first sum (`sequential_right_first` in the same group) is "
  + ", ".join(f"{fmt_ns(median_ns(f'join_tree_1048575_t{t}', 'sequential_right_first'))} "
              f"against {fmt_ns(median_ns(f'join_tree_1048575_t{t}', 'sequential'))} left-first "
              f"({t} threads)"
              for t in threads)
  + ". The level-order tree reads memory in neither order; there the pools compare on their "
  "join machinery and stealing alone.\n")

# 2. fib
chili_table("2. fib by join, no cutoff",
            "treepool/rayon ≤ 1.00; for fib(25): treepool/rayon ≤ 0.40 and treepool/chili ≤ 0.90 "
            "(issue 39)",
            [("fib(25)", "fib_25", 0.40, 0.90), ("fib(30)", "fib_30", 1.00, None)])
w("Each iteration runs one `install` (chili: one `pool.scope()`). Per-join overhead of fib(25) "
  "on 1-thread pools, timed inside one `install` (chili: one scope) per sample; joins = calls "
  "with n ≥ 2 = fib(26) − 1.\n")
per_join_table([("fib(25)", "fib_25", 121392)])

# 3. quicksort
time_table("3. Quicksort of 1M random u32 by join (cutoff 1,000 → sort_unstable)",
           "treepool/rayon ≤ 1.00", [("quicksort 1M", "quicksort_1m")], le(1.00))


# 4. scope fan-out
def fanout_check(r):
    return "met" if r <= 1.00 else ("met only with a profile (≤ 1.10)" if r <= 1.10 else "**missed**")


time_table("4. Scope fan-out", "treepool/rayon ≤ 1.00 (≤ 1.10 with a profile explaining it)",
           [("100k tiny spawns in one scope", "scope_flat_100k"),
            ("1,000 spawns × 100 spawns each", "scope_nested_1000x100"),
            ("10 × 10 × 1,000 spawns (three levels)", "scope_three_10x10x1000")], fanout_check)


def per_spawn_table(shapes):
    """shapes: [(label, group_base)]; ns per spawn on 1-thread pools and on the group's pools,
    with the allocations per spawn counted by the bench (scope_fanout_t<threads>.json)."""
    w("| workload | spawns | group threads | treepool ns/spawn, 1 thread | rayon ns/spawn, 1 thread "
      "| treepool/rayon, 1 thread | treepool ns/spawn | rayon ns/spawn | allocations/spawn, "
      "treepool | allocations/spawn, rayon |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in threads:
        allocs = {(r["workload"], r["pool"]): r for r in rows("scope_fanout", t)}
        for label, base in shapes:
            g = f"{base}_t{t}"
            a_tp, a_ry = allocs.get((base, "treepool")), allocs.get((base, "rayon"))
            spawns = (a_tp or a_ry or {}).get("spawns")
            if spawns is None:
                continue
            per = lambda f: None if median_ns(g, f) is None else median_ns(g, f) / spawns
            tp1, ry1, tpn, ryn = (per(f) for f in ("treepool_1t", "rayon_1t", "treepool", "rayon"))
            fs = lambda x: "—" if x is None else f"{x:.1f}"
            fa = lambda r: "—" if r is None else f"{r['allocations_per_spawn']:.3f}"
            w(f"| {label} | {spawns:,} | {t} | {fs(tp1)} | {fs(ry1)} | {fmt_ratio(ratio(tp1, ry1))} "
              f"| {fs(tpn)} | {fs(ryn)} | {fa(a_tp)} | {fa(a_ry)} |")
    w("")
    w("Per spawn = the group's median time / the spawns of one run (the leaves and the inner "
      "jobs). Allocations per spawn: the allocation calls of one untimed run, on any thread, "
      "over its spawns (`common::CallCountingAlloc`). Shared atomic read-modify-writes per "
      "spawn, from the code path: see \"The spawn path\" in the notes below.\n")


per_spawn_table([("100k tiny spawns in one scope", "scope_flat_100k"),
                 ("1,000 spawns × 100 spawns each", "scope_nested_1000x100"),
                 ("10 × 10 × 1,000 spawns (three levels)", "scope_three_10x10x1000")])


def main_rows(name, t):
    rs = [r for r in rows(name, t) if r.get("kind") == "main"]
    return (next((r for r in rs if r["pool"] == "treepool"), None),
            next((r for r in rs if r["pool"] == "rayon"), None))


def mem_section(title, name, group, target, alive_label, alive_limit, heap_pct_limit):
    w(f"## {title}\n")
    w(f"Target: {target}\n")
    w(f"| threads | max_inflight | treepool time | rayon time | treepool/rayon | "
      f"{alive_label} treepool | {alive_label} rayon | peak heap treepool | peak heap rayon | "
      f"heap treepool/rayon | target |")
    w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for t in threads:
        g = f"{group}_t{t}"
        tp, ry = median_ns(g, "treepool"), median_ns(g, "rayon")
        r = ratio(tp, ry)
        mt, mr = main_rows(name, t)
        cap = mt["max_inflight"] if mt else None
        checks = [None if r is None else r <= 1.00]
        if mt and cap is not None:
            checks.append(mt["peak_alive"] <= alive_limit(cap))
        hr = ratio(mt["peak_heap_bytes"], mr["peak_heap_bytes"]) if mt and mr else None
        if heap_pct_limit is not None:
            checks.append(None if hr is None else hr <= heap_pct_limit / 100)
        known = [c for c in checks if c is not None]
        v = verdict(all(known)) if known else "—"
        if v == "met" and len(known) < len(checks):
            v = "met (partial data)"
        w(f"| {t} | {cap if cap is not None else '—'} | {fmt_ns(tp)} | {fmt_ns(ry)} | "
          f"{fmt_ratio(r)} | {mt['peak_alive'] if mt else '—'} | {mr['peak_alive'] if mr else '—'} | "
          f"{fmt_bytes(mt['peak_heap_bytes'] if mt else None)} | "
          f"{fmt_bytes(mr['peak_heap_bytes'] if mr else None)} | "
          f"{'—' if hr is None else f'{100 * hr:.1f}%'} | {v} |")
    w("")
    if any(main_rows(name, t)[0] for t in threads):
        w("treepool's stats in the untimed run:\n")
        w("| threads | max_inflight | peak_inflight | peak_executing | peak_depth | on loan | "
          "from pool | admission waits | steals | untimed median |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for t in threads:
            mt, _ = main_rows(name, t)
            if mt:
                w(f"| {t} | {mt['max_inflight']} | {mt['peak_inflight']} | {mt['peak_executing']} | "
                  f"{mt['peak_depth']} | {mt['admitted_on_loan']} | {mt['admitted_from_pool']} | "
                  f"{mt['admission_waits']} | {mt['steals']} | {fmt_ns(mt['median_ns'])} |")
        w("")


mem_section("5. The seed's indexer: 2,000 files × 100 KB, 2 chunk jobs each", "indexer",
            "indexer_2000x100k",
            "treepool/rayon ≤ 1.00 and peak files in flight ≤ max_inflight",
            "peak files", lambda cap: cap, None)
mem_section("6. Producer loop: 2,000 items × 100 KB spawned from one scope", "producer",
            "producer_2000x100k",
            "peak items alive ≤ max_inflight + 1, peak heap ≤ 5% of rayon's, "
            "treepool/rayon ≤ 1.00",
            "peak items", lambda cap: cap + 1, 5.0)

# 7. idle
w("## 7. Idle CPU after a burst of work\n")
w("Target: treepool burns no more CPU than rayon (`getrusage(RUSAGE_SELF)` user + sys over the "
  "idle window right after the burst; `none` is the same window with no pool).\n")
w("| threads | window | none | treepool | rayon | target |")
w("|---:|---:|---:|---:|---:|---|")
for t in threads:
    rs = {r["pool"]: r for r in rows("idle", t)}
    if not rs:
        w(f"| {t} | — | — | — | — | — |")
        continue
    get = lambda p: rs[p]["cpu_ms"] if p in rs else None
    tp, ry, none = get("treepool"), get("rayon"), get("none") or 0.0
    if tp is None or ry is None:
        v = "—"
    elif tp <= ry:
        v = "met"
    elif tp <= ry + max(1.0, none):
        v = "met (within noise)"
    else:
        v = "**missed**"
    f = lambda x: "—" if x is None else f"{x:.2f} ms"
    win = rs.get("treepool", rs.get("none"))["window_s"]
    w(f"| {t} | {win:.2f} s | {f(get('none'))} | {f(tp)} | {f(ry)} | {v} |")
w("")

# 8. deep spawn trees
w("## 8. Deep spawn trees: memory and time\n")
w("Target (issue \"Never overflow the stack\"): every shape runs to the end; at most 1 KiB of "
  "peak RSS per level where the lending rules keep the levels in flight (1 thread, "
  "`max_inflight(1)`); no stack growth where tokens are free. Each memory row is one run in a "
  "fresh child process (`benches/deep.rs`): peak RSS (`VmHWM`) above the RSS just before the "
  "run. Shapes: a spawn-first chain of 100,000 links (`link(s, d)` spawns `link(s, d - 1)`, "
  "then a leaf), a work queue of 200,000 jobs (each pops the best item of a shared heap, "
  "pushes three, spawns three), a detached chain 100,000 deep (`spawn(next); spawn(side)`).\n")
w("| shape | pool | threads | max_inflight | peak RSS | per level | per job in flight | "
  "peak_depth | peak_inflight | jobs started on stack segments | run time |")
w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in threads:
    for r in rows("deep", t):
        tp = r["pool"] == "treepool"
        per = lambda k: fmt_bytes(r["peak_rss_bytes"] // r[k]) if tp and r[k] else "—"
        # Per job in flight only where the levels are what is in flight (not parked tokens).
        in_flight = per("peak_inflight") if tp and 2 * r["peak_inflight"] >= r["peak_depth"] else "—"
        w(f"| {r['workload'].removeprefix('deep_')} | {r['pool']} | {r['threads']} | "
          f"{r['max_inflight'] if tp else '—'} | {fmt_bytes(r['peak_rss_bytes'])} | "
          f"{per('peak_depth')} | {in_flight} | {r['peak_depth'] if tp else '—'} | "
          f"{r['peak_inflight'] if tp else '—'} | {r['stack_segments'] if tp else '—'} | "
          f"{r['ms']:.1f} ms |")
w("")
time_table("8b. Deep spawn trees: time", "none (the shapes must run to the end; rayon-demo's "
           "TSP on 11 random cities is a work-queue program of about 130,000 jobs)",
           [("spawn-first chain, 100,000 links", "deep_chain_100k", False),
            ("work queue, 200,000 jobs", "deep_queue_200k", False),
            ("detached chain, 100,000 deep", "deep_detached_100k", False),
            ("rayon-demo's TSP, 11 cities", "deep_tsp_11", False)], le(1.00))

# 9. install latency
w("## 9. A small `install` while one big scope saturates the pool\n")
w("Target: treepool keeps what admission gives for free (a root waits for the first token that "
  "frees, not for the scope): median about 0.2–0.3 ms or less. One thread runs a scope of "
  "20,000 spawns of 100 µs of spinning; another times `pool.install(|| ())` every 5 ms until "
  "the scope ends (`benches/install_latency.rs`).\n")
w("| threads | pool | installs | median | p90 | max |")
w("|---:|---|---:|---:|---:|---:|")
for t in threads:
    for r in rows("install_latency", t):
        ms = lambda k: "—" if r.get(k) is None else f"{r[k]:.3f} ms"
        w(f"| {t} | {r['pool']} | {r['installs']} | {ms('median_ms')} | {ms('p90_ms')} | "
          f"{ms('max_ms')} |")
w("")

# sweep
w("## max_inflight sweep (indexer and producer)\n")
w("Untimed runs on fresh treepool pools (median of the memory runs), rayon for reference: "
  "choose the default cap from throughput against memory.\n")
any_sweep = False
for name, label in (("indexer", "peak files"), ("producer", "peak items")):
    for t in threads:
        rs = rows(name, t)
        sweep = sorted((r for r in rs if r.get("kind") == "sweep"), key=lambda r: r["max_inflight"])
        if not sweep:
            continue
        any_sweep = True
        _, mr = main_rows(name, t)
        w(f"### {name}, {t} threads\n")
        w(f"| max_inflight | time | time vs rayon | {label} | peak heap | heap vs rayon | "
          f"peak_inflight | admission waits | steals |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in sweep:
            tr = ratio(r["median_ns"], mr["median_ns"]) if mr else None
            hr = ratio(r["peak_heap_bytes"], mr["peak_heap_bytes"]) if mr else None
            w(f"| {r['max_inflight']} | {fmt_ns(r['median_ns'])} | {fmt_ratio(tr)} | "
              f"{r['peak_alive']} | {fmt_bytes(r['peak_heap_bytes'])} | "
              f"{'—' if hr is None else f'{100 * hr:.1f}%'} | {r['peak_inflight']} | "
              f"{r['admission_waits']} | {r['steals']} |")
        if mr:
            w(f"| rayon | {fmt_ns(mr['median_ns'])} | 1.00 | {mr['peak_alive']} | "
              f"{fmt_bytes(mr['peak_heap_bytes'])} | 100.0% | — | — | — |")
        w("")
if not any_sweep:
    w("No sweep results (set `TREEPOOL_BENCH_CAPS`).\n")

if stale_seen:
    w("> Note: these results predate this run (left from an earlier one): "
      + ", ".join(sorted(set(stale_seen))) + "\n")

# Only this script's part of the file is replaced: the sections other scripts write (and the
# title) stay as they are.
subprocess.run(
    ["python3", "benches/common/doc_section.py", str(out), "treepool benchmarks", "suite",
     "benches/report.sh"],
    input="\n".join(md).rstrip() + "\n", text=True, check=True)
PY
