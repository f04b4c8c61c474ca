#!/usr/bin/env bash
# Runs one SDK suite's command with container sandboxes, when this machine can give them.
# As root: the shared test containerd (scripts/containers/containerd.sh under the test data
# directory; started when not running, and then stopped at the end), the three test images built
# (cached by their inputs) and imported into the namespace hybox-test-sdk when it lacks their
# digests, and gVisor's runsc when `make gvisor` built it. Not root: the command runs without
# container sandboxes (its container tests skip and say so).
#
#   scripts/sdk-containers.sh COMMAND [ARGS...]
#
# The command's environment:
#   HYBOX_SDK_CONTAINERD          the containerd socket ("" = no container sandboxes)
#   HYBOX_SDK_NAMESPACE           the containerd namespace holding the images
#   HYBOX_SDK_IMAGE_ARCHIVE       localhost/hybox/python:3-bookworm's archive
#   HYBOX_SDK_PLOT_IMAGE_ARCHIVE  localhost/hybox/python-plot:3-bookworm's archive (matplotlib, numpy)
#   HYBOX_SDK_CODE_IMAGE_ARCHIVE  localhost/hybox/code-interpreter:bookworm's archive (JDK 17, Go)
#   HYBOX_SDK_RUNSC               gVisor's runsc ("" = runc only)
# Inputs: HYBOX_TEST_DATA_DIR (default /var/lib/hybox-test), HYBOX_TEST_IMAGE_CACHE (default
# /var/cache/hybox), GVISOR_DIR_FILE (default build/gvisor-dir, what `make gvisor` wrote).
set -euo pipefail
[ $# -ge 1 ] || {
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
data=${HYBOX_TEST_DATA_DIR:-/var/lib/hybox-test}
cache=${HYBOX_TEST_IMAGE_CACHE:-/var/cache/hybox}
ns=hybox-test-sdk
export HYBOX_SDK_CONTAINERD="" HYBOX_SDK_NAMESPACE=$ns HYBOX_SDK_RUNSC=""
export HYBOX_SDK_IMAGE_ARCHIVE=$cache/python-3-bookworm.oci.tar
export HYBOX_SDK_PLOT_IMAGE_ARCHIVE=$cache/python-plot-3-bookworm.oci.tar
export HYBOX_SDK_CODE_IMAGE_ARCHIVE=$cache/code-interpreter-bookworm.oci.tar

if [ "$(id -u)" != 0 ]; then
	echo "sdk-containers: not root: container sandboxes are off for this suite" >&2
	exec "$@"
fi

gvisor=$(cat "${GVISOR_DIR_FILE:-$repo/build/gvisor-dir}" 2>/dev/null || true)
started=""
"$here/containers/containerd.sh" status "$data" >/dev/null 2>&1 || started=yes
stop() {
	if [ -n "$started" ]; then
		echo "sdk-containers: stopping the test containerd under $data (this run started it)" >&2
		"$here/containers/containerd.sh" stop "$data" || true
	fi
}
trap stop EXIT
# shellcheck disable=SC2086 # gvisor is one directory or empty
"$here/containers/containerd.sh" start "$data" $gvisor >/dev/null
sock=$data/containerd/containerd.sock

"$here/containers/build-image.sh" "$HYBOX_SDK_IMAGE_ARCHIVE"
"$here/containers/build-image.sh" "$HYBOX_SDK_PLOT_IMAGE_ARCHIVE" localhost/hybox/python-plot:3-bookworm \
	python3-matplotlib,python3-numpy,python3-munkres
"$here/containers/build-image.sh" "$HYBOX_SDK_CODE_IMAGE_ARCHIVE" localhost/hybox/code-interpreter:bookworm \
	openjdk-17-jdk-headless,golang-go
for archive in "$HYBOX_SDK_IMAGE_ARCHIVE" "$HYBOX_SDK_PLOT_IMAGE_ARCHIVE" "$HYBOX_SDK_CODE_IMAGE_ARCHIVE"; do
	digest=$(sed -n 's/.*"manifestDigest": *"\([^"]*\)".*/\1/p' "$archive.json")
	if ! ctr --address "$sock" -n "$ns" images ls | awk '{print $3}' | grep -qx "$digest"; then
		echo "sdk-containers: importing $archive into namespace $ns" >&2
		ctr --address "$sock" -n "$ns" images import "$archive" >/dev/null
	fi
done
HYBOX_SDK_CONTAINERD=$sock
if [ -n "$gvisor" ] && [ -x "$gvisor/runsc" ]; then
	HYBOX_SDK_RUNSC=$gvisor/runsc
fi
"$@"
