#!/usr/bin/env bash
# Installs what building and testing hybox needs on Debian 12, when missing:
# Go (>= 1.26 must already be on PATH or come from the Go proxy toolchain),
# Node.js with npm, python3 with venv, curl. Idempotent; apt runs only if
# something is missing.
set -euo pipefail
need=()
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "install-deps: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "install-deps: apt-get install ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v go >/dev/null 2>&1; then
	echo "install-deps: Go 1.26 or newer is required on PATH" >&2
	exit 1
fi
