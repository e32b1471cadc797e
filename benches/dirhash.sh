#!/usr/bin/env bash
# Speed benchmark of examples/dirhash/ against the b3sum pipeline and a parallel xargs,
# with a cold page cache and with a warm one.
#
#   benches/dirhash.sh            # the Rust toolchain's sysroot (`rustc --print sysroot`), 7 runs
#   SMOKE=1 benches/dirhash.sh    # quick check that everything works (tiny generated tree, 2 runs)
#
# Knobs (environment): TREE (the directory to hash; default the sysroot, or with SYNTH=1 a
# generated tree of SMALL files of 1-64 KiB and LARGE x LARGE_MIB MiB under BENCH_DIR, default
# /tmp/treepool-dirhash-bench), RUNS (cold runs per command, default 7) and WARM_RUNS (warm
# runs, default 15; medians are reported), MODES (default "cold warm"), KEEP=1 keeps the smoke
# tree.
#
# It builds `--release --example dirhash`, checks that every variant prints output
# byte-identical to the b3sum pipeline (xargs -P16, whose order is not sorted, after sorting
# both), then times, in rounds that alternate the commands (so that the load of other people
# on a shared machine falls on all of them alike):
#   dirhash                       (the defaults)
#   dirhash --threads 0           (one thread per core: the default before issue 20)
#   dirhash --engine rayon        (the same walker on rayon, same thread count)
#   find | sort -z | xargs -0 b3sum        (what dirhash's output is defined to equal)
#   find | xargs -0 -P16 -n64 b3sum        (a parallel shell pipeline)
# cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before every timed run (needs root; the mode
# is skipped, with a message, where that file cannot be written); warm: one untimed run of
# every command first. It measures the peak RSS of each once (warm) with /usr/bin/time -f %M
# (for a pipeline: its largest process) and prints a markdown table with medians, min-max
# and each command's ratio to the two b3sum pipelines of the same mode: the median over the
# rounds of (its time / the pipeline's time in the same round), which a burst of load from
# other people skews less than a ratio of medians taken at different moments.
set -euo pipefail

cd "$(dirname "$0")/.."
SMOKE=${SMOKE:-0}
SYNTH=${SYNTH:-$SMOKE}
if [[ $SMOKE == 1 ]]; then
    : "${SMALL:=300}" "${LARGE:=2}" "${LARGE_MIB:=8}" "${RUNS:=2}" "${WARM_RUNS:=2}"
else
    : "${SMALL:=4000}" "${LARGE:=4}" "${LARGE_MIB:=256}" "${RUNS:=7}" "${WARM_RUNS:=15}"
fi
MODES=${MODES:-cold warm}
BENCH_DIR=${BENCH_DIR:-/tmp/treepool-dirhash-bench}

die() { echo "dirhash.sh: $*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v b3sum >/dev/null; then
    echo "b3sum not found: installing it with cargo install b3sum" >&2
    cargo install --locked b3sum >&2 || die "cannot install b3sum"
fi
command -v /usr/bin/time >/dev/null || die "/usr/bin/time is needed for the RSS column (apt-get install -y time)"
[[ -n ${EPOCHREALTIME:-} ]] || die "bash 5 is needed (EPOCHREALTIME)"

# --- the tree --------------------------------------------------------------------------
generate() {
    local tree=$1
    echo "generating $tree: $SMALL small files (1-64 KiB) and $LARGE x $LARGE_MIB MiB" >&2
    rm -rf "$tree"
    mkdir -p "$tree/large"
    # One random blob sliced into small files: far fewer processes than one per file.
    local blob="$tree/.blob" i d size skip
    head -c $((64 * 1024 * 64)) /dev/urandom >"$blob"
    RANDOM=42
    for ((i = 0; i < SMALL; i++)); do
        d="$tree/small/d$((i % 40))/e$((i % 7))"
        [[ -d $d ]] || mkdir -p "$d"
        size=$(( (RANDOM * 32768 + RANDOM) % (64 * 1024) + 1 ))
        skip=$(( RANDOM % 63 ))
        dd if="$blob" of="$d/f$i.dat" bs=1024 skip="$skip" count=$(( (size + 1023) / 1024 )) status=none
        truncate -s "$size" "$d/f$i.dat"
    done
    rm -f "$blob"
    for ((i = 0; i < LARGE; i++)); do
        head -c $((LARGE_MIB * 1024 * 1024 + i * 4321)) /dev/urandom >"$tree/large/big$i.bin"
    done
    touch "$tree/.complete"
}
if [[ -n ${TREE:-} ]]; then
    WHAT="$TREE"
elif [[ $SYNTH == 1 ]]; then
    TREE="$BENCH_DIR/tree-s$SMALL-l$LARGE-m$LARGE_MIB"
    [[ -f "$TREE/.complete" ]] || generate "$TREE"
    WHAT="a generated tree ($SMALL small files, $LARGE x $LARGE_MIB MiB)"
else
    TREE=$(rustc --print sysroot)
    WHAT="the Rust sysroot $TREE ($(rustc --version))"
fi
[[ -d $TREE ]] || die "$TREE is not a directory"
BYTES=$(find "$TREE" -type f -print0 | du -cb --apparent-size --files0-from=- | tail -n 1 | cut -f1)
FILES=$(find "$TREE" -type f | wc -l)

# --- cold mode needs root --------------------------------------------------------------
drop_caches() { sync && echo 3 >/proc/sys/vm/drop_caches; }
if [[ " $MODES " == *" cold "* ]] && ! drop_caches 2>/dev/null; then
    echo "dirhash.sh: cannot write /proc/sys/vm/drop_caches (not root?): skipping the cold mode" >&2
    MODES=${MODES//cold/}
fi

# --- build -----------------------------------------------------------------------------
cargo build --release --example dirhash >&2
BIN=$PWD/target/release/examples/dirhash
[[ -x $BIN ]] || die "$BIN was not built"

declare -a NAMES CMDS
add() { NAMES+=("$1"); CMDS+=("$2"); }
Q=$(printf %q "$TREE")
add "dirhash (defaults)" "$BIN --no-progress $Q"
add "dirhash --threads 0 (one per core)" "$BIN --no-progress --threads 0 $Q"
add "dirhash --engine rayon" "$BIN --no-progress --engine rayon $Q"
add "find \\| sort -z \\| xargs -0 b3sum" "find $Q -type f -print0 | LC_ALL=C sort -z | xargs -0 b3sum"
add "find \\| xargs -0 -P16 -n64 b3sum" "find $Q -type f -print0 | xargs -0 -P16 -n64 b3sum"
PIPE=3 XARGS=4

# --- correctness gate: every variant prints exactly what the pipeline prints -----------
ref=$(mktemp)
trap 'rm -f "$ref" "$ref".*' EXIT
bash -c "${CMDS[$PIPE]}" >"$ref"
for i in 0 1 2; do
    bash -c "${CMDS[$i]}" >"$ref.$i" || die "${NAMES[$i]} failed"
    cmp -s "$ref" "$ref.$i" || die "${NAMES[$i]}: output differs from the b3sum pipeline"
done
bash -c "${CMDS[$XARGS]}" | LC_ALL=C sort >"$ref.x"
LC_ALL=C sort "$ref" | cmp -s - "$ref.x" || die "xargs -P16 b3sum: lines differ from the pipeline's"

# --- timing ----------------------------------------------------------------------------
# One timed run of command $1 in mode $2; prints the seconds.
timed() {
    local cmd="${CMDS[$1]} >/dev/null" s e
    [[ $2 == cold ]] && drop_caches
    s=$EPOCHREALTIME
    bash -c "$cmd" || die "${NAMES[$1]} failed"
    e=$EPOCHREALTIME
    echo "$s $e" | awk '{ printf "%.3f\n", $2 - $1 }'
}
# median, min and max of the numbers given
stats() { printf '%s\n' "$@" | sort -g | awk '{ t[NR] = $1 } END {
    m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f\n", m, t[1], t[NR] }'; }

declare -A TIMES MED MIN MAX RP RX LOAD
loadavg() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?'; }
for mode in $MODES; do
    LOAD[$mode]=$(loadavg)
    runs=$RUNS
    if [[ $mode == warm ]]; then
        runs=$WARM_RUNS
        for i in "${!CMDS[@]}"; do bash -c "${CMDS[$i]} >/dev/null"; done
    fi
    declare -A ROUND=()
    for ((r = 0; r < runs; r++)); do
        echo "$mode round $((r + 1))/$runs" >&2
        for i in "${!CMDS[@]}"; do
            ROUND[$i]=$(timed "$i" "$mode")
            TIMES[$mode,$i]+="${ROUND[$i]} "
        done
        for i in "${!CMDS[@]}"; do
            RP[$mode,$i]+="$(awk -v a="${ROUND[$i]}" -v b="${ROUND[$PIPE]}" 'BEGIN { print a / b }') "
            RX[$mode,$i]+="$(awk -v a="${ROUND[$i]}" -v b="${ROUND[$XARGS]}" 'BEGIN { print a / b }') "
        done
    done
    for i in "${!CMDS[@]}"; do
        # shellcheck disable=SC2086 # the lists are numbers separated by spaces
        {
            read -r MED[$mode,$i] MIN[$mode,$i] MAX[$mode,$i] < <(stats ${TIMES[$mode,$i]})
            read -r RP[$mode,$i] _ _ < <(stats ${RP[$mode,$i]})
            read -r RX[$mode,$i] _ _ < <(stats ${RX[$mode,$i]})
        }
        echo "$mode ${NAMES[$i]}: ${TIMES[$mode,$i]}" >&2
    done
    LOAD[$mode]+=" → $(loadavg)"
done
declare -a RSS
for i in "${!CMDS[@]}"; do
    RSS[$i]=$(/usr/bin/time -f %M bash -c "${CMDS[$i]} >/dev/null" 2>&1 | tail -n 1)
done

# --- report ----------------------------------------------------------------------------
ratio() { awk -v r="$1" 'BEGIN { printf "%.2f×", r }'; }
echo
echo "dirhash benchmark: $WHAT: $FILES files, $((BYTES / 1024 / 1024)) MiB; $(nproc) cores;" \
     "medians of $RUNS cold and $WARM_RUNS warm runs, commands alternating in rounds;" \
     "cold = page cache dropped before every run; ratios = median of the per-round ratios"
for mode in $MODES; do echo "load average (1 min) over the $mode runs: ${LOAD[$mode]}"; done
echo
header="| command |" rule="|---|"
for mode in $MODES; do
    header+=" $mode median (s) | $mode min–max (s) | × pipeline | × xargs -P16 |"
    rule+="---:|---:|---:|---:|"
done
echo "$header peak RSS (MiB) |"
echo "$rule---:|"
for i in "${!CMDS[@]}"; do
    row="| ${NAMES[$i]} |"
    for mode in $MODES; do
        row+=" ${MED[$mode,$i]} | ${MIN[$mode,$i]}–${MAX[$mode,$i]} |"
        row+=" $(ratio "${RP[$mode,$i]}") | $(ratio "${RX[$mode,$i]}") |"
    done
    echo "$row $(awk -v k="${RSS[$i]}" 'BEGIN { printf "%.1f", k / 1024 }') |"
done

if [[ ${KEEP:-0} != 1 && $SMOKE == 1 && $TREE == "$BENCH_DIR"/* ]]; then
    rm -rf "$TREE"
    rmdir "$BENCH_DIR" 2>/dev/null || true
fi
