#!/usr/bin/env bash
# Instruction counts (callgrind Ir) of the join and spawn paths on a ONE-thread pool, treepool
# (the builder's default max_inflight) and rayon side by side, printed as a markdown table on
# stdout. Instruction counts are stable where times on a shared machine are not: use this for
# before/after comparisons.
#
#   benches/callgrind.sh                      # every shape, both pools
#   benches/callgrind.sh fib25 flat100k       # some shapes
#   POOLS=treepool benches/callgrind.sh       # one pool (default "treepool rayon")
#   CALLGRIND_RUNS=4 benches/callgrind.sh     # more measured runs per shape (default 2)
#
# The workloads live in examples/callgrind_shapes.rs (see its header): fib25 (fib(25) by
# join), flat100k (100,000 spawns in one scope), nested1000x100 (1,000 scope spawns each
# spawning 100), chain100k (spawn-first chain: each link spawns the next link, then a leaf),
# detached100k (detached chain, spawn(next); spawn(side), 100,000 deep), tree2p17 (binary
# spawn tree, 2^17 leaves). It is built with the bench profile (release + debug symbols) into
# cargo's target dir (CARGO_TARGET_DIR is honoured).
#
# Method: for each shape, two callgrind runs of the program, one with `<shape> 0` (start, pool
# start, one warm-up run, shutdown) and one with `<shape> R` (the same plus R runs). The
# program's fixed cost cancels: Ir per run = (Ir(R) − Ir(0)) / R, counted over all threads
# (the caller waiting in `install` included). Per-op = per run / the shape's joins or spawns.
# Every run goes through one `pool.install`; its round-trip (a few thousand Ir) is in the figure.
# The last column is treepool's Ir per op over rayon's, where POOLS has both.
#
# Needs: valgrind (callgrind), cargo, python3.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

runs="${CALLGRIND_RUNS:-2}"
read -r -a pools <<<"${POOLS:-treepool rayon}"
for p in "${pools[@]}"; do
    [[ "$p" == treepool || "$p" == rayon ]] || { echo "POOLS: unknown pool $p (treepool, rayon)" >&2; exit 2; }
done
[[ ${#pools[@]} -gt 0 ]] || { echo "POOLS is empty" >&2; exit 2; }
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

# Total Ir of `callgrind_shapes <shape> <runs> <pool>`, all threads.
total_ir() {
    local out="$tmp/$1.$2.$3.out"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$1" "$2" "$3" 2>"$tmp/log" || {
        cat "$tmp/log" >&2
        echo "callgrind run of $1 $2 $3 failed" >&2
        exit 1
    }
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

echo "callgrind, 1 thread: ${pools[*]} (treepool: default max_inflight), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo ' + uncommitted changes in src/Cargo'), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "$(valgrind --version), $(rustc --version), ${runs} measured run(s) per shape and pool: Ir per run = (Ir(${runs} runs) − Ir(0 runs)) / ${runs}"
echo
header="| shape | joins/spawns per run |"
rule="|---|---:|"
for p in "${pools[@]}"; do
    header+=" $p: Ir, 0 runs (fixed cost) | $p: Ir per run | $p: Ir per op |"
    rule+="---:|---:|---:|"
done
if [[ ${#pools[@]} -eq 2 ]]; then
    header+=" treepool/rayon |"
    rule+="---:|"
fi
echo "$header"
echo "$rule"
for s in "${shapes[@]}"; do
    counts=()
    for p in "${pools[@]}"; do
        counts+=("$p" "$(total_ir "$s" 0 "$p")" "$(total_ir "$s" "$runs" "$p")")
    done
    python3 - "$s" "${ops[$s]}" "${unit[$s]}" "$runs" "${counts[@]}" <<'PY'
import sys
shape, ops, unit, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rest = sys.argv[5:]
row, per_op = f"| {shape} | {ops:,} {unit}s |", {}
for i in range(0, len(rest), 3):
    pool, base, full = rest[i], int(rest[i + 1]), int(rest[i + 2])
    per_run = (full - base) / runs
    per_op[pool] = per_run / ops
    row += f" {base:,} | {per_run:,.0f} | {per_op[pool]:.1f} per {unit} |"
if len(per_op) == 2:
    row += f" **{per_op['treepool'] / per_op['rayon']:.2f}×** |"
print(row)
PY
done
