#!/usr/bin/env bash
# build-release.sh - build the release binary `rsagg` (package rsagg-cli) and print its path.
#
#   bash scripts/build-release.sh [extra cargo build arguments]
#
# The project's one recipe for the shipped binary: the build stage of the container image
# (deploy/Containerfile) runs this script, and CI runs the very same script natively
# (scripts/deploy-check.sh, called by scripts/test.sh), since no container engine is
# available there. So what the image ships is built the way CI checks it.
#
# stdout: one line, the absolute path of the binary (so callers can do
#         bin=$(bash scripts/build-release.sh)); cargo's output goes to stderr.
#
# Settings (environment):
#   CARGO_TARGET_DIR    where cargo builds (default ${RSAGG_CACHE:-$HOME/.cache/rsagg}/target,
#                       as scripts/test.sh, so CI's release build shares its cache)
#   CARGO_BUILD_TARGET  a target triple, when cross-building (the path then includes it)
#   CARGO               the cargo to run (default cargo)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RSAGG_CACHE=${RSAGG_CACHE:-$HOME/.cache/rsagg}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$RSAGG_CACHE/target}
# cargo resolves a relative target directory against the working directory (here the
# repository root); print an absolute path either way.
[[ $CARGO_TARGET_DIR == /* ]] || CARGO_TARGET_DIR=$PWD/$CARGO_TARGET_DIR
CARGO=${CARGO:-cargo}

start=$(date +%s)
echo "[build-release] $("$CARGO" --version); target dir $CARGO_TARGET_DIR" >&2
# --locked: exactly the versions of Cargo.lock, as CI tests them (fails if the lock file
# is out of date instead of silently resolving anew).
"$CARGO" build --release --locked -p rsagg-cli "$@" >&2

bin=$CARGO_TARGET_DIR/${CARGO_BUILD_TARGET:+$CARGO_BUILD_TARGET/}release/rsagg
[[ -x $bin ]] || { echo "[build-release] ERROR: no executable at $bin" >&2; exit 1; }
echo "[build-release] built $bin in $(( $(date +%s) - start ))s" >&2
printf '%s\n' "$bin"
