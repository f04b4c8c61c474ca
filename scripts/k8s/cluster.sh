#!/usr/bin/env bash
# A real single-node Kubernetes for hybox's tests, built from source
# (scripts/k8s/build.sh) and isolated from everything else on the machine:
#
#   cluster.sh build            build (or find cached) the components, gVisor and the pause image
#   cluster.sh up               build, then start the cluster; wait until the node is Ready
#   cluster.sh down             stop it and remove every trace (idempotent)
#   cluster.sh status           exit 0 and print the kubeconfig path when the API answers
#   cluster.sh import FILE...   import OCI image archives into the node's containerd
#   cluster.sh env              print the cluster's paths as shell assignments
#
# What runs (all as root, each in its own session, pids in $K8S_DIR/pids):
#   containerd (Debian's 1.6) with its CRI plugin: own root, state, sockets and runc root;
#     RuntimeClass runc (runc shim) and gvisor (gVisor's own shim, built from source)
#   etcd v3.7.3 on 127.0.0.1:$ETCD_PORT (data under $K8S_DIR, no fsync: test data only)
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet v1.37.2; the apiserver
#     binds 127.0.0.1:$APISERVER_PORT only; the kubelet serves on the bridge address
#   a CNI bridge $BRIDGE with $SUBNET (no NAT: pods reach only the host and each other)
#   kubelet on cgroupfs under the cgroup $CGROUP_ROOT (created in every hierarchy, removed by down)
#
# Paths and names come from the environment (defaults in brackets):
#   HYBOX_K8S_DIR [/var/lib/hybox-k8s]  state: pki, etcd, containerd, kubelet, logs
#   HYBOX_K8S_CACHE [/var/cache/hybox/k8s]  built binaries, by version
#   HYBOX_GVISOR_CACHE [/var/cache/hybox/gvisor]  runsc and its shim (build-gvisor.sh)
# The admin kubeconfig is written to $K8S_DIR/kubeconfig.
#
# down stops every process started by up (and the shims, pod processes and
# gVisor sandboxes of the cluster's containerd), unmounts everything below
# $K8S_DIR, deletes the bridge and the cgroups, and removes $K8S_DIR; the
# kubelet's hard-coded /var/lib/kubelet/device-plugins/kubelet.sock only when
# up created it. Every ctr call has a timeout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
K8S_DIR=${HYBOX_K8S_DIR:-/var/lib/hybox-k8s}
CACHE=${HYBOX_K8S_CACHE:-/var/cache/hybox/k8s}
GVISOR_CACHE=${HYBOX_GVISOR_CACHE:-/var/cache/hybox/gvisor}
BRIDGE=hyk8s0
# A bridge without an address of its own takes the lowest of its ports'
# (the Pods' veths), so it changed as Pods came and went, and a Pod whose
# neighbour entry still held the old one lost its packets to the node until
# TCP had retransmitted seven times (25.4 s): a fixed, locally administered
# address.
BRIDGE_MAC=02:68:79:6b:38:73
SUBNET=10.248.0.0/24
NODE_IP=10.248.0.1
SERVICE_RANGE=10.249.0.0/24
SERVICE_IP=10.249.0.1
CGROUP_ROOT=/hybox-k8s
NODE=hybox-k8s-node
ETCD_PORT=23790
ETCD_PEER_PORT=23800
APISERVER_PORT=16443
KUBELET_PORT=10450
KUBELET_HEALTHZ_PORT=10448
KCM_PORT=10457
SCHEDULER_PORT=10459
PAUSE_IMAGE=localhost/hybox/pause:1
SOCK=$K8S_DIR/containerd/containerd.sock
KUBECONFIG_PATH=$K8S_DIR/kubeconfig
DEVICE_PLUGIN_SOCK=/var/lib/kubelet/device-plugins/kubelet.sock

ms() { echo $(($(date +%s%N) / 1000000)); }
# secs_since MS: the seconds since MS, with one decimal.
secs_since() {
	local d=$(($(ms) - $1))
	printf '%d.%d' $((d / 1000)) $((d % 1000 / 100))
}
t0=$(ms)
say() { printf 'k8s: [%5ss] %s\n' "$(secs_since "$t0")" "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}
need_root() { [ "$(id -u)" = 0 ] || die "needs root"; }

# ctr against the cluster's containerd, bounded (a broken shim can hang it).
ctr_() { timeout "${CTR_TIMEOUT:-20}" ctr --address "$SOCK" -n k8s.io "$@"; }

bin_dir() { echo "$CACHE/$(cd "$repo/tools/k8s" && go list -m -f '{{.Version}}' k8s.io/kubernetes)/bin"; }

cmd_build() {
	need_root
	for b in containerd ctr containerd-shim-runc-v2 runc openssl curl; do
		command -v "$b" >/dev/null || die "$b missing; run scripts/k8s/install-deps.sh"
	done
	[ -x /usr/lib/cni/bridge ] || die "the CNI plugins are missing; run scripts/k8s/install-deps.sh"
	say "building the cluster's components (cached by version under $CACHE)"
	local out
	out=$(nice -n 10 "$here/build.sh" "$CACHE" | tail -n 1)
	say "kubernetes and etcd: $out"
	say "gVisor (runsc and containerd-shim-runsc-v1)"
	out=$("$repo/scripts/containers/build-gvisor.sh" "$GVISOR_CACHE" | tail -n 1)
	mkdir -p "$CACHE"
	echo "$out" >"$CACHE/gvisor-dir"
	say "gVisor: $out"
	local pause_tar
	pause_tar=$(pause_archive)
	say "pause image: $pause_tar"
}

# pause_archive packs the built pause binary into an OCI archive (once per build).
pause_archive() {
	local bin tar
	bin=$(bin_dir)
	tar=$bin/../pause.oci.tar
	if [ ! -f "$tar" ] || [ "$tar" -ot "$bin/pause" ]; then
		local work
		work=$(mktemp -d)
		install -m 755 "$bin/pause" "$work/pause"
		tar -C "$work" --owner=0 --group=0 --numeric-owner -cf "$work/rootfs.tar" pause
		(cd "$repo" && go run ./internal/ociarchive/cmd/ociarchive -rootfs "$work/rootfs.tar" -o "$tar" \
			-name "$PAUSE_IMAGE" -created 1704067200 -cmd '["/pause"]' -created-by "scripts/k8s/cluster.sh: tools/k8s/pause" >/dev/null)
		rm -rf "$work"
	fi
	echo "$tar"
}

# start NAME CMD... starts a daemon in its own session with no inherited
# descriptors beyond stdio, its output in logs/NAME.log, its pid in pids/NAME.
start() {
	local name=$1
	shift
	(
		for fd in $(ls /proc/$BASHPID/fd); do
			[ "$fd" -gt 2 ] && eval "exec $fd>&-"
		done
		exec setsid "$@" </dev/null >>"$K8S_DIR/logs/$name.log" 2>&1
	) &
	echo $! >"$K8S_DIR/pids/$name"
}

alive() { [ -f "$K8S_DIR/pids/$1" ] && [ -d "/proc/$(cat "$K8S_DIR/pids/$1")" ]; }

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for i in $(seq 1 $((secs * 10))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "$what not ready within $secs s (logs in $K8S_DIR/logs)"
}

kubectl_() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
untainted() { [ -z "$(kubectl_ get node "$NODE" -o 'jsonpath={.spec.taints}')" ]; }

pki() {
	local p=$K8S_DIR/pki
	mkdir -p "$p"
	cd "$p"
	openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
	openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=hybox-k8s-ca" -out ca.crt 2>/dev/null
	# cert NAME SUBJECT EXT: a P-256 key and a CA-signed certificate
	cert() {
		openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
		openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
		printf '%s\n' "$3" >"$1.ext"
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 30 \
			-extfile "$1.ext" -out "$1.crt" 2>/dev/null
		rm -f "$1.csr" "$1.ext"
	}
	local client="keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
	cert apiserver "/CN=kube-apiserver" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$NODE_IP,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	cert kubelet-serving "/CN=$NODE" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,DNS:$NODE"
	cert admin "/O=system:masters/CN=hybox-admin" "$client"
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
	cert kube-controller-manager "/CN=system:kube-controller-manager" "$client"
	cert kube-scheduler "/CN=system:kube-scheduler" "$client"
	cert kubelet "/O=system:nodes/CN=system:node:$NODE" "$client"
	openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
	openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
	chmod 600 ./*.key
	cd - >/dev/null
}

# kubeconfig FILE USER: a kubeconfig for USER's client certificate.
kubeconfig() {
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hybox-k8s
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $K8S_DIR/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $K8S_DIR/pki/$2.crt
    client-key: $K8S_DIR/pki/$2.key
contexts:
- name: hybox-k8s
  context: {cluster: hybox-k8s, user: $2, namespace: default}
current-context: hybox-k8s
EOF
	chmod 600 "$1"
}

# The v1 hierarchies (and the v2 mount) the kubelet's cgroupfs driver uses.
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts; }

make_cgroups() {
	local m
	for m in $(cgroup_mounts); do
		mkdir -p "$m$CGROUP_ROOT"
		if [ -f "$m/cpuset.cpus" ]; then
			cat "$m/cpuset.cpus" >"$m$CGROUP_ROOT/cpuset.cpus"
			cat "$m/cpuset.mems" >"$m$CGROUP_ROOT/cpuset.mems"
		fi
	done
}

write_containerd_config() {
	local gvisor=$1 d=$K8S_DIR/containerd
	mkdir -p "$d/root" "$d/state" "$d/opt" "$d/runc" "$d/runsc" "$d/bin" "$K8S_DIR/cni/net.d" "$K8S_DIR/cni/ipam"
	cat >"$d/config.toml" <<EOF
# Generated by scripts/k8s/cluster.sh: the test cluster's containerd (CRI).
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$d/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # Root here lacks CAP_SYS_RESOURCE: nothing may lower oom_score_adj.
    restrict_oom_score_adj = true
    # Pod network namespaces stay below the state directory, not /var/run/netns.
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$K8S_DIR/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          # Not the shared /run/containerd/runc/k8s.io of other containerds.
          Root = "$d/runc"
EOF
	if [ -n "$gvisor" ]; then
		cat >>"$d/config.toml" <<EOF
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor]
        runtime_type = "io.containerd.runsc.v1"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$d/runsc.toml"
EOF
		cat >"$d/runsc.toml" <<EOF
binary_name = "$gvisor/runsc"
root = "$d/runsc"
[runsc_config]
  platform = "systrap"
  # Raw sockets in the sandbox's netstack: hybox-egress programs the
  # netstack's iptables through one (IPT_SO_SET_REPLACE). Only the egress
  # containers get CAP_NET_RAW; the workload's is dropped.
  net-raw = "true"
  # No host segmentation offload: with it, segments of an established TCP
  # connection leave the netstack with a partial checksum, which its REJECT
  # refuses to answer, so a connection a stricter policy cuts would hang
  # instead of being reset (docs/kubernetes.md).
  gso = "false"
EOF
		# containerd 1.6 finds shims only on its PATH and reads the output
		# of `shim start` as a bare address; this shim prints containerd 2's
		# JSON, so the wrapper prints only the address (stderr to a log).
		cat >"$d/bin/containerd-shim-runsc-v1" <<EOF
#!/bin/sh
# Generated by scripts/k8s/cluster.sh: gVisor's shim for containerd 1.6.
real=$gvisor/containerd-shim-runsc-v1
log=$K8S_DIR/logs/shim-runsc.log
for last; do :; done
[ "\$last" = start ] || exec "\$real" "\$@"
out=\$("\$real" "\$@" 2>>"\$log") || { rc=\$?; echo "\$out"; tail -n 5 "\$log"; exit \$rc; }
addr=\$(printf '%s' "\$out" | sed -n 's/.*"address":"\([^"]*\)".*/\1/p')
printf '%s\n' "\${addr:-\$out}"
EOF
		chmod 755 "$d/bin/containerd-shim-runsc-v1"
	fi
	cat >"$K8S_DIR/cni/net.d/10-hybox-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "hybox-k8s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$SUBNET", "gateway": "$NODE_IP"}]],
        "dataDir": "$K8S_DIR/cni/ipam"
      }
    }
  ]
}
EOF
}

write_kubelet_config() {
	cat >"$K8S_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $K8S_DIR/pki/kubelet-serving.crt
tlsPrivateKeyFile: $K8S_DIR/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $K8S_DIR/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$SOCK
# cgroup v1 here: the kubelet refuses it unless told otherwise (since 1.35).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
podLogsDir: $K8S_DIR/pod-logs
failSwapOn: false
# No registry: nothing collected could be pulled back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%"}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
registerNode: true
serializeImagePulls: false
EOF
}

cmd_up() {
	need_root
	if alive kube-apiserver 2>/dev/null; then
		die "a cluster is already up under $K8S_DIR (run down first)"
	fi
	cmd_build
	local start_all gvisor
	start_all=$(ms)
	BIN=$(bin_dir)
	gvisor=$(cat "$CACHE/gvisor-dir" 2>/dev/null || true)
	[ -x "$gvisor/runsc" ] || {
		say "no gVisor build; RuntimeClass gvisor is left out"
		gvisor=""
	}
	# Leftovers of an earlier run that was not brought down.
	if [ -d "$K8S_DIR" ]; then
		say "removing the leftovers of an earlier cluster under $K8S_DIR"
		cmd_down
	fi
	mkdir -p "$K8S_DIR/logs" "$K8S_DIR/pids" "$K8S_DIR/pod-logs"
	# The kubelet also writes outside its root directory: its device plugin
	# socket and the symlinks in /var/log/containers; down removes only
	# what this cluster made.
	[ -e "$DEVICE_PLUGIN_SOCK" ] || touch "$K8S_DIR/created-device-plugin-sock"
	[ -d /var/log/containers ] || touch "$K8S_DIR/created-var-log-containers"
	say "certificates (CA, apiserver, kubelet, clients, service account key)"
	pki
	kubeconfig "$KUBECONFIG_PATH" admin
	for u in kube-controller-manager kube-scheduler kubelet; do kubeconfig "$K8S_DIR/$u.kubeconfig" "$u"; done

	say "bridge $BRIDGE with $NODE_IP (the node's address; no NAT)"
	ip link add "$BRIDGE" address "$BRIDGE_MAC" type bridge
	ip addr add "$NODE_IP/${SUBNET#*/}" dev "$BRIDGE"
	ip link set "$BRIDGE" up

	say "cgroup $CGROUP_ROOT in every hierarchy"
	make_cgroups

	say "containerd (CRI) on $SOCK"
	write_containerd_config "$gvisor"
	PATH=$K8S_DIR/containerd/bin:$PATH start containerd containerd --config "$K8S_DIR/containerd/config.toml"
	wait_for containerd 20 ctr --address "$SOCK" version
	say "pause image $PAUSE_IMAGE"
	ctr_ images import "$(pause_archive)" >/dev/null

	say "etcd on 127.0.0.1:$ETCD_PORT"
	start etcd "$BIN/etcd" --name hybox-k8s --data-dir "$K8S_DIR/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "hybox-k8s=http://127.0.0.1:$ETCD_PEER_PORT" \
		--unsafe-no-fsync --log-level warn
	wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

	local p=$K8S_DIR/pki
	say "kube-apiserver on 127.0.0.1:$APISERVER_PORT"
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" --advertise-address "$NODE_IP" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$p/sa.pub" \
		--service-account-signing-key-file "$p/sa.key" --service-cluster-ip-range "$SERVICE_RANGE" \
		--authorization-mode Node,RBAC --allow-privileged=false \
		--kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "$p/ca.crt" --kubelet-preferred-address-types InternalIP
	wait_for kube-apiserver 90 curl -sf --cacert "$p/ca.crt" --cert "$p/admin.crt" --key "$p/admin.key" \
		"https://127.0.0.1:$APISERVER_PORT/readyz"

	say "kube-controller-manager and kube-scheduler"
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$K8S_DIR/kube-controller-manager.kubeconfig" \
		--authentication-kubeconfig "$K8S_DIR/kube-controller-manager.kubeconfig" \
		--authorization-kubeconfig "$K8S_DIR/kube-controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--use-service-account-credentials=true
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$K8S_DIR/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig "$K8S_DIR/kube-scheduler.kubeconfig" \
		--authorization-kubeconfig "$K8S_DIR/kube-scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false

	say "kubelet ($NODE on $NODE_IP:$KUBELET_PORT)"
	write_kubelet_config
	start kubelet "$BIN/kubelet" --config "$K8S_DIR/kubelet.yaml" --kubeconfig "$K8S_DIR/kubelet.kubeconfig" \
		--root-dir "$K8S_DIR/kubelet" --cert-dir "$K8S_DIR/kubelet/pki" --node-ip "$NODE_IP" \
		--hostname-override "$NODE"

	say "RuntimeClasses runc${gvisor:+ and gvisor}"
	{
		printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: runc}\nhandler: runc\n'
		[ -z "$gvisor" ] || printf -- '---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: gvisor\n'
	} | kubectl_ apply -f - >/dev/null
	say "waiting for node $NODE to be Ready and the default ServiceAccount"
	wait_for "node $NODE" 120 kubectl_ wait --for=condition=Ready "node/$NODE" --timeout=1s
	wait_for "the default ServiceAccount" 60 kubectl_ get serviceaccount default
	# The node lifecycle controller removes the not-ready taint a moment after Ready.
	wait_for "node $NODE without taints" 60 untainted
	say "up in $(secs_since "$start_all") s; kubeconfig: $KUBECONFIG_PATH"
	echo "$KUBECONFIG_PATH"
}

# kill_pids SIGNAL PID...: signals those of the pids that are still alive.
kill_pids() {
	local sig=$1 pid
	shift
	for pid in "$@"; do [ -d "/proc/$pid" ] && kill "-$sig" "$pid" 2>/dev/null || true; done
}

# wait_gone SECONDS PID...: true when all have exited in time.
wait_gone() {
	local secs=$1 i pid left
	shift
	for i in $(seq 1 $((secs * 20))); do
		left=""
		for pid in "$@"; do [ -d "/proc/$pid" ] && left="$left $pid"; done
		[ -z "$left" ] && return 0
		sleep 0.05
	done
	return 1
}

stop_daemon() {
	local name=$1 pid
	[ -f "$K8S_DIR/pids/$name" ] || return 0
	pid=$(cat "$K8S_DIR/pids/$name")
	if [ -d "/proc/$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait_gone 10 "$pid" || {
			say "$name ($pid) did not stop on SIGTERM; SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			wait_gone 5 "$pid" || true
		}
	fi
	rm -f "$K8S_DIR/pids/$name"
}

# cluster_pids: the processes of the cluster's containers and shims: those
# in its cgroups, and those whose command line names $K8S_DIR (shims carry
# the socket's path, runsc its root).
cluster_pids() {
	local m f pid cmd
	{
		for m in $(cgroup_mounts); do
			[ -d "$m$CGROUP_ROOT" ] || continue
			find "$m$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null || true
		done
		for f in /proc/[0-9]*/cmdline; do
			pid=${f#/proc/}
			pid=${pid%/cmdline}
			[ "$pid" = $$ ] && continue
			cmd=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
			case $cmd in *"$K8S_DIR/"*) echo "$pid" ;; esac
		done
		true
	} | sort -un
}

cmd_down() {
	need_root
	local start_all pids m
	start_all=$(ms)
	if [ -f "$KUBECONFIG_PATH" ] && alive kube-apiserver && alive kubelet; then
		BIN=$(bin_dir)
		say "deleting every pod (grace 0) and waiting for the kubelet to stop them"
		timeout 20 "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" delete pods --all --all-namespaces \
			--grace-period=0 --force --wait=true >/dev/null 2>&1 || say "not every pod was deleted in time; going on"
		# The API objects go at once; the kubelet then stops the containers
		# and sandboxes (CNI teardown included). Wait for that, bounded.
		local i
		for i in $(seq 1 100); do
			[ -z "$(CTR_TIMEOUT=5 ctr_ tasks list -q 2>/dev/null)" ] && break
			sleep 0.2
		done
	fi
	# The kubelet first (no more Pods are started), then the control plane
	# together, then etcd.
	if alive kubelet 2>/dev/null; then say "stopping the kubelet"; fi
	stop_daemon kubelet
	if alive kube-apiserver 2>/dev/null; then say "stopping kube-scheduler, kube-controller-manager, kube-apiserver"; fi
	stop_daemon kube-scheduler &
	stop_daemon kube-controller-manager &
	stop_daemon kube-apiserver &
	wait
	if alive etcd 2>/dev/null; then say "stopping etcd"; fi
	stop_daemon etcd
	if alive containerd 2>/dev/null; then
		say "removing what is left in containerd (tasks, containers)"
		local ids
		ids=$(CTR_TIMEOUT=10 ctr_ containers list -q 2>/dev/null || true)
		for id in $ids; do
			CTR_TIMEOUT=10 ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		for id in $ids; do
			CTR_TIMEOUT=10 ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
			CTR_TIMEOUT=10 ctr_ containers delete "$id" >/dev/null 2>&1 || true
		done
		say "stopping containerd"
	fi
	stop_daemon containerd
	pids=$(cluster_pids)
	if [ -n "$pids" ]; then
		say "stopping the cluster's remaining processes (shims, sandboxes): $(echo $pids)"
		kill_pids TERM $pids
		wait_gone 5 $pids || kill_pids KILL $pids
		wait_gone 5 $pids || say "processes still alive: $(echo $pids)"
	fi
	if [ -d "$K8S_DIR" ]; then
		local mounts
		mounts=$(awk -v d="$K8S_DIR/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
		if [ -n "$mounts" ]; then
			say "unmounting $(echo "$mounts" | wc -l) mounts below $K8S_DIR"
			for m in $mounts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "cannot unmount $m"; done
		fi
	fi
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		say "deleting bridge $BRIDGE"
		ip link delete "$BRIDGE"
	fi
	local cg=""
	for m in $(cgroup_mounts); do
		[ -d "$m$CGROUP_ROOT" ] || continue
		cg=yes
		find "$m$CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[ -d "$m$CGROUP_ROOT" ] && say "cannot remove cgroup $m$CGROUP_ROOT"
	done
	[ -z "$cg" ] || say "removed cgroup $CGROUP_ROOT"
	if [ -d /var/log/containers ]; then
		find /var/log/containers -maxdepth 1 -type l -lname "$K8S_DIR/*" -delete 2>/dev/null || true
		if [ -f "$K8S_DIR/created-var-log-containers" ]; then rmdir /var/log/containers 2>/dev/null || true; fi
	fi
	if [ -f "$K8S_DIR/created-device-plugin-sock" ]; then
		rm -f "$DEVICE_PLUGIN_SOCK"
		rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
	fi
	# A shim's socket is /run/containerd/s/<sha256 of "<containerd socket>/<namespace>/<id>">;
	# a shim that exits removes it, a killed one does not: remove those of
	# the ids our containerd logged (and only those).
	if [ -f "$K8S_DIR/logs/containerd.log" ]; then
		local id h n=0
		for id in $(grep -o '[0-9a-f]\{64\}' "$K8S_DIR/logs/containerd.log" | sort -u); do
			h=$(printf '%s' "$SOCK/k8s.io/$id" | sha256sum | cut -c1-64)
			if [ -S "/run/containerd/s/$h" ]; then
				rm -f "/run/containerd/s/$h"
				n=$((n + 1))
			fi
		done
		[ $n = 0 ] || say "removed $n shim sockets left by killed shims"
	fi
	if [ -d "$K8S_DIR" ]; then
		say "removing $K8S_DIR"
		rm -rf "$K8S_DIR" || die "cannot remove $K8S_DIR (still mounted?)"
	fi
	say "down in $(secs_since "$start_all") s"
}

cmd_status() {
	if [ -f "$KUBECONFIG_PATH" ] && alive kube-apiserver && alive kubelet &&
		curl -sf --cacert "$K8S_DIR/pki/ca.crt" --cert "$K8S_DIR/pki/admin.crt" --key "$K8S_DIR/pki/admin.key" \
			"https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null; then
		echo "$KUBECONFIG_PATH"
	else
		echo "k8s: no cluster up under $K8S_DIR" >&2
		exit 1
	fi
}

cmd_import() {
	need_root
	alive containerd || die "no cluster up under $K8S_DIR"
	local f
	for f in "$@"; do
		say "importing $f"
		CTR_TIMEOUT=300 ctr_ images import "$f" >/dev/null
	done
}

cmd_env() {
	cat <<EOF
K8S_DIR=$K8S_DIR
KUBECONFIG=$KUBECONFIG_PATH
CONTAINERD_SOCK=$SOCK
BRIDGE=$BRIDGE
SUBNET=$SUBNET
NODE=$NODE
NODE_IP=$NODE_IP
CGROUP_ROOT=$CGROUP_ROOT
PAUSE_IMAGE=$PAUSE_IMAGE
EOF
}

case ${1:-} in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
import)
	shift
	cmd_import "$@"
	;;
env) cmd_env ;;
*)
	echo "usage: $0 build|up|down|status|import FILE...|env" >&2
	exit 2
	;;
esac
