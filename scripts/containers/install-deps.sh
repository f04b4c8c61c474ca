#!/usr/bin/env bash
# Installs what container sandboxes and their tests need on Debian 12, when
# missing: containerd (1.6), runc, the CNI plugins, nftables, iproute2 and
# mmdebstrap (to build the test image). Idempotent: apt runs only when a
# package is missing. Needs root; as another user it names what is missing
# and exits 1. gVisor is not among them: Debian's runsc (2022-12) fails
# coreutils' statx, so scripts/containers/build-gvisor.sh builds a current
# one from source.
set -euo pipefail

# package → a file that proves it is installed
declare -A probe=(
	[containerd]=/usr/bin/containerd
	[runc]=/usr/sbin/runc
	[containernetworking-plugins]=/usr/lib/cni/bridge
	[nftables]=/usr/sbin/nft
	[iproute2]=/usr/sbin/ip
	[mmdebstrap]=/usr/bin/mmdebstrap
)
need=()
for pkg in containerd runc containernetworking-plugins nftables iproute2 mmdebstrap; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
		[ ! -e "${probe[$pkg]}" ]; then
		need+=("$pkg")
	fi
done
if [ ${#need[@]} -eq 0 ]; then
	echo "containers/install-deps: containerd, runc, CNI plugins, nftables, iproute2, mmdebstrap are installed"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "containers/install-deps: missing ${need[*]}; run as root (apt-get install ${need[*]})" >&2
	exit 1
fi
echo "containers/install-deps: apt-get update"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: containerd would otherwise pull in docker-ish
# extras; policy-rc.d keeps Debian's containerd.service from starting: hybox
# runs its own containerd with its own paths.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
echo "containers/install-deps: apt-get install ${need[*]} (a minute or two)"
apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${need[@]}" >/dev/null
for pkg in "${need[@]}"; do
	if [ ! -e "${probe[$pkg]}" ]; then
		echo "containers/install-deps: $pkg installed but ${probe[$pkg]} is missing" >&2
		exit 1
	fi
done
