#!/usr/bin/env bash
# Tests the Python SDK as users get it: checks that the generated models are in step with
# the protocol document, builds the wheel and the sdist, installs the wheel into a fresh
# virtualenv (so a file missing from the package fails), runs mypy --strict on the installed
# package, and runs the suite against a real `hybox serve` and a stand-alone hybox-execd
# (started by the tests' fixtures). matplotlib goes into the virtualenv for the figure test.
# Usage: scripts/test-sdk-python.sh [pytest args...] | --generate-only
# Env: PYTHON (default python3, >= 3.10), HYBOX_BIN (default bin/hybox).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
work=$root/build/pysdk
tools=$root/build/pysdk-tools
mkdir -p "$work"

# Pinned tools, in their own virtualenv (kept between runs).
pins=(datamodel-code-generator==0.89.0 build==1.6.1 hatchling==1.33.0 mypy==2.4.1)
if [ ! -x "$tools/bin/python" ] || [ "$(cat "$tools/.pins" 2>/dev/null)" != "${pins[*]}" ]; then
	rm -rf "$tools"
	"$py" -m venv "$tools"
	"$tools/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
	echo "${pins[*]}" > "$tools/.pins"
fi

# The models must be what the generator makes of the document.
sdks/python/generate.sh "$tools/bin/python"
if [ "${1:-}" = --generate-only ]; then
	exit 0
fi
if ! git diff --quiet -- sdks/python/hybox/_models.py; then
	git diff --stat -- sdks/python/hybox/_models.py
	echo "sdks/python/hybox/_models.py is stale: run make generate-python and commit it" >&2
	exit 1
fi

rm -rf "$work/dist" "$work/venv"
"$tools/bin/python" -m build -q --wheel --sdist --no-isolation --outdir "$work/dist" sdks/python >/dev/null
wheel=$(ls "$work"/dist/hybox-*.whl)
ls "$work"/dist/hybox-*.tar.gz >/dev/null

"$py" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel" pytest==9.2.0 matplotlib==3.11.2

cd "$work"   # not the source tree: `import hybox` must find the installed wheel
"$tools/bin/mypy" --strict --no-incremental --python-executable "$work/venv/bin/python" -p hybox
HYBOX_BIN=${HYBOX_BIN:-$root/bin/hybox} HYBOX_EXECD_BIN=${HYBOX_EXECD_BIN:-$root/bin/hybox-execd} HYBOX_GUEST_DIR=${HYBOX_GUEST_DIR:-$root/build/guests} \
	"$work/venv/bin/pytest" -q -p no:cacheprovider --rootdir "$root/sdks/python" "$root/sdks/python/tests" "$@"
