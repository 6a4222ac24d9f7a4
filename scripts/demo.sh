#!/usr/bin/env bash
# The README's first command: the main job on the embedded default.
#
# Builds rsagg, starts the bundled sample upstream on loopback (scripts/demo_upstream.py:
# a ResourceSync Source with a Resource List, a Change List and 40 resources), harvests it
# with pipelines/demo.toml into a local file store (baseline, then the changes), runs the
# same pipeline again to show that nothing is fetched twice, validates the Resource List
# rsagg published from its copies, and prints where to look. (Serving it, and the rest of
# republishing, arrive with the "Republish" issue.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RSAGG_CACHE=${RSAGG_CACHE:-$HOME/.cache/rsagg}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$RSAGG_CACHE/target}
cargo build --release --locked -p rsagg-cli
rsagg=$CARGO_TARGET_DIR/release/rsagg
out=${DEMO_DIR:-$RSAGG_CACHE/demo}
rm -rf "$out"
mkdir -p "$out"

python3 scripts/demo_upstream.py "$out/upstream" >"$out/upstream.log" 2>&1 &
upstream_pid=$!
trap 'kill "$upstream_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q '^listening ' "$out/upstream.log" 2>/dev/null && break
  sleep 0.1
done
RSAGG_DEMO_UPSTREAM=$(sed -n 's/^listening //p' "$out/upstream.log")
[ -n "$RSAGG_DEMO_UPSTREAM" ] || { cat "$out/upstream.log"; exit 1; }
export RSAGG_DEMO_UPSTREAM RSAGG_DEMO_STORE="file://$out/store"

echo "== sample upstream: $RSAGG_DEMO_UPSTREAM/.well-known/resourcesync"
"$rsagg" check pipelines/demo.toml
echo
echo "== rsagg run pipelines/demo.toml (baseline from the Resource List, then the Change List)"
RSAGG_LOG=${RSAGG_LOG:-warn,rsagg_pipeline=info} "$rsagg" run pipelines/demo.toml --once
echo
echo "== again: every change is recognised as already processed, nothing is fetched twice"
"$rsagg" run pipelines/demo.toml --once --json >"$out/second-run.json"
cat "$out/second-run.json"
echo
echo "== the Resource List rsagg published from its copies (own URIs, via links), judged strictly"
"$rsagg" validate --strict "$out/store/resourcelist.xml"
echo
echo "Where to look:"
echo "  $out/store/resourcelist.xml   rsagg's own Resource List (serving it arrives with \"Republish\")"
echo "  $out/store/blobs/sha256/   the verified copies, content-addressed by SHA-256"
echo "  $out/store/state/          the collection's state (records, change log, checkpoints)"
echo "  $out/second-run.json       the run report as JSON (rsagg run --json)"
echo "  $out/store/stats/last-run.json   what the last run left for the status page"
echo "  $rsagg validate $RSAGG_DEMO_UPSTREAM/changelist.xml   (while the upstream runs)"
