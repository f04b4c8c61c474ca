#!/usr/bin/env bash
# Starts ONE real hybox server (bin/hybox, from `make build`) on a free
# loopback port with a fresh data directory and runs the official-SDK
# end-to-end suites (e2e/run.sh) against it, once per kind of sandbox:
#
#   wasm   image wasm://default
#   runc   image localhost/hybox/python:3-bookworm, extensions {"hybox.io/runtime":"runc"}
#   runsc  the same image under gVisor, extensions {"hybox.io/runtime":"runsc"}
#
# The container passes need root: a private containerd is started under the
# data directory (scripts/containers/containerd.sh) and the test image is
# imported (built first with scripts/containers/build-image.sh when the
# archive is missing); missing Debian packages are installed first
# (scripts/containers/install-deps.sh). Not root: only the wasm pass runs, unless
# HYBOX_REQUIRE_CONTAINERS is set, which makes that an error.
#
# Env: HYBOX_E2E_PASSES  passes to run (default "wasm runc runsc")
#      HYBOX_E2E_SUITES  all|js|python, handed to e2e/run.sh (default all)
#      HYBOX_IMAGE_ARCHIVE  the test image archive (default /var/cache/hybox/python-3-bookworm.oci.tar)
#      HYBOX_CODE_IMAGE_ARCHIVE  the code-interpreter test image (JDK, Go; default
#                        /var/cache/hybox/code-interpreter-bookworm.oci.tar; missing = Java/Go tests skipped)
#      HYBOX_GUEST_DIR   wasm guests (default build/guests)
#      HYBOX_E2E_LOG_DIR where the server and containerd logs are kept when a
#                        pass fails (default build/e2e-logs)
#      HYBOX_E2E_KUBERNETES_CONFIG  a hybox.toml with [kubernetes] enabled: the
#                        container passes run as Pods of that cluster instead
#                        (no containerd is started; the images must be on its
#                        nodes already; runtimes/k8s TestOfficialSDKs sets it)
#
# The server gets a fresh random credential-vault key (HYBOX_VAULT_KEY) so that
# sandboxes may enable credentialProxy.
#
# The suites reach the server through sdks/apitest/cmd/apiproxy, which
# checks every response they get against the protocol document
# (sdks/openapi.yaml); a response that does not match fails the run.
#
# At exit every sandbox is deleted through the API, the proxy, the server
# and containerd are stopped, and the data directory is removed; a
# container still known to containerd at that point fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

image=localhost/hybox/python:3-bookworm
archive=${HYBOX_IMAGE_ARCHIVE:-/var/cache/hybox/python-3-bookworm.oci.tar}
code_archive=${HYBOX_CODE_IMAGE_ARCHIVE:-/var/cache/hybox/code-interpreter-bookworm.oci.tar}
passes=${HYBOX_E2E_PASSES:-wasm runc runsc}
suites=${HYBOX_E2E_SUITES:-all}

say() { printf 'e2e: %s\n' "$*" >&2; }

for b in bin/hybox bin/hybox-execd; do
	[ -x "$b" ] || { say "$b missing; run make build"; exit 1; }
done

want_containers=no
for p in $passes; do
	case $p in
	wasm) ;;
	runc | runsc) want_containers=yes ;;
	*) say "unknown pass '$p' (wasm|runc|runsc)"; exit 2 ;;
	esac
done
if [ "$want_containers" = yes ] && [ "$(id -u)" != 0 ]; then
	if [ -n "${HYBOX_REQUIRE_CONTAINERS:-}" ]; then
		say "container passes (runc, runsc) need root and HYBOX_REQUIRE_CONTAINERS is set"
		exit 1
	fi
	say "SKIPPING the container passes (runc, runsc): they need root (a private containerd); running wasm only"
	skipped=""
	for p in $passes; do [ "$p" = wasm ] || skipped="$skipped $p"; done
	passes=wasm
	want_containers=skipped
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Short path: containerd's socket lives under it (unix socket paths are limited).
data=$(mktemp -d /tmp/hybox-e2e.XXXXXX)
key="e2e-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# The key sealing credential vaults (credentialProxy sandboxes), fresh per run;
# it reaches only the server, through its environment.
vault_key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
log=$data/server.log
sock=$data/containerd/containerd.sock
pid=""
proxy_pid=""
containerd_started=no
logdir=${HYBOX_E2E_LOG_DIR:-$repo/build/e2e-logs}
keep_logs=no

# delete_all deletes every sandbox the server lists, through the API, and
# prints the ids it had to delete.
delete_all() {
	python3 - "http://127.0.0.1:$port" "$key" <<'EOF'
import json, sys, urllib.request
base, key = sys.argv[1], sys.argv[2]
hdr = {"OPEN-SANDBOX-API-KEY": key}
def call(method, path):
    req = urllib.request.Request(base + path, method=method, headers=hdr)
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()
try:
    body = json.loads(call("GET", "/v1/sandboxes?pageSize=1000"))
except Exception as e:
    print(f"(cannot list sandboxes: {e})")
    sys.exit(1)
for s in body.get("items") or []:
    if s.get("status", {}).get("state") == "Terminated":
        continue
    try:
        call("DELETE", "/v1/sandboxes/" + s["id"])
        print(s["id"])
    except Exception as e:  # report, keep deleting the rest
        print(f"{s['id']} (delete failed: {e})")
EOF
}

leftover_containers() {
	[ "$containerd_started" = yes ] || return 0
	ctr --address "$sock" -n hybox containers ls -q 2>/dev/null || true
}

# stop_proxy stops the validating proxy; it reports mismatches and exits 1
# when there were any.
stop_proxy() {
	[ -n "$proxy_pid" ] || return 0
	kill -TERM "$proxy_pid" 2>/dev/null || true
	local prc=0
	wait "$proxy_pid" 2>/dev/null || prc=$?
	proxy_pid=""
	return "$prc"
}

cleanup() {
	local rc=$? left
	trap - EXIT INT TERM
	stop_proxy || { say "responses that do not match the protocol document (above)"; [ "$rc" = 0 ] && rc=1; }
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		left=$(delete_all 2>&1) || true
		[ -n "$left" ] && say "deleted at exit: $(echo $left)"
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ "$containerd_started" = yes ]; then
		left=$(leftover_containers)
		if [ -n "$left" ]; then
			say "containers left behind (removing them): $(echo $left)"
			for c in $left; do
				ctr --address "$sock" -n hybox tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
				sleep 0.2
				ctr --address "$sock" -n hybox tasks rm -f "$c" >/dev/null 2>&1 || true
				ctr --address "$sock" -n hybox containers rm "$c" >/dev/null 2>&1 || true
			done
			[ "$rc" = 0 ] && rc=1
		fi
		scripts/containers/containerd.sh stop "$data" || true
	fi
	# A stopped server leaves no volume mounted in its data directory.
	left=$(awk -v d="$data/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
	if [ -n "$left" ]; then
		say "mounts left in the data directory (detaching them): $(echo $left)"
		for m in $left; do umount -l "$m" || true; done
		[ "$rc" = 0 ] && rc=1
	fi
	if [ "$rc" != 0 ] || [ "$keep_logs" = yes ]; then
		mkdir -p "$logdir"
		cp "$log" "$logdir/server.log" 2>/dev/null || true
		cp "$data/containerd/containerd.log" "$logdir/containerd.log" 2>/dev/null || true
		say "logs kept in $logdir"
	fi
	rm -rf "$data"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t_start=$(date +%s.%N)
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}s')" "$1" "$(date +%s.%N)"; }

flags=()
kube=${HYBOX_E2E_KUBERNETES_CONFIG:-}
if [ "$want_containers" = yes ] && [ -n "$kube" ]; then
	say "container passes on Kubernetes (config $kube): Pods of the cluster, images already on its nodes"
	flags=(--config "$kube")
elif [ "$want_containers" = yes ]; then
	scripts/containers/install-deps.sh >&2 # idempotent: apt only for what is missing
	if [ ! -f "$archive" ]; then
		say "building the test image archive $archive"
		scripts/containers/build-image.sh "$archive"
	fi
	# gVisor from source (cached by version); without it the runsc pass fails.
	gvisor=$(scripts/containers/build-gvisor.sh | tail -n 1) || gvisor=
	scripts/containers/containerd.sh start "$data" $gvisor >&2
	containerd_started=yes
	flags=(--containerd "$sock")
	[ -n "$gvisor" ] && flags+=(--runsc-binary "$gvisor/runsc")
fi

# A host directory the suites mount as a volume (every tier); wasm volumes are
# bind mounts, so only a server running as root can give them.
host_dir=""
if [ "$(id -u)" = 0 ]; then
	host_dir=$data/host-volume
	mkdir -p "$host_dir"
	chmod 0777 "$host_dir"
else
	say "not root: the volume tests are skipped (wasm volumes are bind mounts)"
fi
export HYBOX_E2E_HOST_DIR=$host_dir

HYBOX_ALLOWED_HOST_PATHS=$host_dir HYBOX_VAULT_KEY=$vault_key ./bin/hybox serve --addr "127.0.0.1:$port" --data-dir "$data" --api-key "$key" \
	--guest-dir "${HYBOX_GUEST_DIR:-build/guests}" --execd-binary "$repo/bin/hybox-execd" \
	"${flags[@]}" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
	if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$pid" 2>/dev/null; then say "hybox exited:"; cat "$log" >&2; exit 1; fi
	sleep 0.1
done
go build -o "$data/apiproxy" ./sdks/apitest/cmd/apiproxy
"$data/apiproxy" -target "http://127.0.0.1:$port" -addr-file "$data/proxy.addr" &
proxy_pid=$!
for _ in $(seq 1 100); do [ -s "$data/proxy.addr" ] && break; sleep 0.05; done
[ -s "$data/proxy.addr" ] || { say "apiproxy did not start"; exit 1; }
direct_url="http://127.0.0.1:$port" proxy_url="http://$(cat "$data/proxy.addr")"
export HYBOX_E2E_URL=$proxy_url OPEN_SANDBOX_API_KEY="$key"
say "hybox at $direct_url, the suites through the validating proxy at $proxy_url (data $data)"

if [ "$want_containers" = yes ] && [ -z "$kube" ]; then
	t=$(date +%s.%N)
	OPEN_SANDBOX_DOMAIN=$direct_url ./bin/hybox image import -q "$archive"
	say "imported $image in $(elapsed "$t")"
	# The code-interpreter test image (JDK, Go), built by scripts/sdk-containers.sh
	# (make test-sdk, before make test-e2e): the container passes run Java and Go
	# contexts in it.
	if [ -f "$code_archive" ]; then
		t=$(date +%s.%N)
		OPEN_SANDBOX_DOMAIN=$direct_url ./bin/hybox image import -q "$code_archive"
		export HYBOX_E2E_LANG_IMAGE=localhost/hybox/code-interpreter:bookworm
		say "imported $HYBOX_E2E_LANG_IMAGE in $(elapsed "$t")"
	else
		say "no $code_archive (make test-sdk builds it): the Java and Go context tests are skipped"
	fi
fi

results=()
status=0
for p in $passes; do
	if [ "$p" = wasm ]; then
		img=wasm://default rt=""
	else
		img=$image rt=$p
	fi
	say "=== pass $p: image $img${rt:+, runtime $rt}"
	t=$(date +%s.%N)
	rc=0
	HYBOX_E2E_IMAGE=$img HYBOX_E2E_RUNTIME=$rt ./e2e/run.sh "$suites" || rc=$?
	took=$(elapsed "$t")
	if ! kill -0 "$pid" 2>/dev/null; then
		wait "$pid" && srv=0 || srv=$?
		say "hybox exited during pass $p (status $srv)"
		results+=("$p: FAILED ($took; the server exited with status $srv)")
		status=1
		keep_logs=yes
		break
	fi
	left=$(delete_all 2>&1) || true
	if [ -n "$left" ]; then
		say "pass $p left sandboxes behind (deleted now): $(echo $left)"
		[ "$rc" = 0 ] && rc=1
	fi
	if [ "$rc" = 0 ]; then
		results+=("$p: passed ($took)")
	else
		results+=("$p: FAILED ($took)")
		status=1
		keep_logs=yes
		say "pass $p FAILED; last server log lines:"
		tail -n 30 "$log" >&2
	fi
done

left=$(leftover_containers)
if [ -n "$left" ]; then
	say "containers still in containerd after all passes: $(echo $left)"
	status=1
fi

if ! stop_proxy; then
	say "responses of the suites do not match the protocol document (above)"
	results+=("protocol document: FAILED (responses that do not match it)")
	status=1
else
	results+=("protocol document: every response matched")
fi

say "summary (total $(elapsed "$t_start")):"
for r in "${results[@]}"; do say "  $r"; done
if [ "$want_containers" = skipped ]; then
	say "  SKIPPED:$skipped (container passes need root)"
fi
exit "$status"
