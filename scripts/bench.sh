#!/usr/bin/env bash
# Runs the benchmarks and prints them as a table. The raw `go test -bench`
# output is kept in build/bench.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
out=build/bench.txt
{
	go test -run '^$' -bench 'CreateToFirst|OneShotPython' -benchtime 40x ./server/
	go test -run '^$' -bench 'WarmPython|WarmJavaScript|OneShotJavaScript' -benchtime 500x ./server/
	go test -run '^$' -bench 'ExecutionsPerSecond' -benchtime 2000x ./server/
	go test -run '^$' -bench 'MemoryPerIdleSandbox' -benchtime 500x ./server/
	go test -run '^$' -bench 'MemoryPerPythonContext' -benchtime 10x ./server/
	# Interpreter state as data: fork of a sandbox holding 50 MB in Python,
	# restore → first result after a restart, Runtime.Fork alone.
	go test -run '^$' -bench 'ForkPython50MB|RestoreFirstResult' -benchtime 20x ./server/
	go test -run '^$' -bench 'PerCallPython' -benchtime 300x ./server/
	go test -run '^$' -bench 'PauseFreesMemory' -benchtime 10x ./server/
	go test -run '^$' -bench '^BenchmarkFork$' -benchtime 50x ./runtimes/wasm/
	# Python contexts alone (no HTTP): a new context's first result, a
	# burst of 50 new contexts, a warm cell, fib(27) against the host's
	# CPython.
	go test -run '^$' -bench 'NewContextFirstResult$|WarmRun$' -benchtime 300x ./runtimes/wasm/pyguest/
	go test -run '^$' -bench 'Burst50$' -benchtime 50x ./runtimes/wasm/pyguest/
	go test -run '^$' -bench 'Fib27$|Fib27Native' -benchtime 5x ./runtimes/wasm/pyguest/
	# JavaScript contexts alone: fib(25), CPU-bound under the loop guard.
	go test -run '^$' -bench '^BenchmarkFib$' -benchtime 30x ./runtimes/wasm/jsguest/
	# The Go SDK against a real `hybox serve` (bin/hybox): its overhead per
	# call over the same request written with net/http, and create → first
	# command result for a wasm sandbox (and, as root, a runc one).
	(cd sdks/go && HYBOX_BIN="$PWD/../../bin/hybox" HYBOX_REQUIRE_SDK_SERVER=1 \
		go test -run '^$' -bench 'SDKOverhead|CreateToFirstResult/wasm' -benchtime 1000x .)
	# As root, runc and gVisor, cold and from a warm pool of two members.
	gvisor=$(cat build/gvisor-dir 2>/dev/null || true)
	if [ "$(id -u)" = 0 ] && ./scripts/containers/containerd.sh start /var/lib/hybox-test "$gvisor" >/dev/null; then
		(cd sdks/go && HYBOX_BIN="$PWD/../../bin/hybox" HYBOX_REQUIRE_SDK_SERVER=1 \
			HYBOX_SDK_CONTAINERD=/var/lib/hybox-test/containerd/containerd.sock \
			HYBOX_SDK_RUNSC="${gvisor:+$gvisor/runsc}" \
			go test -run '^$' -bench 'CreateToFirstResult/(runc|runsc)' -benchtime 20x .)
	fi
	# Egress building blocks on loopback: policy decisions, the DNS proxy,
	# the credential proxy (splice and injection against direct).
	go test -run '^$' -bench . ./policy/
	go test -run '^$' -bench . -benchtime 2000x ./policy/dnsproxy/
	go test -run '^$' -bench . -benchtime 2s ./vault/tproxy/
	# Container sandboxes (root: a private test containerd and the test image).
	if [ "$(id -u)" = 0 ]; then
		go test -run '^$' -bench 'CreateReady|CommandRoundTrip|IdleMemory' -benchtime 20x ./runtimes/oci/
		go test -run '^$' -bench 'ConcurrentCreate20' -benchtime 3x ./runtimes/oci/
		# Egress (root: a private upstream network namespace): HTTPS from
		# inside a container and from a wasm sandbox's host side.
		go test -run '^$' -bench 'EgressHTTPS|EgressWasmHTTPS' -benchtime 300x ./server/
		go test -run '^$' -bench . -benchtime 300x ./policy/nft/
	else
		echo "container benchmarks skipped: they need root" >&2
	fi
	# Pod sandboxes on the test cluster (root, its binaries built: make
	# k8s-build; about 15 minutes with the cluster's start).
	k8s_cache=${HYBOX_K8S_CACHE:-/var/cache/hybox/k8s}
	if [ "$(id -u)" = 0 ] && ./scripts/k8s/build.sh --check "$k8s_cache" >/dev/null 2>&1; then
		k8s_env=(env HYBOX_K8S_CACHE="$k8s_cache" HYBOX_GVISOR_CACHE="${HYBOX_GVISOR_CACHE:-/var/cache/hybox/gvisor}" HYBOX_K8S_UP=1)
		"${k8s_env[@]}" go test -trimpath -timeout 60m -run '^$' -bench 'CreateFirstCommand|PoolClaimFirstCommand' -benchtime 30x ./runtimes/k8s/
		"${k8s_env[@]}" go test -trimpath -timeout 60m -run '^$' -bench 'PoolClaimMany' -benchtime 1x ./runtimes/k8s/
		"${k8s_env[@]}" go test -trimpath -timeout 60m -run '^$' -bench 'AccessCommand' -benchtime 200x ./runtimes/k8s/
		"${k8s_env[@]}" go test -trimpath -timeout 60m -run '^$' -bench 'ReplicaFirstAnswer|ReplicaPoolClaim' -benchtime 20x ./runtimes/k8s/
	else
		echo "Kubernetes benchmarks skipped: they need root and the test cluster's binaries (make k8s-build)" >&2
	fi
} | tee "$out" | grep -E '^(Benchmark|ok|FAIL|---)' || true
echo
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-60s %10s %10s %18s\n' benchmark p50 p99 other
grep -E '^Benchmark' "$out" | while read -r name _ _ _ rest; do
	p50=$(echo "$rest" | grep -oE '[0-9.]+ p50-(ms|µs)' | head -1 || true)
	[ -n "$p50" ] || p50=$(echo "$rest" | grep -oE '[0-9.]+ [a-z-]*p50-(ms|µs)' | tail -1 || true)
	p99=$(echo "$rest" | grep -oE '[0-9.]+ p99-(ms|µs)' | head -1 || true)
	[ -n "$p99" ] || p99=$(echo "$rest" | grep -oE '[0-9.]+ [a-z-]*p99-(ms|µs)' | tail -1 || true)
	other=$(echo "$rest" | grep -oE '[-0-9.]+ (execs/s|req/s|KiB/sandbox|MiB/context|MiB/sandbox|total-ms|added-p50-ms|added-p50-µs|ns/op)' | head -1 || true)
	printf '%-60s %10s %10s %18s\n' "${name%-*}" "${p50:--}" "${p99:--}" "${other:--}"
done
grep -q '^FAIL' "$out" && exit 1 || exit 0
