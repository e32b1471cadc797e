#!/usr/bin/env bash
# Rayon programs on the real rayon-core and on treepool, side by side (issue 26): the programs
# of benches/rayon/src/programs.rs (rayon-demo's shapes, on rayon's API only) built twice, once
# as they are (benches/rayon/Cargo.toml) and once with rayon-core patched to this repository's
# compatibility crate (benches/rayon/on-treepool/Cargo.toml); `links` keeps two rayon-cores out
# of one process. Writes the table into docs/benchmarks.md, section "Rayon programs on
# treepool", between its two markers (appended at the end if they are missing).
#
#   benches/rayon.sh                     # 7 rounds, 5 timed runs per program and binary a round
#   ROUNDS=3 ITERS=3 OUT=- benches/rayon.sh   # a quick run, the table on stdout only
#
# Knobs (environment): THREADS (default 2: RAYON_NUM_THREADS of both binaries), ROUNDS
# (default 7), ITERS (timed runs per process, default 5; one untimed run before them builds
# the inputs), PROGRAMS (default all: `list` of the binary), OUT (default docs/benchmarks.md;
# `-` prints the section only).
#
# Each round runs every program once in each binary, alternating which goes first, so that the
# load of others on a shared machine falls on both alike. A process prints the median of its
# timed runs; the table gives, per program, the median over the rounds of each binary's time
# and the median over the rounds of the ratio treepool / rayon-core within a round, and
# treepool's Stats peaks (the largest over the rounds). Both binaries must print the same
# result for a program, or the script fails.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-7}
ITERS=${ITERS:-5}
OUT=${OUT:-docs/benchmarks.md}
target=${CARGO_TARGET_DIR:-$PWD/target}/rayon-programs

# Both binaries get the same code generation: one codegen unit and fat LTO (their
# Cargo.toml's [profile.release]) so that rayon's generic code is inlined alike in both, and
# every loop aligned to 64 bytes so that a hot inner loop never straddles a cache line in one
# binary and not in the other (either alone swung single programs by 5-25 %).
build() {
    CARGO_TARGET_DIR=$target/$1 RUSTFLAGS="${RUSTFLAGS:-} -C llvm-args=-align-loops=64" \
        cargo build --release --quiet --manifest-path "$2"
}
build rayon-core benches/rayon/Cargo.toml
build treepool benches/rayon/on-treepool/Cargo.toml
declare -A bin=(
    [rayon-core]=$target/rayon-core/release/rayon-programs
    [treepool]=$target/treepool/release/rayon-programs-on-treepool
)
programs=${PROGRAMS:-$("${bin[rayon-core]}" list)}

results=$target/results
rm -rf "$results"
mkdir -p "$results"
for round in $(seq "$ROUNDS"); do
    order=(rayon-core treepool)
    ((round % 2)) || order=(treepool rayon-core)
    for program in $programs; do
        for which in "${order[@]}"; do
            echo "round $round/$ROUNDS: $program on $which" >&2
            env -u TREEPOOL_NUM_THREADS -u TREEPOOL_MAX_INFLIGHT RAYON_NUM_THREADS="$THREADS" \
                "${bin[$which]}" "$program" "$ITERS" >"$results/$program.$which.$round"
        done
    done
done

section=$(python3 - "$results" "$THREADS" "$ROUNDS" "$ITERS" "$programs" <<'PY'
import math, os, pathlib, statistics, subprocess, sys
results, threads, rounds, iters, programs = sys.argv[1:]
results, rounds = pathlib.Path(results), int(rounds)

def read(program, which, r):
    text = (results / f"{program}.{which}.{r}").read_text()
    return dict(line.split("=", 1) for line in text.split())

def fmt(ns):
    return f"{ns / 1e6:.1f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs"

rows, ratios = [], []
for program in programs.split():
    runs = [(read(program, "rayon-core", r), read(program, "treepool", r)) for r in range(1, rounds + 1)]
    for core, tp in runs:
        assert core["result"] == tp["result"], f"{program}: results differ: {core} {tp}"
        assert int(tp["threads"]) == int(threads) == int(core["threads"]), (core, tp)
    core_ns = statistics.median(int(c["median_ns"]) for c, _ in runs)
    tp_ns = statistics.median(int(t["median_ns"]) for _, t in runs)
    per_round = sorted(int(t["median_ns"]) / int(c["median_ns"]) for c, t in runs)
    ratio = statistics.median(per_round)
    ratios.append(ratio)
    peak = lambda key: max(int(t[key]) for _, t in runs)
    rows.append(f"| `{program}` | {fmt(core_ns)} | {fmt(tp_ns)} | **{ratio:.2f}×** "
                f"| {per_round[0]:.2f}–{per_round[-1]:.2f} | {peak('peak_executing')} "
                f"| {peak('peak_inflight')} | {peak('peak_depth')} | {peak('admitted')} "
                f"| {peak('admission_waits')} | {peak('handed_back')} |")
cap = read(programs.split()[0], "treepool", 1)["max_inflight"]
geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
worst = max(ratios)
git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
date = subprocess.run(["date", "-u", "+%Y-%m-%d %H:%M UTC"], capture_output=True, text=True).stdout.strip()
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
realtime = os.sched_getscheduler(0) == os.SCHED_FIFO
shield = (" It ran under real-time priority (`chrt -f`), which keeps that load off both binaries"
          " alike." if realtime else "")
print(f"""Regenerated by `benches/rayon.sh` on {date}, commit {git}, on a {cores}-core machine ({cpu})
shared with other people's builds: times are noisy, the ratios less so.{shield} Both binaries are
built alike: one codegen unit, fat LTO, loops aligned to 64 bytes (see the script). {threads} threads
(`RAYON_NUM_THREADS={threads}` for both binaries; treepool's default `max_inflight`, {cap});
{rounds} rounds, each running every program {iters} times (after one untimed run) in each binary,
alternating which goes first. Times: the median over the rounds of each process's median;
ratio: the median over the rounds of treepool's time / rayon-core's in the same round; peaks:
treepool's `Stats` for the global pool after a process, the largest over the rounds.

**Geometric mean of the ratios: {geomean:.2f}×; the largest: {worst:.2f}×** (target: each at most
1.00×, geometric mean at most 0.90×).

| program | rayon-core | treepool | ratio | ratio range | peak_executing | peak_inflight | peak_depth | admitted | admission_waits | handed_back |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|""")
print("\n".join(rows))
PY
)
printf '%s\n' "$section" |
    python3 benches/common/doc_section.py "$OUT" "Rayon programs on treepool (issue 26)" \
        rayon-programs benches/rayon.sh
