#!/usr/bin/env bash
# Run the end-to-end suites: the official OpenSandbox SDKs (JS and Python, pinned
# and unchanged) against a running hybox server.
#
# Usage: HYBOX_E2E_URL=http://127.0.0.1:18080 OPEN_SANDBOX_API_KEY=... e2e/run.sh [all|js|python]
#
# The kind of sandbox under test: HYBOX_E2E_IMAGE (default wasm://default) and
# HYBOX_E2E_RUNTIME (empty = none; else sent as extensions["hybox.io/runtime"]),
# e.g. HYBOX_E2E_IMAGE=localhost/hybox/python:3-bookworm HYBOX_E2E_RUNTIME=runsc.
#
# Installs dependencies idempotently (npm ci into e2e/js/node_modules, a venv at
# e2e/python/.venv), then runs the selected suites. Exits non-zero if any suite fails
# or if the server does not answer GET /health.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
which_suites="${1:-all}"

: "${HYBOX_E2E_URL:?set HYBOX_E2E_URL, e.g. http://127.0.0.1:18080}"
: "${OPEN_SANDBOX_API_KEY:?set OPEN_SANDBOX_API_KEY}"
: "${HYBOX_E2E_IMAGE:=wasm://default}"
: "${HYBOX_E2E_RUNTIME:=}"
export HYBOX_E2E_URL OPEN_SANDBOX_API_KEY HYBOX_E2E_IMAGE HYBOX_E2E_RUNTIME

log() { printf '[e2e] %s\n' "$*" >&2; }

stamp_of() { sha256sum "$1" | cut -d' ' -f1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root for: $*"; return 1
  fi
}

install_js() {
  local dir="$here/js" want have=""
  command -v npm >/dev/null || { log "npm not found"; return 1; }
  want="$(stamp_of "$dir/package-lock.json")"
  [ -f "$dir/node_modules/.hybox-stamp" ] && have="$(cat "$dir/node_modules/.hybox-stamp")"
  if [ "$want" != "$have" ]; then
    log "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$dir/node_modules/.hybox-stamp"
  fi
}

python_bin() {
  if command -v python3 >/dev/null; then echo python3; else
    log "python3 not found; installing"
    as_root apt-get update -qq && as_root apt-get install -y -qq python3 python3-venv >/dev/null
    echo python3
  fi
}

install_python() {
  local dir="$here/python" venv="$here/python/.venv" py want have=""
  py="$(python_bin)"
  want="$(stamp_of "$dir/requirements.txt")"
  [ -f "$venv/.hybox-stamp" ] && have="$(cat "$venv/.hybox-stamp")"
  [ "$want" = "$have" ] && [ -x "$venv/bin/python" ] && return 0
  rm -rf "$venv"
  if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
    # Debian ships venv/ensurepip separately.
    rm -rf "$venv"
    log "python venv unavailable; installing python3-venv"
    as_root apt-get update -qq
    as_root apt-get install -y -qq python3-venv >/dev/null
    "$py" -m venv "$venv"
  fi
  log "pip install -r $dir/requirements.txt"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$dir/requirements.txt"
  echo "$want" >"$venv/.hybox-stamp"
}

check_server() {
  # node is always there (the JS suite needs it); curl may not be on a bare Debian.
  if ! node -e '
    const u = process.argv[1].replace(/\/+$/, "") + "/health";
    fetch(u, { signal: AbortSignal.timeout(5000) })
      .then(async (r) => { const t = await r.text(); console.error("[e2e] server health: " + r.status + " " + t); process.exit(r.ok ? 0 : 1); })
      .catch((e) => { console.error("[e2e] " + u + ": " + e.message); process.exit(1); });
  ' "$HYBOX_E2E_URL"; then
    log "server at $HYBOX_E2E_URL does not answer GET /health"
    return 1
  fi
}

run_js() {
  log "JS suite (@alibaba-group/opensandbox)"
  (cd "$here/js" && node --test --test-concurrency=1 sdk.test.mjs)
}

run_python() {
  log "Python suite (opensandbox + opensandbox-code-interpreter)"
  # -rs: print the reason of every skipped test
  (cd "$here/python" && .venv/bin/python -m pytest -q -rs -p no:cacheprovider test_sdk.py)
}

case "$which_suites" in
  all | js | python) ;;
  *) log "unknown suite '$which_suites' (all|js|python)"; exit 2 ;;
esac

[ "$which_suites" != python ] && install_js
[ "$which_suites" != js ] && install_python
check_server
log "sandboxes under test: image $HYBOX_E2E_IMAGE${HYBOX_E2E_RUNTIME:+, runtime $HYBOX_E2E_RUNTIME}"

failed=()
if [ "$which_suites" != python ]; then run_js || failed+=(js); fi
if [ "$which_suites" != js ]; then run_python || failed+=(python); fi

if [ "${#failed[@]}" -gt 0 ]; then
  log "FAILED suites: ${failed[*]}"
  exit 1
fi
log "all selected suites passed"
