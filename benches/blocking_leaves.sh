#!/usr/bin/env bash
# How fast a tree spreads over 8 and 16 threads, on any machine (benches/blocking_leaves.rs:
# join trees, scope trees and scope fan-outs whose leaves sleep 2 ms, treepool and rayon in one
# process). Runs the bench ROUNDS times, then writes the table into docs/benchmarks.md, section
# "Blocking leaves: how fast a tree spreads (issue 35)", between its two markers.
#
#   benches/blocking_leaves.sh                     # one run (about a minute)
#   ROUNDS=3 benches/blocking_leaves.sh            # three runs: medians of the rounds
#   TREEPOOL_BENCH_QUICK=1 OUT=- benches/blocking_leaves.sh   # a smoke run, the section on stdout
#
# Knobs (environment): ROUNDS (default 1), OUT (default docs/benchmarks.md; `-` prints the
# section only), TREEPOOL_BENCH_BLOCKING_THREADS (default 8,16), TREEPOOL_BENCH_QUICK=1.
#
# Per round the script reads each function's criterion median
# (target/criterion/blocking_*/<pool>/new/estimates.json, written by that round) and the most
# leaves asleep at once (target/treepool-bench/blocking_leaves_t<threads>.json, the median of
# the bench's untimed runs). The table gives the median over the rounds of each pool's time, the
# median of the per-round ratios treepool / rayon with their range, the ideal
# (ceil(leaves / threads) × 2 ms), and the most leaves asleep at once (median over the rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-docs/benchmarks.md}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$ROUNDS: expected a positive integer" >&2; exit 2; }
quick=${TREEPOOL_BENCH_QUICK:-0}
[[ $quick == 0 ]] && quick=

target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
results=$target_dir/blocking-leaves
rm -rf "$results"
mkdir -p "$results"

cargo bench --no-run --bench blocking_leaves
for round in $(seq "$ROUNDS"); do
    echo "=== blocking leaves, round $round/$ROUNDS${quick:+ (quick)}" >&2
    touch "$results/start"
    cargo bench -q --bench blocking_leaves -- "$@"
    find "$target_dir/criterion" -path '*/blocking_*_t*/*/new/estimates.json' -newer "$results/start" \
        -printf '%p\n' | while read -r path; do
        fn_dir=$(dirname "$(dirname "$path")")
        median=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$path")
        echo "$(basename "$(dirname "$fn_dir")") $(basename "$fn_dir") $median"
    done >"$results/round-$round"
    cat "$target_dir"/treepool-bench/blocking_leaves_t*.json >"$results/peaks-$round"
    [[ -s "$results/round-$round" ]] || { echo "round $round wrote no blocking_* results" >&2; exit 1; }
done

rounds_knob=
((ROUNDS == 1)) || rounds_knob="ROUNDS=$ROUNDS "
command="${quick:+TREEPOOL_BENCH_QUICK=1 }${rounds_knob}benches/blocking_leaves.sh${*:+ $*}"
dirty=$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo ' + uncommitted changes in src/Cargo')
section=$(python3 - "$results" "$ROUNDS" "$command" "$dirty" "$quick" <<'PY'
import json, math, pathlib, re, statistics, subprocess, sys
results, rounds, command, dirty, quick = sys.argv[1:]
results, rounds = pathlib.Path(results), int(rounds)
run = lambda *cmd: subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
order = ["join_32", "join_128", "scope_tree_32", "fanout_32"]
times, peaks = {}, {}
for r in range(1, rounds + 1):
    for line in (results / f"round-{r}").read_text().splitlines():
        group, pool, ns = line.split()
        m = re.fullmatch(r"blocking_(.+)_t(\d+)", group)
        times.setdefault((m[1], int(m[2])), {}).setdefault(pool, {})[r] = float(ns)
    for line in (results / f"peaks-{r}").read_text().splitlines():
        row = json.loads(line)
        m = re.fullmatch(r"blocking_(.+)_t(\d+)", row["group"])
        for pool in ("treepool", "rayon"):
            peaks.setdefault((m[1], int(m[2])), {}).setdefault(pool, []).append(row[f"{pool}_peak_asleep"])
rank = lambda k: (k[1], order.index(k[0]) if k[0] in order else len(order), k[0])
rows = []
for shape, threads in sorted(times, key=rank):
    tp, ry = times[(shape, threads)].get("treepool", {}), times[(shape, threads)].get("rayon", {})
    both = sorted(set(tp) & set(ry))
    if not both:
        continue
    ratios = sorted(tp[r] / ry[r] for r in both)
    spread = f" ({ratios[0]:.2f}–{ratios[-1]:.2f})" if len(ratios) > 1 else ""
    leaves = int(shape.rsplit("_", 1)[1])
    ideal = math.ceil(leaves / threads) * 2.0
    pk = peaks.get((shape, threads), {})
    asleep = lambda p: f"{statistics.median(pk[p]):.0f}" if pk.get(p) else "?"
    ratio = statistics.median(ratios)
    rows.append(f"| `{shape}` | {threads} | {ideal:.0f} ms | {statistics.median(tp[r] for r in both) / 1e6:.2f} ms "
                f"| {statistics.median(ry[r] for r in both) / 1e6:.2f} ms | **{ratio:.2f}×**{spread} "
                f"| {asleep('treepool')} | {asleep('rayon')} | {'met' if ratio <= 1.02 and statistics.median(pk.get('treepool', [0])) >= min(threads, leaves) else '**not met**'} |")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
how = (f"Times: criterion medians, the median over {rounds} rounds (one process each); ratio: the "
       "median over the rounds of treepool's time / rayon's in the same round (the range in "
       "brackets)." if rounds > 1 else "Times: criterion medians; ratio: treepool's time / rayon's.")
quick_note = ("\n**A smoke run (`TREEPOOL_BENCH_QUICK=1`): not figures to judge the targets "
              "by.**\n") if quick else ""
print(f"""Regenerated by `benches/blocking_leaves.sh` on {run("date", "-u", "+%Y-%m-%d %H:%M UTC")}, \
commit {run("git", "rev-parse", "--short", "HEAD")}{dirty}, on a {run("nproc")}-core machine ({cpu}), \
{run("rustc", "--version")}: `{command}`.
{quick_note}
Each leaf sleeps 2 ms, so it needs no CPU: a pool of 16 threads on a 2-core machine can have 16
leaves asleep at once, and a tree's time shows how soon its work reached every thread. Shapes
(`benches/blocking_leaves.rs`): `join_<n>`, a binary `join` tree of n leaves; `scope_tree_<n>`,
the same tree with `Scope::spawn`; `fanout_<n>`, one scope body spawning n leaves. Both pools in
one process, treepool at the builder's default `max_inflight`, one `pool.install` per iteration.
Ideal: ⌈leaves / threads⌉ × 2 ms. Asleep: the most leaves asleep at once, the median of 9
untimed runs. {how} Target: at most rayon's time (met: a ratio of at most 1.02, the spread of
rayon's own times from round to round here), and as many leaves asleep at once as threads.

| shape | threads | ideal | treepool | rayon | treepool/rayon | asleep (treepool) | asleep (rayon) | target |
|---|---:|---:|---:|---:|---:|---:|---:|---|""")
print("\n".join(rows))
PY
)
printf '%s\n' "$section" | python3 benches/common/doc_section.py "$OUT" \
    "Blocking leaves: how fast a tree spreads (issue 35)" blocking-leaves benches/blocking_leaves.sh
