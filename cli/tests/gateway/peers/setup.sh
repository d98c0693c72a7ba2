#!/usr/bin/env bash
# Installs the MCP peers' dependencies next to this script: node_modules/ (npm ci from
# package-lock.json) and .venv/ (requirements.txt). Each step is skipped when its stamp
# matches the current lock/requirements. Quiet unless something fails. Safe to run
# concurrently (serialised with flock) and from any working directory.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$DIR"
PYTHON="${PYTHON:-python3}"

exec 9>"$DIR/.setup.lock"
flock 9

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

run() {
  if ! "$@" >"$LOG" 2>&1; then
    echo "setup.sh: failed: $*" >&2
    cat "$LOG" >&2
    exit 1
  fi
}

digest() { cat "$@" | sha256sum | cut -d' ' -f1; }

# Node: @modelcontextprotocol/sdk and zod.
NODE_STAMP=node_modules/.peers.stamp
node_want="$(node --version)-$(digest package.json package-lock.json)"
if [ "$(cat "$NODE_STAMP" 2>/dev/null || true)" != "$node_want" ]; then
  run npm ci --no-audit --no-fund --loglevel=error
  echo "$node_want" >"$NODE_STAMP"
fi

# Python: mcp in a local virtualenv.
PY_STAMP=.venv/.peers.stamp
py_want="$("$PYTHON" --version 2>&1 | tr ' ' '-')-$(digest requirements.txt)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$PY_STAMP" 2>/dev/null || true)" != "$py_want" ]; then
  rm -rf .venv
  run "$PYTHON" -m venv .venv
  run .venv/bin/pip install --disable-pip-version-check --no-input -q -r requirements.txt
  echo "$py_want" >"$PY_STAMP"
fi
