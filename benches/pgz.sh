#!/usr/bin/env bash
# Speed benchmark of examples/pgz/ against pigz and gzip: wall time, compressed size, peak RSS.
#
#   benches/pgz.sh            # >= 256 MB of the Rust toolchain's sysroot as one tar, 5 rounds
#   SMOKE=1 benches/pgz.sh    # quick check that everything works (32 MB of it, 2 rounds)
#
# Knobs (environment): LEVEL (default 6), THREADS (default 2; pgz and pigz get `-p THREADS`,
# gzip has one thread), RUNS (rounds, default 5; medians are reported), DATA (a file to
# compress instead of the sysroot tar), EXTRA (default 1: also time `pgz -9`, to show what
# pgz's backend gives at its best level against pigz's LEVEL; 0 leaves that row out).
#
# Data: a tar of every third regular file of `rustc --print sysroot`, in sorted order (shared
# libraries, rlibs, executables, HTML and JS documentation, sources: real mixed data), cached
# as target/pgz-bench/sysroot-every3.tar; if that comes out under 256 MB (a smaller
# toolchain), every file is taken. pigz, gzip and GNU time are installed with apt-get
# (`apt-get update` once first) where missing.
#
# It builds `--release --example pgz`, then checks every command's output before timing it:
# `gzip -t`, and `gzip -dc` restores the input byte for byte; pgz's output is also the same for
# `-p 1` and `-p THREADS`, and `pgz -d` restores it. Then it times the commands in rounds that
# alternate them (so that the load of other people on a shared machine falls on all of them
# alike), output to /dev/null, each under `/usr/bin/time -v` for its peak RSS, and prints a
# markdown table: median and min-max wall time, the median over the rounds of (time / pigz's
# time in the same round), compressed size and its ratio to pigz's, and the largest peak RSS
# over the rounds and its ratio to pigz's.
set -euo pipefail

cd "$(dirname "$0")/.."
SMOKE=${SMOKE:-0}
if [[ $SMOKE == 1 ]]; then
    : "${RUNS:=2}" "${SMOKE_MB:=32}"
else
    : "${RUNS:=5}"
fi
LEVEL=${LEVEL:-6}
THREADS=${THREADS:-2}
EXTRA=${EXTRA:-1}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
BENCH_DIR=$TARGET/pgz-bench

die() { echo "pgz.sh: $*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------------------
need=()
command -v pigz >/dev/null || need+=(pigz)
command -v gzip >/dev/null || need+=(gzip)
[[ -x /usr/bin/time ]] || need+=(time)
if ((${#need[@]})); then
    echo "installing ${need[*]} with apt-get" >&2
    apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2 ||
        die "cannot install ${need[*]}"
fi
[[ -n ${EPOCHREALTIME:-} ]] || die "bash 5 is needed (EPOCHREALTIME)"

# --- build -----------------------------------------------------------------------------
cargo build --release --example pgz >&2
BIN=$TARGET/release/examples/pgz
[[ -x $BIN ]] || die "$BIN was not built"

# --- data ------------------------------------------------------------------------------
mkdir -p "$BENCH_DIR"
if [[ -n ${DATA:-} ]]; then
    [[ -f $DATA ]] || die "$DATA is not a file"
    WHAT="$DATA"
else
    SYSROOT=$(rustc --print sysroot)
    make_tar() { # $1 = take every $1-th file, $2 = the tar
        (cd "$SYSROOT" && find . -type f | LC_ALL=C sort | awk -v n="$1" 'NR % n == 0') >"$2.list"
        tar -C "$SYSROOT" --no-recursion -cf "$2.tmp" -T "$2.list"
        rm -f "$2.list"
        mv "$2.tmp" "$2"
    }
    DATA=$BENCH_DIR/sysroot-every3.tar
    WHAT="a tar of every third file of the Rust sysroot ($(rustc --version))"
    if [[ ! -f $DATA ]]; then
        echo "making $DATA" >&2
        make_tar 3 "$DATA"
    fi
    if (($(stat -c %s "$DATA") < 256000000)); then
        DATA=$BENCH_DIR/sysroot-all.tar
        WHAT="a tar of the whole Rust sysroot ($(rustc --version))"
        [[ -f $DATA ]] || make_tar 1 "$DATA"
    fi
    if [[ $SMOKE == 1 ]]; then
        head -c $((SMOKE_MB * 1024 * 1024)) "$DATA" >"$BENCH_DIR/smoke.tar"
        DATA=$BENCH_DIR/smoke.tar
        WHAT="the first $SMOKE_MB MiB of $WHAT"
    fi
fi
BYTES=$(stat -c %s "$DATA")
((SMOKE == 1 || BYTES >= 256000000)) || die "$DATA has $BYTES bytes, fewer than 256 MB"

declare -a NAMES CMDS
add() { NAMES+=("$1"); CMDS+=("$2"); }
Q=$(printf %q "$DATA")
add "pgz -$LEVEL -p $THREADS" "$BIN -q -$LEVEL -p $THREADS -c $Q"
add "pigz -$LEVEL -p $THREADS" "pigz -$LEVEL -p $THREADS -c $Q"
add "gzip -$LEVEL (1 thread)" "gzip -$LEVEL -c $Q"
[[ $EXTRA == 1 && $LEVEL != 9 ]] && add "pgz -9 -p $THREADS" "$BIN -q -9 -p $THREADS -c $Q"
PGZ=0 PIGZ=1

# --- correctness gate ------------------------------------------------------------------
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -a SIZE
for i in "${!CMDS[@]}"; do
    echo "checking ${NAMES[$i]}" >&2
    bash -c "${CMDS[$i]}" >"$out/$i.gz" || die "${NAMES[$i]} failed"
    gzip -t "$out/$i.gz" || die "${NAMES[$i]}: gzip -t rejects the output"
    gzip -dc "$out/$i.gz" | cmp -s - "$DATA" || die "${NAMES[$i]}: gzip -dc does not restore the input"
    SIZE[$i]=$(stat -c %s "$out/$i.gz")
done
"$BIN" -q -$LEVEL -p 1 -c "$DATA" | cmp -s - "$out/$PGZ.gz" || die "pgz: -p 1 and -p $THREADS differ"
"$BIN" -q -dc "$out/$PGZ.gz" | cmp -s - "$DATA" || die "pgz -d does not restore the input"
rm -f "$out"/*.gz

# --- timing ----------------------------------------------------------------------------
# One timed run of command $1: prints "seconds peak_rss_kib".
timed() {
    local s e rss
    s=$EPOCHREALTIME
    /usr/bin/time -v -o "$out/time" bash -c "exec ${CMDS[$1]} >/dev/null" || die "${NAMES[$1]} failed"
    e=$EPOCHREALTIME
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$out/time")
    echo "$s $e $rss" | awk '{ printf "%.3f %d\n", $2 - $1, $3 }'
}
# median, min and max of the numbers given
stats() { printf '%s\n' "$@" | sort -g | awk '{ t[NR] = $1 } END {
    m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f\n", m, t[1], t[NR] }'; }
loadavg() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?'; }

declare -A TIMES RATIO RSS MED MIN MAX
LOAD=$(loadavg)
for ((r = 0; r < RUNS; r++)); do
    echo "round $((r + 1))/$RUNS" >&2
    declare -A ROUND=()
    for i in "${!CMDS[@]}"; do
        read -r t k < <(timed "$i")
        ROUND[$i]=$t
        TIMES[$i]+="$t "
        ((k > ${RSS[$i]:-0})) && RSS[$i]=$k
    done
    for i in "${!CMDS[@]}"; do
        RATIO[$i]+="$(awk -v a="${ROUND[$i]}" -v b="${ROUND[$PIGZ]}" 'BEGIN { print a / b }') "
    done
done
LOAD+=" → $(loadavg)"
for i in "${!CMDS[@]}"; do
    # shellcheck disable=SC2086 # the lists are numbers separated by spaces
    {
        read -r MED[$i] MIN[$i] MAX[$i] < <(stats ${TIMES[$i]})
        read -r RATIO[$i] _ _ < <(stats ${RATIO[$i]})
    }
    echo "${NAMES[$i]}: ${TIMES[$i]}" >&2
done

# --- report ----------------------------------------------------------------------------
cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || echo '?')
echo
echo "pgz benchmark: $WHAT, $BYTES bytes; level $LEVEL, $THREADS threads for pgz and pigz;" \
     "$(nproc) cores ($cpu); medians of $RUNS rounds, commands alternating;" \
     "× pigz = median of the per-round ratios; output to /dev/null"
echo "pigz $(pigz --version 2>&1 | awk '{ print $2 }'), $(gzip --version | head -n 1);" \
     "load average (1 min) over the runs: $LOAD"
echo
echo "| command | median (s) | min–max (s) | × pigz time | size (bytes) | × pigz size | peak RSS (MiB) | × pigz RSS |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for i in "${!CMDS[@]}"; do
    awk -v n="${NAMES[$i]}" -v med="${MED[$i]}" -v lo="${MIN[$i]}" -v hi="${MAX[$i]}" \
        -v tr="${RATIO[$i]}" -v sz="${SIZE[$i]}" -v psz="${SIZE[$PIGZ]}" \
        -v rss="${RSS[$i]}" -v prss="${RSS[$PIGZ]}" 'BEGIN {
        printf "| %s | %.2f | %.2f–%.2f | %.2f× | %d | %.4f× | %.1f | %.2f× |\n",
            n, med, lo, hi, tr, sz, sz / psz, rss / 1024, rss / prss }'
done
