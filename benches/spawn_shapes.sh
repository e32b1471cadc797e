#!/usr/bin/env bash
# Issue 27's spawn shapes side by side with rayon (benches/spawn_shapes.rs: spawn-first chain of
# 100,000 links, detached chain 100,000 deep, binary spawn tree of 2^17 leaves, nested fan-out
# 1,000 × 100; 1 and 2 threads; treepool at its default max_inflight). Runs the bench, then
# writes the table into docs/benchmarks.md, section "Spawn shapes side by side (issue 27)",
# between its two markers (appended at the end if they are missing; a rerun replaces it).
#
#   benches/spawn_shapes.sh                          # one run of the bench (about 90 s)
#   ROUNDS=5 benches/spawn_shapes.sh                 # five runs: medians of the rounds
#   TREEPOOL_BENCH_QUICK=1 OUT=- benches/spawn_shapes.sh   # a smoke run, the section on stdout
#   benches/spawn_shapes.sh chain                    # arguments go to criterion (a filter here)
#
# Knobs (environment): ROUNDS (default 1), OUT (default docs/benchmarks.md; `-` prints the
# section only), TREEPOOL_BENCH_QUICK=1 (short criterion runs: a smoke test, not figures).
#
# A round is one run of the bench binary: every group (spawn_<shape>_t<threads>) times
# treepool, then rayon, in the same process. The script reads each function's median (criterion's
# target/criterion/<group>/<function>/new/estimates.json, in cargo's target dir, so
# CARGO_TARGET_DIR is honoured) after every round, and only the files that round wrote. The
# table gives, per shape and thread count, the median over the rounds of each pool's median,
# and the median over the rounds of the ratio treepool / rayon within a round, with its range.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-docs/benchmarks.md}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$ROUNDS: expected a positive integer" >&2; exit 2; }
quick=${TREEPOOL_BENCH_QUICK:-0}
[[ $quick == 0 ]] && quick=

target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
results=$target_dir/spawn-shapes
rm -rf "$results"
mkdir -p "$results"

cargo bench --no-run --bench spawn_shapes
for round in $(seq "$ROUNDS"); do
    echo "=== spawn shapes, round $round/$ROUNDS${quick:+ (quick)}" >&2
    touch "$results/start"
    cargo bench -q --bench spawn_shapes -- "$@"
    # This round's medians, in the order the bench wrote them: "<group> <function> <ns>".
    find "$target_dir/criterion" -path '*/spawn_*_t*/*/new/estimates.json' -newer "$results/start" \
        -printf '%T@ %p\n' | sort -n | while read -r _ path; do
        fn_dir=$(dirname "$(dirname "$path")")
        median=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$path")
        echo "$(basename "$(dirname "$fn_dir")") $(basename "$fn_dir") $median"
    done >"$results/round-$round"
    [[ -s "$results/round-$round" ]] || { echo "round $round wrote no spawn_* results" >&2; exit 1; }
done

rounds_knob=
((ROUNDS == 1)) || rounds_knob="ROUNDS=$ROUNDS "
command="${quick:+TREEPOOL_BENCH_QUICK=1 }${rounds_knob}benches/spawn_shapes.sh${*:+ $*}"
dirty=$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo ' + uncommitted changes in src/Cargo')
section=$(python3 - "$results" "$ROUNDS" "$command" "$dirty" "$quick" <<'PY'
import pathlib, re, statistics, subprocess, sys
results, rounds, command, dirty, quick = sys.argv[1:]
results, rounds = pathlib.Path(results), int(rounds)

def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()

# (shape, threads) -> pool -> [median ns per round]; shapes in the order the bench ran them.
times, order = {}, []
for r in range(1, rounds + 1):
    for line in (results / f"round-{r}").read_text().splitlines():
        group, pool, ns = line.split()
        m = re.fullmatch(r"spawn_(.+)_t(\d+)", group)
        shape, threads = m[1], int(m[2])
        if shape not in order:
            order.append(shape)
        times.setdefault((shape, threads), {}).setdefault(pool, {})[r] = float(ns)

def fmt(ns):
    return f"{ns / 1e6:.2f} ms" if ns >= 1e6 else f"{ns / 1e3:.1f} µs"

rows = []
for shape, threads in sorted(times, key=lambda k: (order.index(k[0]), k[1])):
    t = times[(shape, threads)]
    tp, ry = t.get("treepool", {}), t.get("rayon", {})
    both = sorted(set(tp) & set(ry))
    if not both:
        continue
    ratios = sorted(tp[r] / ry[r] for r in both)
    ratio = statistics.median(ratios)
    spread = f" ({ratios[0]:.2f}–{ratios[-1]:.2f})" if len(ratios) > 1 else ""
    target = "met" if ratio <= 1.0 else "**not met**"
    rows.append(f"| `{shape}` | {threads} | {fmt(statistics.median(tp[r] for r in both))} "
                f"| {fmt(statistics.median(ry[r] for r in both))} | **{ratio:.2f}×**{spread} "
                f"| {target} |")

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
how = (f"Times: criterion medians, the median over {rounds} rounds (one process each); ratio: the "
       "median over the rounds of treepool's time / rayon's in the same round (the range in "
       "brackets)." if rounds > 1 else "Times: criterion medians; ratio: treepool's time / rayon's.")
quick_note = ("\n**A smoke run (`TREEPOOL_BENCH_QUICK=1`: 10 samples of 0.2 s): not figures "
              "to judge the targets by.**\n") if quick else ""
print(f"""Regenerated by `benches/spawn_shapes.sh` on {run("date", "-u", "+%Y-%m-%d %H:%M UTC")}, \
commit {run("git", "rev-parse", "--short", "HEAD")}{dirty}, on a {run("nproc")}-core machine ({cpu}), \
{run("rustc", "--version")}: `{command}`.
{quick_note}
Shapes (`benches/common/shapes.rs`): `chain_100k`, the spawn-first chain (`link(s, d)` spawns
`link(s, d - 1)`, then a leaf); `detached_100k`, the detached chain (`spawn(next);
spawn(side)`, waited for off the pool); `tree_2p17`, the binary spawn tree (each inner node
scope-spawns its two children, 2^17 leaves); `nested_1000x100`, one scope spawns 1,000 jobs
that spawn 100 leaves each. Both pools in one process (`benches/spawn_shapes.rs`), built once
per thread count, treepool at the builder's default `max_inflight`, one `pool.install` per
iteration.
{how} The issue also asks at most 0.70× for the nested fan-out.

| shape | threads | treepool | rayon | treepool/rayon | target (≤ 1.00) |
|---|---:|---:|---:|---:|---|""")
print("\n".join(rows))
PY
)
printf '%s\n' "$section" | python3 benches/common/doc_section.py "$OUT" \
    "Spawn shapes side by side (issue 27)" spawn-shapes benches/spawn_shapes.sh
