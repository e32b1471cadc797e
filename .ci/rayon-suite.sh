#!/usr/bin/env bash
# rayon's own test suite (its unit, integration and doc tests, in release) on treepool: a copy of
# rayon's source from the registry, with its rayon-core patched to this repository's
# compatibility crate (rayon-core/). Fails if a test fails, if the patched build does not put
# rayon on treepool, or if fewer tests ran than rayon 1.12 has. First, fmt and clippy for the
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

fixture=(--manifest-path tests/rayon-compat/Cargo.toml)
cargo fetch "${fixture[@]}" --quiet
registry_manifest=$(cargo metadata "${fixture[@]}" --format-version 1 |
    grep -o '"manifest_path":"[^"]*/rayon-1\.12\.[0-9]*/Cargo.toml"' | head -n 1 | cut -d'"' -f4)
[ -n "$registry_manifest" ] || { echo "rayon 1.12 is not in tests/rayon-compat's graph" >&2; exit 1; }
source_dir=$(dirname "$registry_manifest")
rayon=$dir/$(basename "$source_dir")

# The registry's files, copied once (their times kept, so cargo's fingerprints hold between
# runs); the manifest gets the patch and a [workspace] of its own (it lies under this one's).
if [ ! -f "$rayon/Cargo.toml.orig" ]; then
    rm -rf "$rayon"
    mkdir -p "$dir"
    cp -a "$source_dir" "$rayon.tmp"
    mv "$rayon.tmp" "$rayon"
fi
manifest="$(cat "$source_dir/Cargo.toml")
[patch.crates-io]
rayon-core = { path = \"$root/rayon-core\" }

[workspace]"
if [ "$(cat "$rayon/Cargo.toml")" != "$manifest" ]; then
    printf '%s\n' "$manifest" >"$rayon/Cargo.toml"
fi

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

log=$dir/test.log
status=0
cargo test "${suite[@]}" --release 2>&1 | tee "$log" || status=$?
passed=$(grep -o '^test result: ok\. [0-9]* passed' "$log" | awk '{s += $4} END {print s + 0}')
echo "rayon's suite on treepool: $passed tests passed (status $status)"
[ "$status" -eq 0 ] || exit "$status"
[ "$passed" -ge "$min_tests" ] || { echo "expected at least $min_tests tests" >&2; exit 1; }
