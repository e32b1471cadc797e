# Sourced by the side-by-side bench scripts (benches/spawn_shapes.sh, benches/blocking_leaves.sh):
# the knobs they share and the loop that runs a criterion bench ROUNDS times.
#
#   criterion_rounds BENCH GROUP_GLOB RESULTS [criterion args...]
#
# Builds bench BENCH, then runs it ROUNDS times (ROUNDS from the environment, default 1). After
# each round it writes RESULTS/round-N: one line "<group> <function> <median ns>" per criterion
# function whose estimates.json that round wrote and whose group matches GROUP_GLOB, in the
# order the bench wrote them; a hook function `after_round N`, if the caller defines one, runs
# next. Sets ROUNDS, OUT (default docs/benchmarks.md), quick (non-empty for
# TREEPOOL_BENCH_QUICK=1) and target_dir (cargo's target directory, CARGO_TARGET_DIR honoured).
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-docs/benchmarks.md}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$ROUNDS: expected a positive integer" >&2; exit 2; }
quick=${TREEPOOL_BENCH_QUICK:-0}
[[ $quick == 0 ]] && quick=
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

criterion_rounds() {
    local bench=$1 glob=$2 results=$3
    shift 3
    rm -rf "$results"
    mkdir -p "$results"
    cargo bench --no-run --bench "$bench"
    local round
    for round in $(seq "$ROUNDS"); do
        echo "=== $bench, round $round/$ROUNDS${quick:+ (quick)}" >&2
        touch "$results/start"
        cargo bench -q --bench "$bench" -- "$@"
        find "$target_dir/criterion" -path "*/$glob/*/new/estimates.json" -newer "$results/start" \
            -printf '%T@ %p\n' | sort -n | while read -r _ path; do
            local fn_dir
            fn_dir=$(dirname "$(dirname "$path")")
            median=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$path")
            echo "$(basename "$(dirname "$fn_dir")") $(basename "$fn_dir") $median"
        done >"$results/round-$round"
        [[ -s "$results/round-$round" ]] || { echo "round $round wrote no $glob results" >&2; exit 1; }
        if declare -F after_round >/dev/null; then after_round "$round"; fi
    done
}
