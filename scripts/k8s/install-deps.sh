#!/usr/bin/env bash
# Installs what the test cluster (scripts/k8s/cluster.sh) needs on Debian 12,
# when missing: what container sandboxes need (containerd 1.6, runc, the CNI
# plugins, iproute2: scripts/containers/install-deps.sh) plus openssl (the
# cluster's certificates) and curl (readiness checks). Idempotent; needs root
# only when something is missing. Go itself comes from scripts/install-deps.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
"$here/../containers/install-deps.sh"
need=()
for pkg in openssl curl; do
	command -v "$pkg" >/dev/null || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "k8s/install-deps: missing ${need[*]}; run as root (apt-get install ${need[*]})" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
