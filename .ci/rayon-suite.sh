#!/usr/bin/env bash
# rayon's own test suite (its unit, integration and doc tests, in release) on treepool: a copy of
# rayon's source from the registry, with its rayon-core patched to this repository's
# compatibility crate (rayon-core/); then rayon-core's own integration tests on that crate.
# Fails if a test fails, if the patched build does not put rayon on treepool, or if fewer tests
# ran than rayon 1.12 and rayon-core 1.13 have. First, fmt and clippy for the
# crates of this repository that are not members of its workspace (the compat crate and the
# rayon programs built on it).
#
# The rayon version is the one tests/rayon-compat/Cargo.lock pins (1.12.x); cargo fetches its
# source and its dev-dependencies from crates.io. Everything builds in one target directory of
# its own ($RAYON_SUITE_DIR, default target/rayon-suite), so a rerun only runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=${RAYON_SUITE_DIR:-$root/target/rayon-suite}
# rayon 1.12.0's suite: 217 unit tests, 115 in its 16 integration test files, 246 doc tests.
min_tests=578

# The registry source of the package whose folder matches $2 (a regex) in the graph of the
# crate whose manifest is $1, fetched from crates.io if needed.
registry_source() {
    cargo fetch --manifest-path "$1" --quiet
    local manifest
    manifest=$(cargo metadata --manifest-path "$1" --format-version 1 |
        grep -o "\"manifest_path\":\"[^\"]*/$2/Cargo.toml\"" | head -n 1 | cut -d'"' -f4)
    [ -n "$manifest" ] || { echo "$2 is not in the graph of $1" >&2; return 1; }
    dirname "$manifest"
}

# Writes $2 to the file $1 unless it holds it already (an unchanged time keeps cargo's cache).
write_if_changed() {
    [ -f "$1" ] && [ "$(cat "$1")" = "$2" ] || printf '%s\n' "$2" >"$1"
}

# Runs `cargo test` with the arguments after $2 and fails unless every test passed and at
# least $2 ran; $1 names the suite.
run_suite() {
    local name=$1 min=$2 log status=0 passed
    shift 2
    log=$dir/${name//[^a-z0-9]/-}.log
    cargo test "$@" 2>&1 | tee "$log" || status=$?
    passed=$(grep -o '^test result: ok\. [0-9]* passed' "$log" | awk '{s += $4} END {print s + 0}')
    echo "$name on treepool: $passed tests passed (status $status)"
    [ "$status" -eq 0 ] || exit "$status"
    [ "$passed" -ge "$min" ] || { echo "$name: expected at least $min tests" >&2; exit 1; }
}

source_dir=$(registry_source tests/rayon-compat/Cargo.toml 'rayon-1\.12\.[0-9]*')
rayon=$dir/$(basename "$source_dir")

# The registry's files, copied once (their times kept, so cargo's fingerprints hold between
# runs); the manifest gets the patch and a [workspace] of its own (it lies under this one's).
if [ ! -f "$rayon/Cargo.toml.orig" ]; then
    rm -rf "$rayon"
    mkdir -p "$dir"
    cp -a "$source_dir" "$rayon.tmp"
    mv "$rayon.tmp" "$rayon"
fi
write_if_changed "$rayon/Cargo.toml" "$(cat "$source_dir/Cargo.toml")
[patch.crates-io]
rayon-core = { path = \"$root/rayon-core\" }

[workspace]"

export CARGO_TARGET_DIR=$dir/target
# The crates outside treepool's workspace, which the workspace's fmt and clippy steps miss.
for crate in rayon-core tests/rayon-compat benches/rayon benches/rayon/on-treepool; do
    cargo fmt --check --manifest-path "$crate/Cargo.toml"
    cargo clippy --quiet --all-targets --manifest-path "$crate/Cargo.toml" -- -D warnings
done

suite=(--manifest-path "$rayon/Cargo.toml")
# rayon's rayon-core must be this repository's crate, and rayon must depend on treepool through it.
core=$(cargo tree "${suite[@]}" --edges normal --invert rayon-core --depth 0 --prefix none)
[[ $core == "rayon-core v1.13."*" ($root/rayon-core)" ]] ||
    { echo "rayon's rayon-core is not the compat crate: $core" >&2; exit 1; }
cargo tree "${suite[@]}" --edges normal --invert treepool --prefix none | grep -q '^rayon v1\.12\.' ||
    { echo "rayon does not depend on treepool" >&2; exit 1; }

run_suite "rayon's suite" "$min_tests" "${suite[@]}" --release

# rayon-core 1.13's own integration tests (its unit tests test its internals), on the compat
# crate: a crate of their files and their dev-dependencies, rayon-core patched as above.
core_source=$(registry_source benches/rayon/Cargo.toml 'rayon-core-1\.13\.[0-9]*')
core_tests=$dir/rayon-core-tests
mkdir -p "$core_tests/src"
[ -f "$core_tests/src/lib.rs" ] || : >"$core_tests/src/lib.rs"
rm -rf "$core_tests/tests"
cp -a "$core_source/tests" "$core_tests/tests"
write_if_changed "$core_tests/Cargo.toml" "[package]
name = \"rayon-core-tests\"
version = \"0.0.0\"
edition = \"2021\"
publish = false

[dependencies]
rayon-core = \"1.13\"

[dev-dependencies]
crossbeam-utils = \"0.8\"
libc = \"0.2\"
rand = \"0.9\"
rand_xorshift = \"0.4\"
scoped-tls = \"1.0\"

[patch.crates-io]
rayon-core = { path = \"$root/rayon-core\" }

[workspace]"
# rayon-core 1.13.0: 7 files, 11 tests, 2 of them ignored by rayon-core itself.
run_suite "rayon-core's integration tests" 9 --manifest-path "$core_tests/Cargo.toml" --release --tests
