#!/usr/bin/env bash
# Fuzzes hybox's API from its protocol document (sdks/openapi.yaml) with
# schemathesis, against ONE real server (bin/hybox, from `make build`) on a
# free loopback port with a fresh data directory. Three runs, each bounded:
#
#   lifecycle  every operation but the sandbox APIs, at /v1 with the API key
#   execd      the execd-tagged operations, at the proxy endpoint of a wasm
#              sandbox created for the run, with the headers of its endpoint
#   egress     likewise for the egress-tagged operations (port 18080), when
#              the document has them
#
# Each run generates positive and negative data (examples, coverage,
# fuzzing and stateful phases; links between operations where the document
# has them) and applies every check (scripts/fuzz/schemathesis.toml): each
# response conforms to the document (status code, content type, headers,
# schema), nothing is a 5xx, schema-violating requests get a 4xx, valid ones
# are accepted. After each run /health must still answer, and the server
# process must still be alive. The counts of each run and their totals are
# printed at the end.
#
# schemathesis comes from PyPI, pinned with everything it pulls in
# (scripts/fuzz/requirements.txt), in a virtualenv kept in build/fuzz-venv
# and rebuilt when the pins change.
#
# Env: HYBOX_FUZZ_EXAMPLES  examples per operation (default 50)
#      HYBOX_FUZZ_MAX_TIME  seconds each run may take at most (default 60)
#      HYBOX_FUZZ_SEED      seed (default 1, so that make test is repeatable;
#                           "random" to explore; every run prints its seed)
#      HYBOX_FUZZ_RUNS      runs to do (default "lifecycle execd egress")
#      HYBOX_FUZZ_LOG_DIR   where the reports and the server log are kept
#                           (default build/fuzz)
#      HYBOX_GUEST_DIR      wasm guests (default build/guests)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

examples=${HYBOX_FUZZ_EXAMPLES:-50}
max_time=${HYBOX_FUZZ_MAX_TIME:-60}
runs=${HYBOX_FUZZ_RUNS:-lifecycle execd egress}
seed=${HYBOX_FUZZ_SEED:-1}
if [ "$seed" = random ]; then
	seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
fi
logdir=${HYBOX_FUZZ_LOG_DIR:-$repo/build/fuzz}
guests=${HYBOX_GUEST_DIR:-$repo/build/guests}
venv=$repo/build/fuzz-venv
reqs=$repo/scripts/fuzz/requirements.txt
config=$repo/scripts/fuzz/schemathesis.toml
hooks=$repo/scripts/fuzz/hooks.py
doc=$repo/sdks/openapi.yaml

say() { printf 'fuzz-api: %s\n' "$*" >&2; }

[ -x bin/hybox ] || { say "bin/hybox missing; run make build"; exit 1; }

# The virtualenv, rebuilt when the pins change.
if ! cmp -s "$reqs" "$venv/.requirements" 2>/dev/null || [ ! -x "$venv/bin/schemathesis" ]; then
	say "installing schemathesis into $venv"
	rm -rf "$venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$reqs"
	cp "$reqs" "$venv/.requirements"
fi
st=$venv/bin/schemathesis

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
data=$(mktemp -d /tmp/hybox-fuzz.XXXXXX)
key="fuzz-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s' "$key" >"$data/api-key"
mkdir -p "$logdir"
rm -rf "$logdir"/*.log "$logdir"/*.xml "$logdir"/.schemathesis
log=$logdir/server.log
pid=""

cleanup() {
	local rc=$?
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$data"
	exit "$rc"
}
trap cleanup EXIT INT TERM

say "server on $base (data $data, log $log)"
HYBOX_VAULT_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') \
	bin/hybox serve --addr "127.0.0.1:$port" --data-dir "$data/data" --api-key-file "$data/api-key" \
	--guest-dir "$guests" >"$log" 2>&1 &
pid=$!

healthy() { curl -fsS --max-time 5 "$base/health" >/dev/null 2>&1; }
for _ in $(seq 1 120); do
	healthy && break
	kill -0 "$pid" 2>/dev/null || { say "the server exited:"; tail -20 "$log" >&2; exit 1; }
	sleep 0.5
done
healthy || { say "the server did not become healthy"; tail -20 "$log" >&2; exit 1; }

# api METHOD PATH [BODY]: a lifecycle call with the API key; prints the body.
api() {
	curl -fsS --max-time 60 -X "$1" -H "OPEN-SANDBOX-API-KEY: $key" -H 'Content-Type: application/json' \
		${3:+--data "$3"} "$base/v1$2"
}
json() { python3 -c "import json,sys; v=json.load(sys.stdin); print($1)"; }

failed=()
summary=()

# fuzz NAME BASE_URL [schemathesis args...]: one bounded run.
fuzz() {
	local name=$1 url=$2
	shift 2
	say "run $name: $url (seed $seed, $examples examples per operation, at most ${max_time}s)"
	local out=$logdir/$name.log rc=0
	# One worker: Python 3.11's parser is not safe to use from several
	# threads at once, which schemathesis does with more workers.
	# From the log directory: schemathesis keeps its cache in the current one.
	(cd "$logdir" && SCHEMATHESIS_HOOKS=$hooks "$st" --config-file "$config" --no-color run "$doc" --url "$url" \
		--max-examples "$examples" --max-time "$max_time" --seed "$seed" \
		--workers 1 --request-timeout 30 --max-failures 100 \
		--report junit --report-junit-path "$logdir/$name.xml" \
		"$@") >"$out" 2>&1 || rc=$?
	# The summary block: operations, phases, failures, test cases.
	sed -n '/^=* SUMMARY =*$/,$p' "$out" >&2
	local ops cases
	ops=$(sed -n 's/^ *Tested: *\([0-9]*\).*/\1/p' "$out" | tail -1)
	cases=$(sed -n 's/^ *\([0-9]*\) generated.*/\1/p' "$out" | tail -1)
	local nfail
	nfail=$(grep -oE '[0-9]+ (unique )?failures?' "$out" | tail -1 | grep -oE '^[0-9]+' || true)
	summary+=("$(printf '%-10s %10s %10s %10s %6s' "$name" "${ops:-?}" "${cases:-?}" "${nfail:-0}" "$rc")")
	if [ "$rc" != 0 ]; then
		failed+=("$name (schemathesis exit $rc; see $out)")
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		failed+=("$name: the server died")
		say "the server died during run $name:"
		tail -20 "$log" >&2
		return 1
	fi
	if ! healthy; then
		failed+=("$name: /health does not answer after the run")
		return 1
	fi
}

has_tag() { grep -q "tags: \[$1\]" "$doc"; }

# sandbox_url PORT: the base URL and the header arguments of a fresh wasm
# sandbox's endpoint for PORT, one per line.
sandbox=""
endpoint_args() {
	if [ -z "$sandbox" ]; then
		sandbox=$(api POST /sandboxes '{"image":{"uri":"wasm://default"}}' | json 'v["id"]')
		say "sandbox $sandbox"
	fi
	api GET "/sandboxes/$sandbox/endpoints/$1" |
		json '"http://"+v["endpoint"]+"\n"+"\n".join("-H\n%s: %s" % kv for kv in v.get("headers",{}).items())'
}

for run in $runs; do
	case $run in
	lifecycle)
		excludes=()
		for tag in execd egress; do
			if has_tag $tag; then excludes+=(--exclude-tag $tag); fi
		done
		fuzz lifecycle "$base/v1" -H "OPEN-SANDBOX-API-KEY: $key" "${excludes[@]}" || true
		;;
	execd | egress)
		has_tag "$run" || { say "the document has no $run operations; skipping that run"; continue; }
		p=44772
		[ "$run" = egress ] && p=18080
		mapfile -t ep < <(endpoint_args $p)
		fuzz "$run" "${ep[0]}" "${ep[@]:1}" --include-tag "$run" || true
		;;
	*) say "unknown run '$run' (lifecycle|execd|egress)"; exit 2 ;;
	esac
done

if [ -n "$sandbox" ]; then
	api DELETE "/sandboxes/$sandbox" >/dev/null || failed+=("deleting sandbox $sandbox")
fi

printf '\n%-10s %10s %10s %10s %6s\n' run operations cases failures exit >&2
printf '%s\n' "${summary[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
	say "FAILED (seed $seed; replay with HYBOX_FUZZ_SEED=$seed):"
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
say "passed (seed $seed)"
