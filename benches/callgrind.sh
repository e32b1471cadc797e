#!/usr/bin/env bash
# Instruction counts (callgrind Ir) of treepool's join and spawn paths on a ONE-thread pool with
# the builder's default max_inflight, printed as a markdown table on stdout. Instruction counts
# are stable where times on a shared machine are not: use this for before/after comparisons.
#
#   benches/callgrind.sh                      # every shape
#   benches/callgrind.sh fib25 flat100k       # some shapes
#   CALLGRIND_RUNS=4 benches/callgrind.sh     # more measured runs per shape (default 2)
#
# The workloads live in examples/callgrind_shapes.rs (see its header): fib25 (fib(25) by
# treepool::join), flat100k (100,000 spawns in one scope), nested1000x100 (1,000 scope spawns
# each spawning 100), chain100k (spawn-first chain: each link spawns the next link, then a
# leaf), tree2p17 (binary spawn tree, 2^17 leaves). It is built with the bench profile
# (release + debug symbols) into cargo's target dir (CARGO_TARGET_DIR is honoured).
#
# Method: for each shape, two callgrind runs of the program, one with `<shape> 0` (start, pool
# start, one warm-up run, shutdown) and one with `<shape> R` (the same plus R runs). The
# program's fixed cost cancels: Ir per run = (Ir(R) − Ir(0)) / R, counted over all threads
# (the caller waiting in `install` included). Per-op = per run / the shape's joins or spawns.
# Every run goes through one `pool.install`; its round-trip (a few thousand Ir) is in the figure.
#
# Needs: valgrind (callgrind), cargo, python3.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

runs="${CALLGRIND_RUNS:-2}"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "CALLGRIND_RUNS=$runs: expected a positive integer" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 2; }

bin="$(cargo build --profile bench --example callgrind_shapes --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
exe = [m["executable"] for m in map(json.loads, sys.stdin)
       if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "callgrind_shapes"
       and m.get("executable")]
print(exe[-1])')"

# Known shapes and their divisors, from the program itself: "<shape> <ops> <unit>" per line.
declare -A ops unit
order=()
while read -r name n u; do
    ops[$name]="$n"
    unit[$name]="$u"
    order+=("$name")
done < <("$bin" list)

shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=("${order[@]}")
for s in "${shapes[@]}"; do
    [[ -n "${ops[$s]:-}" ]] || { echo "unknown shape $s (known: ${order[*]})" >&2; exit 2; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Total Ir of `callgrind_shapes <shape> <runs>`, all threads.
total_ir() {
    local out="$tmp/$1.$2.out"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$1" "$2" 2>"$tmp/log" || {
        cat "$tmp/log" >&2
        echo "callgrind run of $1 $2 failed" >&2
        exit 1
    }
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

echo "callgrind, treepool 1 thread (default max_inflight), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo ' + uncommitted changes in src/Cargo'), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "$(valgrind --version), $(rustc --version), ${runs} measured run(s) per shape: Ir per run = (Ir(${runs} runs) − Ir(0 runs)) / ${runs}"
echo
echo "| shape | joins/spawns per run | Ir, 0 runs (fixed cost) | Ir, ${runs} runs | Ir per run | Ir per op |"
echo "|---|---:|---:|---:|---:|---:|"
for s in "${shapes[@]}"; do
    base="$(total_ir "$s" 0)"
    full="$(total_ir "$s" "$runs")"
    python3 - "$s" "${ops[$s]}" "${unit[$s]}" "$base" "$full" "$runs" <<'PY'
import sys
shape, ops, unit, base, full, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
per_run = (full - base) / runs
print(f"| {shape} | {ops:,} {unit}s | {base:,} | {full:,} | {per_run:,.0f} | {per_run / ops:.1f} per {unit} |")
PY
done
