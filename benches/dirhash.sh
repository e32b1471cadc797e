#!/usr/bin/env bash
# Speed benchmark of examples/dirhash/ against b3sum, rayon and one thread.
#
#   benches/dirhash.sh            # full size: 4000 small files + 4 x 256 MiB, 7 runs each
#   SMOKE=1 benches/dirhash.sh    # quick check that everything works (tiny tree, 2 runs)
#
# Knobs (environment): BENCH_DIR (default /tmp/treepool-dirhash-bench), SMALL (number of
# small files), LARGE (number of large files), LARGE_MIB (size of each large file),
# RUNS (timed runs per command, the median is reported), THREADS (passed as --threads;
# default 0 = all cores), KEEP=1 keeps the generated tree.
#
# It generates the tree once (random bytes, so nothing is sparse and every byte is
# hashed), builds `--release --example dirhash`, checks that every variant prints output
# byte-identical to the b3sum pipeline, then times, with a warm page cache:
#   dirhash              (treepool)
#   dirhash --engine rayon
#   dirhash --threads 1
#   find | sort | xargs b3sum   (what dirhash's output is defined to equal)
# with hyperfine when installed (else a loop timed with `date`), and measures the peak
# RSS of each with /usr/bin/time -f %M (for the pipeline: its largest process). It
# prints a markdown table. The machine is shared: run the full size rarely.
set -euo pipefail

cd "$(dirname "$0")/.."
SMOKE=${SMOKE:-0}
if [[ $SMOKE == 1 ]]; then
    : "${SMALL:=300}" "${LARGE:=2}" "${LARGE_MIB:=8}" "${RUNS:=2}"
else
    : "${SMALL:=4000}" "${LARGE:=4}" "${LARGE_MIB:=256}" "${RUNS:=7}"
fi
THREADS=${THREADS:-0}
BENCH_DIR=${BENCH_DIR:-/tmp/treepool-dirhash-bench}
TREE="$BENCH_DIR/tree-s$SMALL-l$LARGE-m$LARGE_MIB"

die() { echo "dirhash.sh: $*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------------------
if ! command -v b3sum >/dev/null; then
    echo "b3sum not found: installing it with cargo install b3sum" >&2
    cargo install --locked b3sum >&2 || die "cannot install b3sum"
fi
command -v /usr/bin/time >/dev/null || die "/usr/bin/time is needed for the RSS column (apt-get install -y time)"
HAVE_HYPERFINE=0
if command -v hyperfine >/dev/null && command -v python3 >/dev/null; then HAVE_HYPERFINE=1; fi

# --- the tree --------------------------------------------------------------------------
if [[ ! -f "$TREE/.complete" ]]; then
    echo "generating $TREE: $SMALL small files (1-64 KiB) and $LARGE x $LARGE_MIB MiB" >&2
    rm -rf "$TREE"
    mkdir -p "$TREE/large"
    # One random blob sliced into small files: far fewer processes than one per file.
    blob="$TREE/.blob"
    head -c $((64 * 1024 * 64)) /dev/urandom >"$blob"
    RANDOM=42
    for ((i = 0; i < SMALL; i++)); do
        d="$TREE/small/d$((i % 40))/e$((i % 7))"
        [[ -d $d ]] || mkdir -p "$d"
        size=$(( (RANDOM * 32768 + RANDOM) % (64 * 1024) + 1 ))
        skip=$(( RANDOM % 63 ))
        dd if="$blob" of="$d/f$i.dat" bs=1024 skip="$skip" count=$(( (size + 1023) / 1024 )) status=none
        truncate -s "$size" "$d/f$i.dat"
    done
    rm -f "$blob"
    for ((i = 0; i < LARGE; i++)); do
        head -c $((LARGE_MIB * 1024 * 1024 + i * 4321)) /dev/urandom >"$TREE/large/big$i.bin"
    done
    touch "$TREE/.complete"
fi
# Not a file that `find -type f` would list differently: .complete is a regular file and
# is hashed by both sides, which is fine.
BYTES=$(du -sb --apparent-size "$TREE" | cut -f1)
FILES=$(find "$TREE" -type f | wc -l)

# --- build -----------------------------------------------------------------------------
cargo build --release --example dirhash >&2
BIN=$PWD/target/release/examples/dirhash
[[ -x $BIN ]] || die "$BIN was not built"

declare -a NAMES CMDS
add() { NAMES+=("$1"); CMDS+=("$2"); }
add "dirhash (treepool)" "$BIN --no-progress --threads $THREADS $TREE"
add "dirhash --engine rayon" "$BIN --no-progress --threads $THREADS --engine rayon $TREE"
add "dirhash --threads 1" "$BIN --no-progress --threads 1 $TREE"
add "b3sum (find, sort -z, xargs -0 b3sum)" "find $TREE -type f -print0 | LC_ALL=C sort -z | xargs -0 b3sum"

# --- correctness gate: every variant prints exactly what the pipeline prints -----------
ref=$(mktemp)
trap 'rm -f "$ref" "$ref".*' EXIT
bash -c "${CMDS[3]}" >"$ref"
for i in 0 1 2; do
    bash -c "${CMDS[$i]}" >"$ref.$i" || die "${NAMES[$i]} failed"
    cmp -s "$ref" "$ref.$i" || die "${NAMES[$i]}: output differs from the b3sum pipeline"
done

# --- timing ----------------------------------------------------------------------------
declare -a MED MIN MAX RSS
for i in "${!CMDS[@]}"; do
    cmd="${CMDS[$i]} >/dev/null"
    if [[ $HAVE_HYPERFINE == 1 ]]; then
        hyperfine --style none --warmup 1 --runs "$RUNS" --export-json "$ref.json" "$cmd" >&2
        read -r med mn mx < <(python3 -c '
import json, statistics, sys
r = json.load(open(sys.argv[1]))["results"][0]
t = r["times"]
print(f"{statistics.median(t):.3f} {min(t):.3f} {max(t):.3f}")' "$ref.json")
    else
        bash -c "$cmd" # warm-up
        times=()
        for ((r = 0; r < RUNS; r++)); do
            s=$(date +%s.%N); bash -c "$cmd"; e=$(date +%s.%N)
            times+=("$(echo "$e - $s" | bc)")
        done
        read -r med mn mx < <(printf '%s\n' "${times[@]}" | sort -g | awk '
            { t[NR] = $1 } END { m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2;
                                 printf "%.3f %.3f %.3f\n", m, t[1], t[NR] }')
    fi
    MED[$i]=$med MIN[$i]=$mn MAX[$i]=$mx
    RSS[$i]=$(/usr/bin/time -f %M bash -c "$cmd" 2>&1 >/dev/null | tail -n 1)
done

# --- report ----------------------------------------------------------------------------
echo
echo "dirhash benchmark: $FILES files, $((BYTES / 1024 / 1024)) MiB ($SMALL small, $LARGE x $LARGE_MIB MiB), $(nproc) cores, threads=$THREADS, median of $RUNS warm-cache runs"
echo
echo "| command | median (s) | min (s) | max (s) | throughput (MiB/s) | peak RSS (MiB) |"
echo "|---|---:|---:|---:|---:|---:|"
for i in "${!CMDS[@]}"; do
    awk -v n="${NAMES[$i]}" -v med="${MED[$i]}" -v mn="${MIN[$i]}" -v mx="${MAX[$i]}" \
        -v rss="${RSS[$i]}" -v bytes="$BYTES" 'BEGIN {
        printf "| %s | %.3f | %.3f | %.3f | %.0f | %.1f |\n", n, med, mn, mx,
               bytes / 1048576 / (med > 0 ? med : 1e-9), rss / 1024 }'
done

if [[ ${KEEP:-0} != 1 && $SMOKE == 1 ]]; then
    rm -rf "$TREE"
    rmdir "$BENCH_DIR" 2>/dev/null || true
fi
