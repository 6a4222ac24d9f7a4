#!/usr/bin/env bash
# The README's first command: the main job on the embedded default.
#
# Builds rsagg, starts the bundled sample upstreams on loopback (scripts/demo_upstream.py:
# a ResourceSync Source with a Resource List, a Change List and 40 resources, and an OAI-PMH
# repository of 12 records), harvests both into one collection with pipelines/demo.toml in a
# local file store (baseline, then the changes), runs the
# same pipeline again to show that nothing is fetched twice, republishes the collection
# (Capability List, Resource List, Change Lists, dumps — every document judged strictly),
# serves it with `rsagg serve`, fetches a few URLs from the server, and prints where to look.
# It then keeps serving until Ctrl-C (DEMO_EXIT=1: stop right after the checks). The
# environment the pipeline was run with is left in $DEMO_DIR/demo.env, and the operator
# commands (audit, --dry-run, quarantine, gc, serve) are printed as they work on that store.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Absolute and normalised (no `.`, `..` or doubled `/`): the operator commands printed at
# the end work from any directory, and every path printed is the plain path.
abspath() { python3 -c 'import os, sys; print(os.path.abspath(sys.argv[1]))' "$1"; }
RSAGG_CACHE=$(abspath "${RSAGG_CACHE:-$HOME/.cache/rsagg}")
CARGO_TARGET_DIR=$(abspath "${CARGO_TARGET_DIR:-$RSAGG_CACHE/target}")
export RSAGG_CACHE CARGO_TARGET_DIR
cargo build --release --locked -p rsagg-cli
rsagg=$CARGO_TARGET_DIR/release/rsagg
out=$(abspath "${DEMO_DIR:-$RSAGG_CACHE/demo}")
rm -rf "$out"
mkdir -p "$out"

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
python3 scripts/demo_upstream.py "$out/upstream" >"$out/upstream.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q '^listening ' "$out/upstream.log" 2>/dev/null && break
  sleep 0.1
done
RSAGG_DEMO_UPSTREAM=$(sed -n 's/^listening //p' "$out/upstream.log")
[ -n "$RSAGG_DEMO_UPSTREAM" ] || { cat "$out/upstream.log"; exit 1; }
# The port rsagg serves on is part of its documents' URIs (collection.base_url), so it is
# chosen before the run: a free one unless RSAGG_DEMO_PORT says otherwise.
RSAGG_DEMO_PORT=${RSAGG_DEMO_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
export RSAGG_DEMO_UPSTREAM RSAGG_DEMO_PORT RSAGG_DEMO_STORE="file://$out/store"
base="http://127.0.0.1:$RSAGG_DEMO_PORT/demo/"
# pipelines/demo.toml reads these three; the operator commands printed at the end need the
# same values, so they are kept in a file that `set -a; . FILE; set +a` loads.
envfile="$out/demo.env"
{
  echo "# The environment scripts/demo.sh ran pipelines/demo.toml with."
  echo "# Load it with: set -a; . $envfile; set +a"
  printf 'RSAGG_DEMO_UPSTREAM=%q\nRSAGG_DEMO_PORT=%q\nRSAGG_DEMO_STORE=%q\n' \
    "$RSAGG_DEMO_UPSTREAM" "$RSAGG_DEMO_PORT" "$RSAGG_DEMO_STORE"
} >"$envfile"

echo "== sample upstreams: $RSAGG_DEMO_UPSTREAM/.well-known/resourcesync (ResourceSync) and $RSAGG_DEMO_UPSTREAM/oai (OAI-PMH)"
"$rsagg" check pipelines/demo.toml
echo
echo "== rsagg run pipelines/demo.toml (harvest: baseline from the Resource List, then the Change List; then publish)"
echo "   (the sample updated res/3.txt and deleted res/5.txt after writing its Resource List, as a live"
echo "   Source does: the 'changed after the Resource List's at' line below is rsagg leaving those to"
echo "   the Change List, whose word is the upstream's current state)"
RSAGG_LOG=${RSAGG_LOG:-warn,rsagg_pipeline=info,rsagg_harvest=info,rsagg_publish=info,rsagg_notify=info,rsagg_layout=info} "$rsagg" run pipelines/demo.toml --once
echo
echo "== again: every change is recognised as already processed, nothing is fetched twice"
"$rsagg" run pipelines/demo.toml --once --json >"$out/second-run.json"
cat "$out/second-run.json"
echo
echo "== every document rsagg published, judged strictly"
(cd "$out/store" && find . -name '*.xml' -not -path './state/*' | sort) | while read -r doc; do
  doc=${doc#./}
  printf '%-48s ' "$doc"
  "$rsagg" validate --strict "$out/store/$doc" | tail -1
done
echo
echo "== rsagg serve pipelines/demo.toml --listen 127.0.0.1:$RSAGG_DEMO_PORT"
"$rsagg" serve pipelines/demo.toml --listen "127.0.0.1:$RSAGG_DEMO_PORT" >"$out/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q '^listening ' "$out/serve.log" 2>/dev/null && break
  sleep 0.1
done
grep '^listening ' "$out/serve.log" || { cat "$out/serve.log"; exit 1; }
python3 - "$base" <<'PY'
import sys, urllib.request
base = sys.argv[1]
origin = base.split("/demo/")[0]
for url in [origin + "/.well-known/resourcesync", base, base + "capabilitylist.xml",
            base + "resourcelist.xml", base + "changelist.xml"]:
    with urllib.request.urlopen(url) as r:
        print(f"  GET {url} -> {r.status} {r.headers['Content-Type']}, {len(r.read())} bytes")
PY
if [ "${DEMO_EXIT:-0}" = 1 ]; then
  # Stop the servers now, so that what follows says what is true.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
  echo
  echo "Where to look (DEMO_EXIT=1: the sample upstream and rsagg serve have stopped; the"
  echo "URLs below answer again once the serve command further down runs):"
else
  echo
  echo "Where to look (served while this script runs):"
fi
echo "  $(dirname "$base")/.well-known/resourcesync"
echo "      the Source Description: start here with any ResourceSync Destination, e.g."
# The reference Destination, as it can be run here: on PATH, else from the test peers' venv
# (scripts/peers.sh install), else installed from PyPI first.
peers_resync="${RSAGG_CACHE:-$HOME/.cache/rsagg}/peers/venv/bin/resync-sync"
if command -v resync-sync >/dev/null 2>&1; then
  resync_cmd=resync-sync
elif [ -x "$peers_resync" ]; then
  resync_cmd=$peers_resync
else
  resync_cmd="python3 -m pip install resync==2.0.1 && resync-sync"
fi
echo "      $resync_cmd --baseline ${base%/} /tmp/demo-copy"
echo "  ${base}$(printf '%21s')the collection's base URL: a page pointing to the documents below"
echo "  ${base}capabilitylist.xml   what rsagg republishes of the collection"
echo "  ${base}resourcelist.xml     its Resource List (own URIs, via links to the upstream)"
echo "  ${base}changelist.xml       its Change List (changelist-open.xml: the open one)"
echo "  ${base}resourcedump.xml     its Resource Dump (ZIP packages with manifests)"
echo "  $(dirname "$base")/status   the status page (last run, upstreams, quarantine); /metrics for Prometheus"
echo "  $out/store/                 the file object store: blobs/ (copies by SHA-256), state/, documents"
echo "  $out/second-run.json        the second run's report (rsagg run --json)"
echo
echo "Operator commands on the demo's store (docs/contract.md, Operator commands), from any"
echo "directory; the pipeline reads RSAGG_DEMO_* from the environment, kept in $envfile:"
echo
# Quoted for the shell they are pasted into (a path with a space stays one word).
q() { printf '%q' "$1"; }
demo_toml=$(q "$PWD/pipelines/demo.toml")
rsagg_cmd=$(q "$rsagg")
echo "  set -a; . $(q "$envfile"); set +a"
if [ "${DEMO_EXIT:-0}" = 1 ]; then
  echo "  # audit and --dry-run read the upstream's lists: start the sample upstream again (same port)"
  echo "  python3 $(q "$PWD/scripts/demo_upstream.py") $(q "$out/upstream") --port ${RSAGG_DEMO_UPSTREAM##*:} >$(q "$out/upstream.log") 2>&1 & upstream=\$!"
fi
echo "  $rsagg_cmd audit $demo_toml"
echo "  $rsagg_cmd run $demo_toml --dry-run"
echo "  $rsagg_cmd quarantine list $demo_toml"
echo "  $rsagg_cmd gc $demo_toml"
if [ "${DEMO_EXIT:-0}" = 1 ]; then
  echo "  $rsagg_cmd serve $demo_toml --listen 127.0.0.1:$RSAGG_DEMO_PORT   # Ctrl-C stops it"
  echo "  kill \$upstream   # the sample upstream"
  exit 0
fi
echo "  $rsagg_cmd serve $demo_toml --listen 127.0.0.1:$RSAGG_DEMO_PORT   # after this script stops serving"
echo
echo "Serving until Ctrl-C."
wait "${pids[-1]}"
