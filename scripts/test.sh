#!/usr/bin/env bash
# The README's test command: install the peers the tests need (into a cache outside the
# clone), build and run every test of the workspace, check deploy/ (scripts/deploy-check.sh),
# then run each fuzz target briefly.
#
#   bash scripts/test.sh [extra cargo test arguments]
#
# Caches (reused across runs, safe to delete):
#   RSAGG_CACHE       default $HOME/.cache/rsagg
#   CARGO_TARGET_DIR  default $RSAGG_CACHE/target
#   PEERS_DIR         default $RSAGG_CACHE/peers (see scripts/peers.sh)
#   DEPLOY_VENV       default $RSAGG_CACHE/deploy-venv (see scripts/deploy-check.sh;
#                     DEPLOY_CHECK_SKIP_BUILD=1 skips its release build)
#   FUZZ_*            the fuzzing smoke run's caches and knobs (see scripts/fuzz.sh;
#                     FUZZ_SKIP=1 skips it, FUZZ_SECONDS sets the seconds per target)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RSAGG_CACHE=${RSAGG_CACHE:-$HOME/.cache/rsagg}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$RSAGG_CACHE/target}
mkdir -p "$RSAGG_CACHE"

start=$(date +%s)
bash scripts/peers.sh install
# RSAGG_PEERS_VENV, RSAGG_WEED, RSAGG_SIM_WRAPPER, RSAGG_WEBSUB_HUB and PATH for the
# end-to-end harness (tests/src/lib.rs), which starts and stops every peer itself on free
# loopback ports (tests/tests/e2e/*.rs of rsagg-e2e, notify.rs included, run as workspace tests)
eval "$(bash scripts/peers.sh env)"
echo "[test] peers ready after $(( $(date +%s) - start ))s" >&2

# Two cores here and in CI: two test threads.
cargo test --workspace --locked -- --test-threads=2 "$@"
echo "[test] workspace tests passed after $(( $(date +%s) - start ))s" >&2

# deploy/: hadolint on the Containerfile, kubernetes-validate on the manifests, and
# `rsagg check` of the ConfigMap's pipelines with the binary the tests just built. The
# release build of the container's build stage (scripts/build-release.sh) is left to
# `bash scripts/deploy-check.sh` alone, or to DEPLOY_CHECK_RSAGG= (empty) here: a second
# build of the whole tree, 11 minutes cold on 2 cores.
DEPLOY_CHECK_RSAGG=${DEPLOY_CHECK_RSAGG-$CARGO_TARGET_DIR/debug/rsagg} bash scripts/deploy-check.sh
echo "[test] deploy checks passed after $(( $(date +%s) - start ))s" >&2

# Fuzzing smoke run: each target of fuzz/ (the parsers of untrusted input) for 20 s, its
# inputs that once failed replayed first (scripts/fuzz.sh, fuzz/README.md).
if [[ ${FUZZ_SKIP:-0} != 1 ]]; then
  fuzz_start=$(date +%s)
  bash scripts/fuzz.sh smoke
  echo "[test] fuzz smoke run passed in $(( $(date +%s) - fuzz_start ))s" >&2
fi
echo "[test] all tests passed in $(( $(date +%s) - start ))s" >&2
