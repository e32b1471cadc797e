#!/usr/bin/env bash
# Renders a trace_view page (or a trace, through examples/trace_view) to a PNG with headless
# Chromium, to look at the picture as a person would, without a desktop.
#
#   benches/trace_picture.sh PAGE.html [OUT.png] [WIDTHxHEIGHT]
#   benches/trace_picture.sh TRACE.json [OUT.png] [WIDTHxHEIGHT]   # runs trace_view first
#
# OUT.png defaults to the input's path with .png; the window defaults to 1600x900 (the page's
# default width; what does not fit is cut off, so pass a taller window for traces with many
# workers). Needs Chromium at /usr/bin/chromium or on PATH (Debian: apt-get install chromium).
# Chromium runs with a throw-away profile and with its background networking off: the page
# fetches nothing, and the picture must not depend on the network.
set -euo pipefail

[[ $# -ge 1 && $# -le 3 ]] || { sed -n '2,11p' "$0" >&2; exit 2; }
input="$1"
out="${2:-${input%.*}.png}"
window="${3:-1600x900}"
[[ -f "$input" ]] || { echo "trace_picture: no such file: $input" >&2; exit 1; }
chromium="$(command -v chromium || command -v chromium-browser || true)"
[[ -n "$chromium" ]] || { echo "trace_picture: chromium not found (apt-get install chromium)" >&2; exit 1; }

page="$input"
if [[ "$input" != *.html ]]; then
    page="${input%.*}.html"
    cargo run --quiet --release --manifest-path "$(dirname "$0")/../Cargo.toml" \
        --example trace_view -- "$input" -o "$page" >/dev/null
fi

profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --screenshot="$(realpath -m "$out")" \
    --window-size="${window/x/,}" "file://$(realpath "$page")" 2>/dev/null
[[ -s "$out" ]] || { echo "trace_picture: chromium wrote no picture" >&2; exit 1; }
echo "$out"
