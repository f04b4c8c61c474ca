#!/usr/bin/env bash
# Starts a real hybox server (bin/hybox) on a free loopback port with a fresh
# data directory and runs the official-SDK end-to-end suites against it.
set -euo pipefail
cd "$(dirname "$0")/.."
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
data="$(mktemp -d)"
key="e2e-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
log="$data/server.log"
./bin/hybox serve --addr "127.0.0.1:$port" --data-dir "$data/data" --api-key "$key" \
	--guest-dir "${HYBOX_GUEST_DIR:-build/guests}" >"$log" 2>&1 &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 1 300); do
	if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$pid" 2>/dev/null; then echo "e2e: hybox exited:"; cat "$log"; exit 1; fi
	sleep 0.1
done
export HYBOX_E2E_URL="http://127.0.0.1:$port" OPEN_SANDBOX_API_KEY="$key"
echo "e2e: hybox at $HYBOX_E2E_URL"
status=0
./e2e/run.sh || status=$?
if [ "$status" != 0 ]; then
	echo "e2e: FAILED; last server log lines:"
	tail -n 60 "$log"
fi
exit "$status"
