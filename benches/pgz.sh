#!/usr/bin/env bash
# examples/pgz/ against pigz and gzip on real data: compressed size, wall, user and system time,
# page faults and peak RSS, for three kinds of data at several levels.
#
#   benches/pgz.sh            # 3 data sets of 64 MiB, levels 1, 6 and 9, 2 threads, 3 rounds
#   SMOKE=1 benches/pgz.sh    # a quick check that everything works (8 MiB, level 6, 1 round)
#
# Knobs (environment):
#   SIZE_MB   size of each data set in MiB (default 64; 8 with SMOKE=1)
#   LEVELS    the levels (default "1 6 9")
#   THREADS   `-p` of pgz and pigz (default 2); gzip has one thread
#   RUNS      rounds (default 3): the reported times are medians over the rounds
#   SETS      the data sets, of: sysroot text compressed (default all three)
#   DATA      a file to measure instead of the data sets (the set is then called "file")
#
# Data sets, made once and cached in target/pgz-bench/ (each a tar, cut at SIZE_MB MiB):
#   sysroot     the files of `rustc --print sysroot` in sorted order, sampled evenly along the
#               list so that any size mixes shared libraries, rlibs, executables, HTML/JS
#               documentation and sources
#   text        the Rust documentation under the sysroot's share/doc (.html .js .css .md .txt
#               .svg), sampled the same way; without it, the standard library's sources
#               (lib/rustlib/src, the rust-src component)
#   compressed  the .crate files (gzip'd tars) of cargo's registry cache, $CARGO_HOME/registry/
#               cache (all of them if there are fewer than SIZE_MB)
#
# It builds `--release --example pgz`, then checks every output before timing anything: `gzip -t`
# and `gzip -dc` restore the input byte for byte; pgz's output is also the same for `-p 1` and
# `-p THREADS`, and `pgz -d` and `pigz -d` restore it. Then it times the commands in rounds, pgz
# and pigz one after the other in an order that alternates from round to round, then gzip (so
# that the load of other people on a shared machine falls on all of them alike), output to
# /dev/null, each under `/usr/bin/time` (wall, user and system time, minor + major page faults,
# peak RSS). It prints a markdown table: per data set, level and command, the size and how much it
# differs from pigz's, the median wall time (min–max) and the median over the rounds of (wall time /
# pigz's in the same round), the median user and system time, page faults, and the largest peak
# RSS. pigz, gzip and GNU time are installed with apt-get where missing.
set -euo pipefail

cd "$(dirname "$0")/.."
SMOKE=${SMOKE:-0}
if [[ $SMOKE == 1 ]]; then
    : "${SIZE_MB:=8}" "${LEVELS:=6}" "${RUNS:=1}"
fi
SIZE_MB=${SIZE_MB:-64}
LEVELS=${LEVELS:-1 6 9}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
SETS=${SETS:-sysroot text compressed}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
BENCH_DIR=$TARGET/pgz-bench
BYTES_WANTED=$((SIZE_MB * 1024 * 1024))

die() { echo "pgz.sh: $*" >&2; exit 1; }
[[ $SIZE_MB =~ ^[1-9][0-9]*$ ]] || die "SIZE_MB must be a positive whole number of MiB"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive whole number"

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

# --- build -----------------------------------------------------------------------------
cargo build --release --example pgz >&2
BIN=$TARGET/release/examples/pgz
[[ -x $BIN ]] || die "$BIN was not built"

# --- data ------------------------------------------------------------------------------
mkdir -p "$BENCH_DIR"
# sample_tar ROOT REGEX OUT: a tar of files under ROOT whose path matches REGEX (sorted), taken
# evenly along the list until about BYTES_WANTED bytes, cut at BYTES_WANTED.
sample_tar() {
    local root=$1 re=$2 out=$3 list
    list=$(mktemp)
    (cd "$root" && find -L . -type f -regextype posix-extended -regex "$re" -printf '%s %p\n') |
        LC_ALL=C sort -k2 |
        awk -v want="$BYTES_WANTED" '{ size[NR] = $1; sub(/^[0-9]+ /, ""); name[NR] = $0; total += size[NR] }
            END { for (i = 1; i <= NR; i++) { seen += size[i]
                      if (took < want * seen / total) { took += size[i]; print name[i] } } }' >"$list"
    [[ -s $list ]] || die "no files matching $re under $root"
    # head ends the pipe early: tar's SIGPIPE is expected, the size is checked below.
    (tar -C "$root" --no-recursion -cf - -T "$list" 2>/dev/null || true) | head -c "$BYTES_WANTED" >"$out.tmp"
    rm -f "$list"
    [[ -s $out.tmp ]] || die "could not make $out"
    mv "$out.tmp" "$out"
}
declare -A FILE WHAT
SYSROOT=$(rustc --print sysroot)
CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
if [[ -n ${DATA:-} ]]; then
    [[ -f $DATA ]] || die "$DATA is not a file"
    SETS=file FILE[file]=$DATA WHAT[file]=$DATA
fi
for set in $SETS; do
    [[ $set == file ]] && continue
    out=$BENCH_DIR/$set-${SIZE_MB}M.tar
    case $set in
    sysroot)
        WHAT[$set]="the Rust sysroot, $(rustc --version | cut -d' ' -f1-2), files sampled evenly"
        [[ -f $out ]] || sample_tar "$SYSROOT" '.*' "$out" ;;
    text)
        if [[ -d $SYSROOT/share/doc/rust/html ]]; then
            WHAT[$set]="the Rust documentation (HTML, JS, CSS) of the sysroot's share/doc"
            [[ -f $out ]] || sample_tar "$SYSROOT/share/doc" '.*\.(html|js|css|md|txt|svg)' "$out"
        elif [[ -d $SYSROOT/lib/rustlib/src ]]; then
            WHAT[$set]="the Rust standard library's sources (lib/rustlib/src)"
            [[ -f $out ]] || sample_tar "$SYSROOT/lib/rustlib/src" '.*\.(rs|md|toml)' "$out"
        else
            die "no text corpus: neither the Rust docs nor rust-src is installed (SETS= without text)"
        fi ;;
    compressed)
        WHAT[$set]="the .crate files (gzip'd tars) of cargo's registry cache"
        [[ -d $CARGO_HOME/registry/cache ]] || die "no $CARGO_HOME/registry/cache (SETS= without compressed)"
        [[ -f $out ]] || sample_tar "$CARGO_HOME/registry/cache" '.*\.crate' "$out" ;;
    *) die "unknown data set $set (sysroot, text, compressed)" ;;
    esac
    FILE[$set]=$out
done

# --- commands --------------------------------------------------------------------------
TOOLS=(pgz pigz gzip)
# cmd TOOL LEVEL FILE: the command line that compresses FILE to stdout.
cmd() {
    local q
    q=$(printf %q "$3")
    case $1 in
    pgz) echo "$BIN -q -$2 -p $THREADS -c $q" ;;
    pigz) echo "pigz -$2 -p $THREADS -c $q" ;;
    gzip) echo "gzip -$2 -c $q" ;;
    esac
}

# --- correctness gate ------------------------------------------------------------------
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A SIZE
for set in $SETS; do
    f=${FILE[$set]}
    for level in $LEVELS; do
        for tool in "${TOOLS[@]}"; do
            echo "checking $tool -$level on $set" >&2
            gz=$out/$tool.gz
            bash -c "$(cmd "$tool" "$level" "$f")" >"$gz" || die "$tool -$level failed on $f"
            gzip -t "$gz" || die "$tool -$level: gzip -t rejects the output"
            gzip -dc "$gz" | cmp -s - "$f" || die "$tool -$level: gzip -dc does not restore $f"
            SIZE[$set,$level,$tool]=$(stat -c %s "$gz")
        done
        gz=$out/pgz.gz
        "$BIN" -q "-$level" -p 1 -c "$f" | cmp -s - "$gz" || die "pgz -$level: -p 1 and -p $THREADS differ"
        "$BIN" -q -dc "$gz" | cmp -s - "$f" || die "pgz -$level: pgz -d does not restore $f"
        pigz -dc "$gz" | cmp -s - "$f" || die "pgz -$level: pigz -d does not restore $f"
    done
done
rm -f "$out"/*.gz

# --- timing ----------------------------------------------------------------------------
# One timed run: prints "wall user sys faults rss_kib".
timed() {
    /usr/bin/time -f '%e %U %S %R %F %M' -o "$out/time" bash -c "exec $1 >/dev/null" ||
        die "$1 failed"
    awk '{ print $1, $2, $3, $4 + $5, $6 }' "$out/time"
}
# median, min and max of the numbers given
stats() { printf '%s\n' "$@" | sort -g | awk '{ t[NR] = $1 } END {
    m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
    print m, t[1], t[NR] }'; }
loadavg() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?'; }

declare -A WALL USER SYS FAULTS RSS RATIO
LOAD=$(loadavg)
START=$EPOCHSECONDS
for ((r = 0; r < RUNS; r++)); do
    echo "round $((r + 1))/$RUNS" >&2
    order=(pgz pigz gzip)
    ((r % 2)) && order=(pigz pgz gzip)
    for set in $SETS; do
        for level in $LEVELS; do
            declare -A ROUND=()
            for tool in "${order[@]}"; do
                k=$set,$level,$tool
                t=$(timed "$(cmd "$tool" "$level" "${FILE[$set]}")")
                read -r w u s flt kib <<<"$t"
                ROUND[$tool]=$w
                WALL[$k]+="$w " USER[$k]+="$u " SYS[$k]+="$s " FAULTS[$k]+="$flt "
                ((kib > ${RSS[$k]:-0})) && RSS[$k]=$kib
            done
            for tool in "${TOOLS[@]}"; do
                RATIO[$set,$level,$tool]+="$(awk -v a="${ROUND[$tool]}" -v b="${ROUND[pigz]}" 'BEGIN { print a / b }') "
            done
        done
    done
done
LOAD+=" → $(loadavg)"

# --- report ----------------------------------------------------------------------------
cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || echo '?')
echo
echo "pgz benchmark: $THREADS threads for pgz and pigz (gzip: 1); levels $LEVELS; medians of $RUNS rounds," \
     "pgz and pigz alternating; × pigz = median of the per-round ratios; output to /dev/null;" \
     "$(nproc) cores ($cpu); load average (1 min) $LOAD; $((EPOCHSECONDS - START)) s of timing"
echo "pigz $(pigz --version 2>&1 | awk '{ print $2 }'), $(gzip --version | head -n 1)"
echo
for set in $SETS; do
    echo "- $set: ${WHAT[$set]}, $(stat -c %s "${FILE[$set]}") bytes"
done
echo
echo "| data | level | command | size (bytes) | vs pigz size | wall (s) | min–max (s) | × pigz wall | user (s) | sys (s) | page faults | peak RSS (MiB) |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for set in $SETS; do
    for level in $LEVELS; do
        for tool in "${TOOLS[@]}"; do
            k=$set,$level,$tool
            # shellcheck disable=SC2086 # the lists are numbers separated by spaces
            {
                read -r wm wlo whi < <(stats ${WALL[$k]})
                read -r tr _ _ < <(stats ${RATIO[$k]})
                read -r um _ _ < <(stats ${USER[$k]})
                read -r sm _ _ < <(stats ${SYS[$k]})
                read -r fm _ _ < <(stats ${FAULTS[$k]})
            }
            name="$tool -$level"
            [[ $tool != gzip ]] && name+=" -p $THREADS"
            awk -v d="$set" -v l="$level" -v n="$name" -v sz="${SIZE[$k]}" -v psz="${SIZE[$set,$level,pigz]}" \
                -v wm="$wm" -v wlo="$wlo" -v whi="$whi" -v tr="$tr" -v um="$um" -v sm="$sm" \
                -v fm="$fm" -v rss="${RSS[$k]}" 'BEGIN {
                printf "| %s | %s | %s | %d | %+.2f %% | %.2f | %.2f–%.2f | %.2f× | %.2f | %.2f | %d | %.1f |\n",
                    d, l, n, sz, (sz / psz - 1) * 100, wm, wlo, whi, tr, um, sm, fm, rss / 1024 }'
        done
    done
done
