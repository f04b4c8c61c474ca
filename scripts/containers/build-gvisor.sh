#!/usr/bin/env bash
# Builds gVisor's runsc and containerd-shim-runsc-v1 from the version pinned in
# tools/gvisor/go.mod, once per version, into a cache directory:
#
#   build-gvisor.sh [CACHE_DIR]      (default /var/cache/hybox/gvisor)
#
# Output: CACHE_DIR/<version>-<key>/{runsc,containerd-shim-runsc-v1} and a
# "built" stamp; the last line on stdout is that directory. <key> is a hash of
# what the build depends on (tools/gvisor, this script, the Go version), so a
# change to any of them builds afresh and an unchanged one is reused.
#
# The shim is patched on a copy of the module source (go build -overlay refuses
# files in GOMODCACHE): root on hybox's machines lacks CAP_SYS_RESOURCE, so
# the shim's failure to lower its own oom_score_adj becomes a warning instead
# of failing every start. Nothing of gVisor is kept in hybox's tree.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tools=$repo/tools/gvisor
cache=${1:-/var/cache/hybox/gvisor}
say() { echo "build-gvisor: $*" >&2; }

command -v go >/dev/null || {
	say "go is missing (run scripts/install-deps.sh)"
	exit 1
}
version=$(cd "$tools" && go list -m -f '{{.Version}}' gvisor.dev/gvisor)
key=$(cat "$tools/go.mod" "$tools/go.sum" "$tools/tools.go" "$0" <(go version) | sha256sum | cut -c1-12)
out=$cache/$version-$key
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9 # one builder at a time

if [ -f "$out/built" ] && [ -x "$out/runsc" ] && [ -x "$out/containerd-shim-runsc-v1" ]; then
	say "gvisor.dev/gvisor $version is cached in $out"
	echo "$out"
	exit 0
fi

say "building gvisor.dev/gvisor $version into $out (cold: about 2-3 minutes on 2 quiet cores)"
work=$(mktemp -d "$cache/work.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

say "downloading the module (go mod download)"
src=$(cd "$tools" && go mod download -json gvisor.dev/gvisor | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || {
	say "go mod download gave no source directory for gvisor.dev/gvisor $version"
	exit 1
}
cp "$tools/go.mod" "$tools/go.sum" "$tools/tools.go" "$work/"
cp -r "$src" "$work/gvisor-src"
chmod -R u+w "$work/gvisor-src"

# The patch: SetOOMScore's error is logged, not returned.
manager=$work/gvisor-src/pkg/shim/v1/manager.go
say "patching pkg/shim/v1/manager.go: the shim warns instead of failing when it cannot set its oom_score_adj"
sed -i 's|^\(\t*\)return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)$|\1log.L.WithError(err).Warn("cannot set the OOM score of the shim (no CAP_SYS_RESOURCE?); going on")|' "$manager"
grep -q 'cannot set the OOM score of the shim' "$manager" || {
	say "the patch did not apply: $manager has changed; update this script"
	exit 1
}
(cd "$work" && go mod edit -replace gvisor.dev/gvisor=./gvisor-src)

mkdir -p "$out.tmp"
for pkg in runsc shim; do
	bin=$pkg
	[ "$pkg" = shim ] && bin=containerd-shim-runsc-v1
	say "go build -trimpath gvisor.dev/gvisor/$pkg -> $bin"
	start=$(date +%s)
	(cd "$work" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out.tmp/$bin" "gvisor.dev/gvisor/$pkg")
	say "built $bin in $(($(date +%s) - start)) s"
done
echo "gvisor.dev/gvisor $version, patched shim, $(go version)" >"$out.tmp/built"
rm -rf "$out"
mv "$out.tmp" "$out"
say "done: $out"
echo "$out"
