#!/usr/bin/env bash
# peers.sh - install (and later start/stop) third-party ResourceSync test peers.
#
# Usage:
#   scripts/peers.sh install   create $PEERS_DIR/venv and pip-install the pinned
#                              packages of scripts/peers-requirements.txt
#                              (skipped when already done for that file content)
#   scripts/peers.sh env       print export lines; use: eval "$(scripts/peers.sh env)"
#
# Settings (environment):
#   PEERS_DIR  root of everything this script creates
#              (default ${RSAGG_CACHE:-$HOME/.cache/rsagg}/peers)
#   PYTHON     interpreter used to create the venv (default python3)
#   PEERS_REQUIREMENTS  pinned package list (default scripts/peers-requirements.txt)
#
# Peers bind 127.0.0.1 only. Future start-* subcommands record one PID per
# peer in $PEERS_DIR/run/<name>.pid; stop kills exactly those PIDs.
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
cmd_install() {
  [[ -f $REQUIREMENTS ]] || die "requirements file not found: $REQUIREMENTS"
  mkdir -p "$PEERS_DIR" "$RUN_DIR" "$LOG_DIR"

  if [[ -x $VPY ]]; then
    log "venv present: $VENV"
  else
    log "creating venv: $PYTHON -m venv $VENV"
    "$PYTHON" -m venv "$VENV"
  fi

  local sum stamp
  sum=$(sha256_of "$REQUIREMENTS")
  stamp=$PEERS_DIR/.installed-$sum
  if [[ -f $stamp ]]; then
    log "packages up to date ($(basename "$stamp")); nothing to do"
    return 0
  fi

  log "pip install -r $REQUIREMENTS (log: $LOG_DIR/pip-install.log)"
  if ! "$VPY" -m pip install --disable-pip-version-check -r "$REQUIREMENTS" \
        >"$LOG_DIR/pip-install.log" 2>&1; then
    tail -n 20 "$LOG_DIR/pip-install.log" >&2 || true
    die "pip install failed (see $LOG_DIR/pip-install.log)"
  fi
  rm -f "$PEERS_DIR"/.installed-*
  : > "$stamp"
  log "installed: $(grep -vE '^[[:space:]]*(#|$)' "$REQUIREMENTS" | paste -sd' ' -)"
  log "wrote stamp $stamp"
}

# ---------------------------------------------------------------------------
# env
# ---------------------------------------------------------------------------
cmd_env() {   # values shell-quoted; $PATH is expanded by the eval-ing shell
  printf 'export RSAGG_PEERS_VENV=%q\n' "$VENV"
  printf 'export PATH=%q:$PATH\n' "$VENV/bin"
}

# ---------------------------------------------------------------------------
# dispatch: add start-<peer> / stop / status here as peers are added
# ---------------------------------------------------------------------------
main() {
  local cmd=${1:-}
  if (($#)); then shift; fi
  case $cmd in
    install) cmd_install "$@" ;;
    env)     cmd_env "$@" ;;
    -h|--help|help) usage 0 ;;
    '') usage ;;
    *) log "unknown subcommand: $cmd"; usage ;;
  esac
}

main "$@"
