#!/usr/bin/env bash
# Python SDK latencies against a real `hybox serve` (wasm sandboxes): create -> first
# command result, warm 1+1, and the SDK's overhead over raw httpx. Installs the SDK from
# source into build/pysdk-bench (a virtualenv kept between runs) and prints a table; the
# output is kept in build/bench-sdk-python.txt.
# Usage: scripts/bench-sdk-python.sh [-n N]   Env: PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
venv=$root/build/pysdk-bench
if [ ! -x "$venv/bin/python" ]; then
	"$py" -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check "$root/sdks/python"

data=$(mktemp -d /tmp/hybox-pybench.XXXXXX)
mkdir -p build/wazero-cache
ln -s "$root/build/wazero-cache" "$data/wazero-cache"
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
./bin/hybox serve --addr "127.0.0.1:$port" --data-dir "$data" --api-key "$key" \
	--guest-dir "${HYBOX_GUEST_DIR:-build/guests}" >"$data/server.log" 2>&1 &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 1 600); do
	if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$pid" 2>/dev/null; then cat "$data/server.log" >&2; exit 1; fi
	sleep 0.1
done
"$venv/bin/python" sdks/python/bench/bench.py --domain "127.0.0.1:$port" --api-key "$key" "$@" | tee build/bench-sdk-python.txt
