#!/usr/bin/env bash
# Builds a test image (by default localhost/hybox/python:3-bookworm) as an
# OCI image archive OUT.tar: a Debian bookworm rootfs (minbase plus python3,
# nodejs, bash, coreutils, procps, curl, ca-certificates and any EXTRA
# packages; no docs, man pages or locales; no apt lists) made by mmdebstrap
# from the Debian mirror this machine's apt uses, packed by
# internal/ociarchive/cmd/ociarchive into one gzip layer (reproducible for
# the same packages).
#
#   build-image.sh OUT.tar [NAME [EXTRA]]
#
# NAME names the image; EXTRA is a comma-separated list of more Debian
# packages. The plotting test image is (python3-munkres satisfies
# python3-fonttools' "python3-scipy | python3-munkres", which apt would
# otherwise meet with scipy and, through pythran, a C++ compiler: 1.1 GiB
# instead of about 400 MiB)
#   build-image.sh /var/cache/hybox/python-plot-3-bookworm.oci.tar \
#       localhost/hybox/python-plot:3-bookworm python3-matplotlib,python3-numpy,python3-munkres
# and the code-interpreter test image (java and go code contexts; JDK 17 with jshell, Go 1.19;
# about 2.2 minutes cold on 2 cores, a 933 MiB rootfs, a 336 MiB archive)
#   build-image.sh /var/cache/hybox/code-interpreter-bookworm.oci.tar \
#       localhost/hybox/code-interpreter:bookworm openjdk-17-jdk-headless,golang-go
# (/usr/share/man/man1 is made before the packages are installed: the JRE's postinst links its
# man pages there through update-alternatives, which fails when the directory is missing.)
#
# Cached: when OUT.tar exists and OUT.tar.inputs records the same inputs
# (this script, the packer's source, mirror, packages, name), nothing is
# built. Delete OUT.tar (or set HYBOX_IMAGE_REBUILD=1) to rebuild from
# scratch. HYBOX_DEBIAN_MIRROR=URL overrides the mirror. Needs root
# (mmdebstrap's root mode), mmdebstrap and Go.
set -euo pipefail

[ $# -ge 1 ] && [ $# -le 3 ] || {
	echo "usage: $0 OUT.tar [NAME [EXTRA_PACKAGES]]" >&2
	exit 2
}
out=$1
name=${2:-localhost/hybox/python:3-bookworm}
suite=bookworm
packages=python3,nodejs,bash,coreutils,procps,curl,ca-certificates${3:+,$3}
epoch=1704067200 # 2024-01-01T00:00:00Z: every mtime is clamped to it
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [ "$(id -u)" != 0 ]; then
	echo "build-image: needs root (mmdebstrap root mode)" >&2
	exit 1
fi
command -v mmdebstrap >/dev/null || {
	echo "build-image: mmdebstrap missing; run scripts/containers/install-deps.sh" >&2
	exit 1
}

# The Debian mirrors of this machine's apt sources: deb822 *.sources and
# one-line *.list files, suites of $suite only, component main.
mirror_lines() {
	if [ -n "${HYBOX_DEBIAN_MIRROR:-}" ]; then
		for s in $suite $suite-updates; do echo "deb $HYBOX_DEBIAN_MIRROR $s main"; done
		return
	fi
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '
			$1 == "deb" {
				i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i+1) ~ "^" suite "(-updates|-security)?$") print "deb " $i " " $(i+1) " main"
			}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && enabled != "no")
					for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++)
						if (S[s] ~ "^" suite "(-updates|-security)?$") print "deb " U[u] " " S[s] " main"
				types = ""; enabled = ""; nu = 0; ns = 0
			}
			/^[ \t]*$/ { flush(); next }
			/^#/ { next }
			{
				key = tolower($1); sub(/:$/, "", key)
				if (key == "types") types = substr($0, index($0, ":") + 1)
				if (key == "enabled") enabled = tolower($2)
				if (key == "uris") for (k = 2; k <= NF; k++) U[++nu] = $k
				if (key == "suites") for (k = 2; k <= NF; k++) S[++ns] = $k
			}
			END { flush() }' "$f"
	done
}
mapfile -t mirrors < <(mirror_lines | sort -u)
if [ ${#mirrors[@]} -eq 0 ]; then
	echo "build-image: no Debian $suite mirror in /etc/apt/sources.list(.d); set HYBOX_DEBIAN_MIRROR" >&2
	exit 1
fi
arch=$(dpkg --print-architecture)

inputs=$(
	{
		echo "name=$name suite=$suite arch=$arch packages=$packages epoch=$epoch"
		printf '%s\n' "${mirrors[@]}"
		# the packer's sources, not its tests
		find "$repo/internal/ociarchive" "$repo/internal/ociarchive/cmd/ociarchive" -name '*.go' ! -name '*_test.go' |
			sort | xargs cat | cat "$0" - | sha256sum | awk '{print $1}'
	} | sha256sum | awk '{print $1}'
)
mkdir -p "$(dirname "$out")"
exec 8>"$out.lock"
flock 8 # one build at a time; a second caller then finds the cache
if [ -f "$out" ] && [ "$(cat "$out.inputs" 2>/dev/null)" = "$inputs" ] && [ -z "${HYBOX_IMAGE_REBUILD:-}" ]; then
	echo "build-image: $out is cached (same inputs); HYBOX_IMAGE_REBUILD=1 or deleting it rebuilds"
	exit 0
fi

work=$(mktemp -d "$(dirname "$out")/.build-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s.%N)
echo "build-image: mmdebstrap $suite ($packages) from ${mirrors[*]}" >&2
SOURCE_DATE_EPOCH=$epoch mmdebstrap \
	--quiet \
	--mode=root \
	--variant=minbase \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--architectures="$arch" \
	--include="$packages" \
	--aptopt='Acquire::Check-Valid-Until "false"' \
	--aptopt='Acquire::Languages "none"' \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--essential-hook='mkdir -p "$1"/usr/share/man/man1' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*.log "$1"/var/log/apt/*' \
	--customize-hook='rm -f "$1"/etc/machine-id "$1"/var/lib/dbus/machine-id "$1"/etc/hostname' \
	--customize-hook=': >"$1"/etc/resolv.conf' \
	--customize-hook='printf "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" >"$1"/etc/hosts' \
	"$suite" "$work/rootfs.tar" "${mirrors[@]}" >"$work/mmdebstrap.log" 2>&1 || {
	echo "build-image: mmdebstrap failed; last lines of its output:" >&2
	tail -n 40 "$work/mmdebstrap.log" >&2
	exit 1
}
mid=$(date +%s.%N)
(cd "$repo" && go build -o "$work/ociarchive" ./internal/ociarchive/cmd/ociarchive)
"$work/ociarchive" -rootfs "$work/rootfs.tar" -o "$work/image.tar" -name "$name" \
	-created "$epoch" -arch "$arch" -cmd '["/bin/bash"]' \
	-created-by "mmdebstrap --variant=minbase --include=$packages $suite" >"$work/result.json"
mv "$work/image.tar" "$out"
cp "$work/result.json" "$out.json"
echo "$inputs" >"$out.inputs"
end=$(date +%s.%N)
awk -v s="$start" -v m="$mid" -v e="$end" -v sz="$(stat -c %s "$out")" -v rs="$(stat -c %s "$work/rootfs.tar")" \
	'BEGIN { printf "build-image: %s built in %.1f s (mmdebstrap %.1f s, pack %.1f s); rootfs %.0f MiB, archive %.0f MiB\n", "'"$out"'", e-s, m-s, e-m, rs/1048576, sz/1048576 }' >&2
