#!/usr/bin/env bash
# Builds the test cluster's components from the Go module proxy at the
# versions pinned in tools/k8s (Kubernetes) and tools/k8s/etcd (etcd), once
# per version, into a cache directory:
#
#   build.sh [CACHE_DIR]      (default /var/cache/hybox/k8s)
#   build.sh --check [CACHE_DIR]  exit 0 when the build is cached, 1 when it
#                                 would have to build (nothing is built)
#
# Output: CACHE_DIR/<kubernetes version>/bin/{etcd,kube-apiserver,
# kube-controller-manager,kube-scheduler,kubelet,kubectl,pause} and a "built"
# stamp recording the inputs (both build modules, this script, the Go
# version); the last line on stdout is CACHE_DIR/<version>. An unchanged
# stamp is reused, a changed one rebuilds. Every binary reports its release
# (version stamping through -ldflags -X), is static (CGO_ENABLED=0), stripped
# and built with -trimpath, so that hybox's own client-go builds share the
# build cache.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tools=$repo/tools/k8s
check=no
if [ "${1:-}" = --check ]; then
	check=yes
	shift
fi
cache=${1:-/var/cache/hybox/k8s}
say() { echo "k8s-build: $*" >&2; }

command -v go >/dev/null || {
	say "go is missing (run scripts/install-deps.sh)"
	exit 1
}
version=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd "$tools/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
key=$(cat "$tools/go.mod" "$tools/go.sum" "$tools/tools.go" "$tools/pause/main.go" \
	"$tools/etcd/go.mod" "$tools/etcd/go.sum" "$tools/etcd/tools.go" "$0" <(go version) | sha256sum | cut -c1-16)
out=$cache/$version
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9 # one builder at a time

bins="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl pause"
cached=yes
for b in $bins; do [ -x "$out/bin/$b" ] || cached=no; done
if [ $cached = yes ] && [ "$(sed -n 's/^key //p' "$out/built" 2>/dev/null)" = "$key" ]; then
	say "kubernetes $version and etcd $etcd_version are cached in $out"
	echo "$out"
	exit 0
fi
if [ $check = yes ]; then
	say "kubernetes $version and etcd $etcd_version are not built in $out (or its inputs changed)"
	exit 1
fi

# The staging modules replaced in tools/k8s/go.mod must be exactly those that
# k8s.io/kubernetes replaces with ./staging/...: a missing one breaks the build
# in ways that are hard to read, an extra one is dead.
say "checking tools/k8s/go.mod against the staging modules of k8s.io/kubernetes $version"
gomod=$(cd "$tools" && go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
want=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*|\1|p' "$gomod" | sort)
replaces=$(cd "$tools" && go mod edit -json | tr -d ' \t\n' | grep -o '"Old":{"Path":"[^"]*"},"New":{"Path":"[^"]*","Version":"[^"]*"}')
have=$(echo "$replaces" | sed 's/^"Old":{"Path":"\([^"]*\)".*/\1/' | sort)
if [ "$want" != "$have" ]; then
	say "tools/k8s/go.mod replaces other modules than k8s.io/kubernetes $version's staging list:"
	diff <(echo "$want") <(echo "$have") >&2 || true
	exit 1
fi
minor=${version#v1.}
minor=${minor%%.*}
staging=v0.${version#v1.}
bad=$(echo "$replaces" | sed 's/.*"Version":"\([^"]*\)"}$/\1/' | sort -u | grep -vx "$staging" || true)
[ -z "$bad" ] || {
	say "tools/k8s/go.mod replaces staging modules with $bad; want $staging everywhere"
	exit 1
}

stamp="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	stamp="$stamp -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

say "building kubernetes $version and etcd $etcd_version into $out (cold: 8-11 minutes and 1.4 GB of modules on 2 cores)"
mkdir -p "$out.tmp/bin"
trap 'rm -rf "$out.tmp"' EXIT
total=$(date +%s)
build() { # dir output package ldflags
	local start
	start=$(date +%s)
	say "go build $3 -> bin/$2"
	(cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags="$4" -o "$out.tmp/bin/$2" "$3")
	say "built $2 in $(($(date +%s) - start)) s"
}
build "$tools/etcd" etcd go.etcd.io/etcd/server/v3 "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version"
# The apiserver first: the others reuse most of its packages.
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
	build "$tools" "$c" "k8s.io/kubernetes/cmd/$c" "$stamp"
done
build "$tools" pause ./pause "-s -w"
{
	echo "kubernetes $version, etcd $etcd_version, $(go version)"
	echo "key $key"
} >"$out.tmp/built"
rm -rf "$out"
mv "$out.tmp" "$out"
say "done in $(($(date +%s) - total)) s: $out"
echo "$out"
