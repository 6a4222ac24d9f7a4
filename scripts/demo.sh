#!/usr/bin/env bash
# The README's first command.
#
# Until the harvest/republish pipeline lands (issues "Harvest" and "Republish"), the demo
# builds rsagg and runs its validator, in both modes, on bundled ResourceSync documents:
# a spec example, a change-notification Capability List, and a Change List the demo
# generates with rsagg's own writer. It prints where to look. It will grow into: bundled
# sample upstream on loopback -> harvest -> file object store -> republish -> serve.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RSAGG_CACHE=${RSAGG_CACHE:-$HOME/.cache/rsagg}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$RSAGG_CACHE/target}
cargo build --release --locked -p rsagg-cli -p rsagg-bench
bin=$CARGO_TARGET_DIR/release
out=${DEMO_DIR:-$RSAGG_CACHE/demo}
mkdir -p "$out"

echo
echo "== a Change List written by rsagg (50,000 entries), judged strictly =="
"$bin/rsagg-bench" write --kind changelist --entries 50000 --path "$out/changelist.xml" >/dev/null
"$bin/rsagg" validate --strict "$out/changelist.xml"

for f in tests/fixtures/notification-1.0.1/cn_ex_7.xml tests/fixtures/spec-1.1/resourcesync_ex_27.xml; do
  echo
  echo "== $f, lenient (upstream) =="
  "$bin/rsagg" validate "$f" || true
  echo "== $f, strict (own output) =="
  "$bin/rsagg" validate --strict "$f" || true
done

echo
echo "Where to look:"
echo "  $out/changelist.xml                 a Change List written by rsagg"
echo "  $bin/rsagg validate --json FILE|URL machine-readable report (exit 0 valid, 1 invalid, 2 I/O)"
echo "  tests/fixtures/                     every example of both specifications"
