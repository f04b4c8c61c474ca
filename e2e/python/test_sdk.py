"""End-to-end suite: the official OpenSandbox Python SDKs (opensandbox and
opensandbox-code-interpreter, used unchanged) drive a running hybox server.

Env:
    HYBOX_E2E_URL         lifecycle server base, e.g. http://127.0.0.1:18080 (no /v1)
    OPEN_SANDBOX_API_KEY  API key the server accepts
    HYBOX_E2E_IMAGE       image of the sandboxes under test (default wasm://default)
    HYBOX_E2E_RUNTIME     when set, sent as extensions["hybox.io/runtime"] (runc, runsc, ...)
    HYBOX_E2E_HOST_DIR    a host directory the server allows as a volume (unset: the
                          volume test is skipped and says why)
    HYBOX_E2E_LANG_IMAGE  an image with a JDK and Go (the code-interpreter test image):
                          the container passes run Java and Go contexts in it

The same tests run against wasm and container sandboxes; only what is
wasm-specific differs (sys.platform, the code-interpreter image routing).

Tests run in file order and share two sandboxes (module fixtures); the kill test
runs last. The egress tests use sandboxes of their own, tagged with a separate
run id so the list tests do not count them.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from code_interpreter import CodeInterpreterSync
from code_interpreter.models.code_sync import SupportedLanguageSync
from opensandbox import SandboxManagerSync, SandboxSync
from opensandbox.config.connection_sync import ConnectionConfigSync
from code_interpreter.sync.code_interpreter import RUNTIME_PROCESS_CHECK_COMMAND
from opensandbox.exceptions import SandboxApiException, SandboxReadyTimeoutException
from opensandbox.models.execd import RunCommandOpts
from opensandbox.models.filesystem import DirectoryListEntry, SearchEntry, WriteEntry
from opensandbox.models.sandboxes import (
    Credential,
    CredentialAuth,
    CredentialBinding,
    CredentialMetadata,
    CredentialMutationSet,
    CredentialProxyConfig,
    InlineCredentialSource,
    NetworkPolicy,
    NetworkRule,
    PVC,
    Host,
    SandboxFilter,
    Volume,
)

BASE_URL = os.environ.get("HYBOX_E2E_URL", "").rstrip("/")
API_KEY = os.environ.get("OPEN_SANDBOX_API_KEY", "")
IMAGE = os.environ.get("HYBOX_E2E_IMAGE") or "wasm://default"
RUNTIME = os.environ.get("HYBOX_E2E_RUNTIME", "").strip()
WASM = RUNTIME.lower() == "wasm" if RUNTIME else IMAGE.startswith("wasm://")
PLATFORM = "wasi" if WASM else "linux"
PASS = f"{IMAGE} on {RUNTIME}" if RUNTIME else IMAGE
EXTENSIONS = {"hybox.io/runtime": RUNTIME} if RUNTIME else None
HOST_DIR = os.environ.get("HYBOX_E2E_HOST_DIR", "")
# Set (to the reason) where the server's named volumes cannot be made, e.g.
# PersistentVolumeClaims on a cluster with no storage provisioner: the
# volume tests then mount host volumes only.
NO_PVC = os.environ.get("HYBOX_E2E_NO_PVC", "")
# Set (to the reason) where the pass's runtime refuses egress policies and
# credential vaults (gVisor Pods on Kubernetes): the suite then checks the
# refusal instead of the policy and vault tests.
EGRESS_REFUSED = os.environ.get("HYBOX_E2E_EGRESS_REFUSED", "")
LANG_IMAGE = os.environ.get("HYBOX_E2E_LANG_IMAGE", "")
RUN_ID = str(uuid.uuid4())
WORK_DIR = f"/tmp/hybox-e2e-py-{RUN_ID[:8]}"
UUID_V4 = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
)

if not BASE_URL or not API_KEY:
    raise RuntimeError("HYBOX_E2E_URL and OPEN_SANDBOX_API_KEY must be set")


def connection(api_key: str = API_KEY) -> ConnectionConfigSync:
    return ConnectionConfigSync(
        domain=BASE_URL, api_key=api_key, request_timeout=timedelta(seconds=60)
    )


def run(codes, code: str, **kwargs):
    """codes.run that also checks the stream was not cut short: a finished
    run ends with execution_complete or an error event."""
    ex = codes.run(code, **kwargs)
    assert ex.complete is not None or ex.error is not None, (
        f"the stream of {code!r} ended without execution_complete or error "
        f"(truncated?): results={result_texts(ex)} logs={ex.logs}"
    )
    return ex


def command(sandbox, cmd: str):
    """A foreground sandbox.commands.run with the same completeness check."""
    ex = sandbox.commands.run(cmd)
    assert ex.complete is not None or ex.error is not None, (
        f"the stream of {cmd!r} ended without execution_complete or error "
        f"(truncated?): logs={ex.logs}"
    )
    return ex


def result_texts(execution) -> list[str | None]:
    return [r.text for r in execution.result]


def stdout_text(execution) -> str:
    return "".join(m.text for m in execution.logs.stdout)


def create_sandbox(role: str) -> SandboxSync:
    """A sandbox of the kind under test (image and runtime from the env)."""
    return SandboxSync.create(
        IMAGE,
        connection_config=connection(),
        extensions=EXTENSIONS,
        metadata={"suite": "hybox-e2e-py", "run": RUN_ID, "role": role},
        timeout=timedelta(minutes=5),
    )


@pytest.fixture(scope="module")
def manager():
    mgr = SandboxManagerSync.create(connection_config=connection())
    yield mgr
    mgr.close()


@pytest.fixture(scope="module")
def sandbox():
    sbx = create_sandbox("default")
    yield sbx
    try:
        sbx.kill()
    except Exception:
        pass
    sbx.close()


@pytest.fixture(scope="module")
def interpreter(sandbox):
    # Strict readiness is covered by its own test; here it is skipped so the code
    # tests report their own failures.
    ci = CodeInterpreterSync.create(sandbox, skip_health_check=True)
    yield ci
    ci.close()


@pytest.fixture(scope="module")
def second_sandbox():
    """The second sandbox of the list and kill tests: on wasm the
    code-interpreter image (whose routing to wasm is tested), elsewhere one
    more sandbox of the kind under test."""
    if WASM:
        sbx = SandboxSync.create(
            "opensandbox/code-interpreter:latest",
            connection_config=connection(),
            entrypoint=["/opt/code-interpreter/code-interpreter.sh"],
            metadata={"suite": "hybox-e2e-py", "run": RUN_ID, "role": "code-interpreter"},
            timeout=timedelta(minutes=5),
        )
    else:
        sbx = create_sandbox("second")
    yield sbx
    try:
        sbx.kill()
    except Exception:
        pass
    sbx.close()


def test_create_and_get(sandbox):
    assert UUID_V4.match(sandbox.id)
    info = sandbox.get_info()
    assert info.id == sandbox.id
    assert info.status.state == "Running"
    assert info.image is not None and info.image.image == IMAGE
    if RUNTIME:
        assert (info.extensions or {}).get("hybox.io/runtime") == RUNTIME
    assert info.entrypoint == ["tail", "-f", "/dev/null"]
    assert info.metadata["run"] == RUN_ID
    assert info.metadata["suite"] == "hybox-e2e-py"
    assert info.expires_at is not None
    lifetime = (info.expires_at - info.created_at).total_seconds()
    assert abs(lifetime - 300) <= 10, lifetime
    assert sandbox.is_healthy()


def test_renew(sandbox):
    t0 = datetime.now(timezone.utc)
    res = sandbox.renew(timedelta(minutes=20))
    delta = (res.expires_at - t0).total_seconds()
    assert 1190 < delta < 1210, delta
    info = sandbox.get_info()
    assert abs((info.expires_at - res.expires_at).total_seconds()) < 2


def test_patch_metadata(sandbox):
    info = sandbox.patch_metadata({"extra": "yes"})
    assert info.metadata["extra"] == "yes"
    assert info.metadata["run"] == RUN_ID
    info = sandbox.patch_metadata({"extra": None})
    assert "extra" not in info.metadata


def test_command_stdout_and_exit_code(sandbox):
    ex = command(sandbox, "echo hi; echo there; exit 3")
    assert [m.text for m in ex.logs.stdout] == ["hi", "there"]
    assert ex.exit_code == 3
    assert ex.error is not None and ex.error.value == "3"
    assert ex.id

    ok = command(sandbox, "echo fine")
    assert ok.exit_code == 0
    assert ok.error is None
    assert ok.complete is not None
    assert [m.text for m in ok.logs.stdout] == ["fine"]


def test_background_command(sandbox):
    ex = sandbox.commands.run(
        "echo bg-start; sleep 1; echo bg-end; exit 2",
        opts=RunCommandOpts(background=True),
    )
    assert ex.id
    deadline = time.monotonic() + 20
    status = sandbox.commands.get_command_status(ex.id)
    while status.running and time.monotonic() < deadline:
        time.sleep(0.2)
        status = sandbox.commands.get_command_status(ex.id)
    assert status.running is False, "background command did not finish in 20s"
    assert status.id == ex.id
    assert status.exit_code == 2
    assert status.started_at is not None
    assert status.finished_at is not None
    logs = sandbox.commands.get_background_command_logs(ex.id)
    assert re.search(r"bg-start[\s\S]*bg-end", logs.content), logs.content
    assert isinstance(logs.cursor, int)
    more = sandbox.commands.get_background_command_logs(ex.id, cursor=logs.cursor)
    assert more.content == ""


def test_python_state_expression_and_exception(interpreter):
    codes = interpreter.codes
    ctx = codes.create_context(SupportedLanguageSync.PYTHON)
    assert ctx.id
    assert ctx.language == "python"

    first = run(codes, "x = 41\nprint('set x')", context=ctx)
    assert first.error is None
    assert stdout_text(first).strip() == "set x"
    second = run(codes, "x + 1", context=ctx)
    assert second.error is None
    assert result_texts(second) == ["42"]
    assert second.complete is not None
    assert second.id, "init event must carry the execution id"
    if first.execution_count is not None or second.execution_count is not None:
        assert second.execution_count > first.execution_count

    expr = run(codes, "a = 6\nb = 7\na * b", context=ctx)
    assert result_texts(expr) == ["42"]

    boom = run(codes, "1 / 0", context=ctx)
    assert boom.error is not None
    assert boom.error.name == "ZeroDivisionError"
    assert "division by zero" in boom.error.value
    assert boom.complete is None

    still = run(codes, "x", context=ctx)
    assert result_texts(still) == ["41"]

    platform = run(codes, "import sys\nsys.platform", context=ctx)
    assert result_texts(platform) == [repr(PLATFORM)]

    contexts = codes.list_contexts(SupportedLanguageSync.PYTHON)
    assert ctx.id in [c.id for c in contexts]
    codes.delete_context(ctx.id)
    assert ctx.id not in [c.id for c in codes.list_contexts(SupportedLanguageSync.PYTHON)]


def test_python_default_context(interpreter):
    one = run(interpreter.codes, "dflt = 'kept'")
    assert one.error is None
    two = run(interpreter.codes, "dflt")
    assert result_texts(two) == ["'kept'"]


def test_javascript_state(interpreter):
    codes = interpreter.codes
    ctx = codes.create_context(SupportedLanguageSync.JAVASCRIPT)
    assert ctx.language == "javascript"
    first = run(codes, "var y = 41;", context=ctx)
    assert first.error is None
    second = run(codes, "y + 1", context=ctx)
    assert second.error is None
    assert result_texts(second) == ["42"]
    log = run(codes, "console.log('from js')", context=ctx)
    assert stdout_text(log).strip() == "from js"
    boom = run(codes, "throw new TypeError('boom')", context=ctx)
    assert boom.error is not None
    assert boom.error.name == "TypeError"
    assert "boom" in boom.error.value


def test_typescript_state(interpreter):
    codes = interpreter.codes
    ctx = codes.create_context(SupportedLanguageSync.TYPESCRIPT)
    assert ctx.language == "typescript"
    first = run(codes, "interface P { n: number }\nconst p: P = { n: 41 }", context=ctx)
    assert first.error is None
    second = run(codes, "p.n + 1", context=ctx)
    assert second.error is None
    assert result_texts(second) == ["42"]
    # the exception is on TypeScript line 4; the JavaScript has it on line 1
    boom = run(codes, "type T = {\n  a: string\n}\nthrow new TypeError('boom')", context=ctx)
    assert boom.error is not None
    assert boom.error.name == "TypeError"
    assert any(":4" in line for line in boom.error.traceback), boom.error.traceback


def test_bash_state(interpreter):
    codes = interpreter.codes
    ctx = codes.create_context(SupportedLanguageSync.BASH)
    assert ctx.language == "bash"
    assert run(codes, "N=41\ncd /tmp", context=ctx).error is None
    second = run(codes, "echo $((N + 1)) $(pwd)", context=ctx)
    assert second.error is None
    assert stdout_text(second) == "42 /tmp\n"
    fail = run(codes, "(exit 3)", context=ctx)
    assert fail.error is not None and fail.error.value == "3"


def test_java_and_go_where_missing(interpreter):
    # wasm has neither (the error names the container tier); the python test
    # image has neither installed (the error lists what it has).
    for lang in (SupportedLanguageSync.JAVA, SupportedLanguageSync.GO):
        err = api_error(lambda: interpreter.codes.create_context(lang), [400])
        text = str(err).lower()
        assert ("container" in text) if WASM else ("available" in text), text


@pytest.mark.skipif(
    WASM or not LANG_IMAGE,
    reason="container passes only, with HYBOX_E2E_LANG_IMAGE (an image with a JDK and Go) set",
)
def test_java_and_go_state():
    sbx = SandboxSync.create(
        LANG_IMAGE, connection_config=connection(), extensions=EXTENSIONS,
        metadata={"suite": "hybox-e2e-py", "run": RUN_ID + "-langs", "role": "langs"},
        timeout=timedelta(minutes=5),
    )
    try:
        codes = CodeInterpreterSync.create(sbx, skip_health_check=True).codes
        java = codes.create_context(SupportedLanguageSync.JAVA)
        assert run(codes, "int x = 41;\nint twice(int n) { return 2 * n; }", context=java).error is None
        assert result_texts(run(codes, "twice(x) - x + 1", context=java)) == ["42"]
        boom = run(codes, "Object o = null;\no.toString();", context=java)
        assert boom.error is not None and "NullPointerException" in boom.error.name
        go = codes.create_context(SupportedLanguageSync.GO)
        assert run(codes, 'import "fmt"\nfunc twice(n int) int { return 2 * n }', context=go).error is None
        out = run(codes, "fmt.Println(twice(21))", context=go)
        assert out.error is None, out.error
        assert stdout_text(out) == "42\n"
        bad = run(codes, "var y int = \"no\"", context=go)
        assert bad.error is not None
    finally:
        sbx.kill()
        sbx.close()


def test_files(sandbox, interpreter):
    path = f"{WORK_DIR}/hello.txt"
    content = "hello hybox\n"
    sandbox.files.write_files(
        [
            WriteEntry(path=path, data=content),
            WriteEntry(path=f"{WORK_DIR}/other.md", data=b"# other"),
        ]
    )
    assert sandbox.files.read_file(path) == content

    infos = sandbox.files.get_file_info([path])
    assert infos[path].path == path
    assert infos[path].size == len(content.encode())
    assert infos[path].entry_type == "file"
    assert infos[path].mode == 755  # write_file's default mode, octal digits as decimal

    found = sandbox.files.search(SearchEntry(path=WORK_DIR, pattern="*.txt"))
    assert [f.path for f in found] == [path]

    listed = sandbox.files.list_directory(DirectoryListEntry(path=WORK_DIR))
    assert sorted(f.path for f in listed) == [f"{WORK_DIR}/hello.txt", f"{WORK_DIR}/other.md"]

    cat = command(sandbox, f"cat {path}")
    assert [m.text for m in cat.logs.stdout] == ["hello hybox"]
    py = run(interpreter.codes, f"open({path!r}).read()")
    assert result_texts(py) == ["'hello hybox\\n'"]

    sandbox.files.delete_files([path])
    assert sandbox.files.search(SearchEntry(path=WORK_DIR, pattern="*.txt")) == []
    with pytest.raises(Exception) as excinfo:
        sandbox.files.read_file(path)
    status = getattr(excinfo.value, "status_code", None)
    cause = getattr(excinfo.value, "__cause__", None)
    if status is None and cause is not None:
        status = getattr(getattr(cause, "response", None), "status_code", None)
    assert status == 404, repr(excinfo.value)


def test_looks_like_linux(sandbox):
    ex = command(sandbox, "id -u nobody; id -g nobody; test -r /etc/passwd && test -r /etc/os-release && echo etc")
    assert [m.text for m in ex.logs.stdout] == ["65534", "65534", "etc"]
    bad = command(sandbox, "id no-such-user-e2e")
    assert bad.exit_code == 1
    if WASM:
        os_ex = command(sandbox, ". /etc/os-release; echo $ID; whoami; id -gn nobody")
        assert [m.text for m in os_ex.logs.stdout] == ["hybox", "user", "nogroup"]
    path = f"{WORK_DIR}/owned.txt"
    sandbox.files.write_files([WriteEntry(path=path, data="x", owner="nobody", group="nogroup")])
    info = sandbox.files.get_file_info([path])[path]
    assert (info.owner, info.group) == ("nobody", "nogroup")
    sandbox.files.delete_files([path])


def test_renew_on_access():
    sbx = SandboxSync.create(
        IMAGE,
        connection_config=connection(),
        extensions={**(EXTENSIONS or {}), "access.renew.extend.seconds": "300"},
        metadata={"suite": "hybox-e2e-py", "run": RUN_ID + "-renew", "role": "renew"},
        timeout=timedelta(seconds=60),
    )
    try:
        command(sbx, "echo hi")
        info = sbx.get_info()
        # Created with 60 s to live; traffic through the proxy route moved the
        # expiry to about 300 s after it (within the documented minute).
        lifetime = (info.expires_at - info.created_at).total_seconds()
        assert lifetime > 250, lifetime
    finally:
        sbx.kill()
        sbx.close()


@pytest.mark.skipif(
    not HOST_DIR,
    reason="HYBOX_E2E_HOST_DIR is not set: the server allows no host volume (scripts/e2e.sh sets it when it runs as root)",
)
def test_volumes():
    claim = f"e2e-py-{RUN_ID[:8]}"
    name = f"py-{RUN_ID[:8]}.txt"
    meta = {"suite": "hybox-e2e-py", "run": RUN_ID + "-volumes", "role": "volumes"}

    def make(volumes):
        return SandboxSync.create(
            IMAGE, connection_config=connection(), extensions=EXTENSIONS,
            metadata=meta, timeout=timedelta(minutes=5), volumes=volumes,
        )

    vols = [
        Volume(name="logs", host=Host(path=HOST_DIR), mount_path="/mnt/logs"),
        Volume(name="ro", host=Host(path=HOST_DIR), mount_path="/mnt/ro", read_only=True),
    ]
    if NO_PVC:
        print(f"named (pvc) volumes left out: {NO_PVC}")
    else:
        vols.append(Volume(name="shared", pvc=PVC(claim_name=claim, delete_on_sandbox_termination=True), mount_path="/data"))
    a = make(vols)
    try:
        b = None if NO_PVC else make([Volume(name="shared", pvc=PVC(claim_name=claim), mount_path="/shared")])
        try:
            w = command(a, f"echo from-a > /mnt/logs/{name}" + ("" if NO_PVC else " && echo pvc > /data/p.txt"))
            assert w.error is None, w.logs
            with open(os.path.join(HOST_DIR, name)) as f:
                assert f.read() == "from-a\n", "the write reached the host directory"
            assert a.files.read_file(f"/mnt/ro/{name}") == "from-a\n"
            ro = command(a, f"echo no > /mnt/ro/no-{name}")
            assert ro.error is not None or ro.exit_code != 0, "a read-only volume refuses writes"
            if b is not None:
                assert stdout_text(command(b, "cat /shared/p.txt")).strip() == "pvc"
        finally:
            if b is not None:
                b.kill()
                b.close()
    finally:
        a.kill()
        a.close()


def test_code_interpreter_strict_health_check(sandbox):
    # The default create runs the SDK's readiness probe: GET /ping plus a command
    # that checks the interpreter runtime is serving. It must pass, not time out.
    t0 = time.monotonic()
    try:
        ci = CodeInterpreterSync.create(sandbox, ready_timeout=timedelta(seconds=20))
    except SandboxReadyTimeoutException as err:
        # Say what the probe itself answers, not just that it timed out.
        probe = sandbox.commands.run(RUNTIME_PROCESS_CHECK_COMMAND)
        pytest.fail(
            f"strict health check timed out ({err}); its probe "
            f"{RUNTIME_PROCESS_CHECK_COMMAND!r} gives exit code {probe.exit_code}, "
            f"stdout {[m.text for m in probe.logs.stdout]}, "
            f"stderr {[m.text for m in probe.logs.stderr]}"
        )
    try:
        assert time.monotonic() - t0 < 20
        assert ci.is_healthy()
        r = run(ci.codes, "40 + 2")
        assert result_texts(r) == ["42"]
    finally:
        ci.close()


@pytest.mark.skipif(
    not WASM,
    reason=f"wasm-only: this pass runs {PASS}; the code-interpreter image routing is covered by the wasm pass",
)
def test_code_interpreter_image_routes_to_wasm(second_sandbox):
    ci_sandbox = second_sandbox
    info = ci_sandbox.get_info()
    assert info.status.state == "Running"
    assert info.image is not None
    assert info.image.image == "opensandbox/code-interpreter:latest"
    ci = CodeInterpreterSync.create(ci_sandbox, skip_health_check=True)
    try:
        ctx = ci.codes.create_context(SupportedLanguageSync.PYTHON)
        run(ci.codes, "x = 41", context=ctx)
        r = run(ci.codes, "import sys\n(x + 1, sys.platform)", context=ctx)
        assert result_texts(r) == ["(42, 'wasi')"]
    finally:
        ci.close()


def test_list_by_metadata_and_state(manager, sandbox, second_sandbox):
    mine = manager.list_sandbox_infos(SandboxFilter(metadata={"run": RUN_ID}))
    assert sorted(s.id for s in mine.sandbox_infos) == sorted([sandbox.id, second_sandbox.id])
    assert mine.pagination.total_items == 2
    assert mine.pagination.page == 1
    assert mine.pagination.has_next_page is False

    one = manager.list_sandbox_infos(
        SandboxFilter(metadata={"run": RUN_ID, "role": "default"})
    )
    assert [s.id for s in one.sandbox_infos] == [sandbox.id]

    running = manager.list_sandbox_infos(
        SandboxFilter(metadata={"run": RUN_ID}, states=["Running"])
    )
    assert len(running.sandbox_infos) == 2
    either = manager.list_sandbox_infos(
        SandboxFilter(metadata={"run": RUN_ID}, states=["Paused", "Running"])
    )
    assert len(either.sandbox_infos) == 2
    paused = manager.list_sandbox_infos(
        SandboxFilter(metadata={"run": RUN_ID}, states=["Paused"])
    )
    assert paused.sandbox_infos == []
    none = manager.list_sandbox_infos(SandboxFilter(metadata={"run": "no-such-run"}))
    assert none.sandbox_infos == []

    page = manager.list_sandbox_infos(
        SandboxFilter(metadata={"run": RUN_ID}, page=1, page_size=1)
    )
    assert len(page.sandbox_infos) == 1
    assert page.pagination.has_next_page is True
    assert page.pagination.total_pages == 2


# ---------------------------------------------------------------------------
# Egress policy and credential vault (sandbox port 18080), through the SDK's
# public API only: get_egress_policy / patch_egress_rules / delete_egress_rules
# and sandbox.credential_vault. No traffic leaves the machine: only the API is
# exercised here (enforcement is tested in Go).
# ---------------------------------------------------------------------------

# Egress sandboxes carry their own run tag so that the list tests, which count
# the sandboxes tagged with RUN_ID, do not see them.
EGRESS_RUN = f"{RUN_ID}-egress"
POLICY_RULES = [("allow", "api.example.com"), ("deny", "*.evil.example")]
SECRET = f"hybox-e2e-secret-{uuid.uuid4()}"
SECRET2 = f"hybox-e2e-rotated-{uuid.uuid4()}"
CREDENTIAL = "api-token"
BINDING = "api-bearer"
BINDING_MATCH = {
    "schemes": ["https"],
    "ports": [443],
    "hosts": ["api.example.com"],
    "paths": ["/*"],
}
EGRESS_PATH = re.compile(r"/(policy|credential-vault)(/|\?|$)")


class _TeeStream(httpx.SyncByteStream):
    """A response stream that hands the bytes it carried to sink when closed."""

    def __init__(self, inner: httpx.SyncByteStream, sink) -> None:
        self._inner = inner
        self._sink = sink
        self._chunks: list[bytes] = []

    def __iter__(self):
        for chunk in self._inner:
            self._chunks.append(chunk)
            yield chunk

    def close(self) -> None:
        self._inner.close()
        self._sink(b"".join(self._chunks))


class RecordingTransport(httpx.BaseTransport):
    """The httpx transport handed to the SDK (ConnectionConfigSync.transport):
    it records every egress API response body as it came off the wire. The SDK
    parses vault state into its own models, so a leaked secret would only show
    here."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.bodies: list[tuple[str, int, bytes]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        url = str(request.url)
        if not EGRESS_PATH.search(request.url.path):
            return response
        status = response.status_code
        return httpx.Response(
            status_code=status,
            headers=response.headers,
            stream=_TeeStream(
                response.stream, lambda body: self.bodies.append((url, status, body))
            ),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


def create_egress_sandbox(role: str, transport=None, **kwargs) -> SandboxSync:
    config = ConnectionConfigSync(
        domain=BASE_URL,
        api_key=API_KEY,
        request_timeout=timedelta(seconds=60),
        **({"transport": transport} if transport is not None else {}),
    )
    return SandboxSync.create(
        IMAGE,
        connection_config=config,
        extensions=EXTENSIONS,
        metadata={"suite": "hybox-e2e-py", "run": EGRESS_RUN, "role": role},
        timeout=timedelta(minutes=5),
        **kwargs,
    )


def rules_of(policy: NetworkPolicy) -> list[tuple[str, str]]:
    return [(r.action, r.target) for r in policy.egress or []]


def api_error(call, statuses):
    """call() must fail with the SDK's API exception, with one of statuses."""
    with pytest.raises(SandboxApiException) as excinfo:
        call()
    assert excinfo.value.status_code in statuses, repr(excinfo.value)
    return excinfo.value


def as_json(value) -> str:
    def plain(v):
        if isinstance(v, list):
            return [plain(x) for x in v]
        if hasattr(v, "model_dump"):
            return v.model_dump(mode="json", by_alias=True)
        return v

    return json.dumps(plain(value))


def vault_request(secret: str, hosts: list[str] | None = None) -> dict:
    return {
        "credentials": [
            Credential(name=CREDENTIAL, source=InlineCredentialSource(value=secret))
        ],
        "bindings": [
            CredentialBinding(
                name=BINDING,
                match={**BINDING_MATCH, **({"hosts": hosts} if hosts else {})},
                auth=CredentialAuth(type="bearer", credential=CREDENTIAL),
            )
        ],
    }


@pytest.fixture(scope="module")
def egress_wire():
    transport = RecordingTransport()
    yield transport
    transport.close()


@pytest.fixture(scope="module")
def egress_sandbox(egress_wire):
    """A sandbox with a deny-by-default network policy and the credential proxy."""
    if EGRESS_REFUSED:
        pytest.skip(f"egress policies are refused on this pass ({EGRESS_REFUSED}): test_egress_refused checks that")
    sbx = create_egress_sandbox(
        "egress",
        transport=egress_wire,
        network_policy=NetworkPolicy(
            default_action="deny",
            egress=[NetworkRule(action=a, target=t) for a, t in POLICY_RULES],
        ),
        credential_proxy=CredentialProxyConfig(enabled=True),
    )
    yield sbx
    try:
        sbx.kill()
    except Exception:
        pass
    sbx.close()


def test_egress_rules(egress_sandbox):
    sbx = egress_sandbox
    initial = sbx.get_egress_policy()
    assert initial.default_action == "deny"
    assert rules_of(initial) == POLICY_RULES

    sbx.patch_egress_rules([NetworkRule(action="allow", target="pypi.org")])
    patched = sbx.get_egress_policy()
    assert patched.default_action == "deny", "a patch keeps defaultAction"
    # The new rule comes first, the others keep their order.
    assert rules_of(patched) == [("allow", "pypi.org"), *POLICY_RULES]

    # A rule for a target already present replaces it and takes priority.
    sbx.patch_egress_rules([NetworkRule(action="allow", target="*.evil.example")])
    assert rules_of(sbx.get_egress_policy()) == [
        ("allow", "*.evil.example"),
        ("allow", "pypi.org"),
        ("allow", "api.example.com"),
    ]

    # Unknown targets are ignored.
    sbx.delete_egress_rules(["*.evil.example", "pypi.org", "absent.example.org"])
    pruned = sbx.get_egress_policy()
    assert pruned.default_action == "deny", "a delete keeps defaultAction"
    assert rules_of(pruned) == [("allow", "api.example.com")]

    err = api_error(
        lambda: sbx.patch_egress_rules([NetworkRule(action="allow", target="not a host!")]),
        [400],
    )
    assert err.error is not None and err.error.code, repr(err)
    # A refused patch changes nothing.
    assert rules_of(sbx.get_egress_policy()) == [("allow", "api.example.com")]


def test_credential_vault(egress_sandbox, egress_wire):
    vault = egress_sandbox.credential_vault
    results = []

    # Nothing yet.
    api_error(vault.get, [404])
    # A binding whose host the network policy does not allow is refused.
    api_error(
        lambda: vault.create(**vault_request(SECRET, hosts=["not-allowed.example.org"])),
        [400, 403, 409, 412, 422],
    )
    api_error(vault.get, [404])

    state = vault.create(**vault_request(SECRET))
    results.append(state)
    assert state.revision == 1
    assert state.credentials == [
        CredentialMetadata(name=CREDENTIAL, source_type="inline", revision=1)
    ]
    assert len(state.bindings) == 1
    binding = state.bindings[0]
    assert binding.name == BINDING
    assert binding.revision == 1
    assert binding.match is not None
    assert binding.match.hosts == ["api.example.com"]
    assert binding.match.schemes == ["https"]
    assert binding.match.paths == ["/*"]
    assert binding.auth is not None and binding.auth.type == "bearer"

    got = vault.get()
    results.append(got)
    assert got == state

    creds = vault.list_credentials()
    cred = vault.get_credential(CREDENTIAL)
    bindings = vault.list_bindings()
    one = vault.get_binding(BINDING)
    results += [creds, cred, bindings, one]
    assert creds == state.credentials
    assert cred == state.credentials[0]
    assert bindings == state.bindings
    assert one == binding
    api_error(lambda: vault.get_credential("no-such-credential"), [404])
    api_error(lambda: vault.get_binding("no-such-binding"), [404])

    rotated = vault.patch(
        expected_revision=got.revision,
        credentials=CredentialMutationSet(
            replace=[Credential(name=CREDENTIAL, source=InlineCredentialSource(value=SECRET2))]
        ),
    )
    results.append(rotated)
    assert rotated.revision == got.revision + 1
    assert [(c.name, c.source_type) for c in rotated.credentials] == [(CREDENTIAL, "inline")]
    assert rotated.credentials[0].revision > state.credentials[0].revision, (
        "a replaced credential gets a new revision"
    )
    assert [b.name for b in rotated.bindings] == [BINDING]

    # A stale expectedRevision is refused and changes nothing.
    api_error(
        lambda: vault.patch(
            expected_revision=got.revision,
            credentials=CredentialMutationSet(
                replace=[Credential(name=CREDENTIAL, source=InlineCredentialSource(value=SECRET))]
            ),
        ),
        [409, 412],
    )
    current = vault.get()
    results.append(current)
    assert current == rotated

    text = as_json(results)
    assert SECRET not in text and SECRET2 not in text, text
    bodies = [b for b in egress_wire.bodies if "/credential-vault" in b[0]]
    assert len(bodies) >= len(results), f"saw {len(bodies)} credential-vault responses"
    for url, status, body in bodies:
        assert SECRET.encode() not in body and SECRET2.encode() not in body, (
            f"{url} ({status}) answered a credential value: {body!r}"
        )

    vault.delete()
    api_error(vault.get, [404])
    api_error(vault.list_credentials, [404])


def test_egress_refused():
    """Where the runtime cannot enforce a policy, a create with one is a 400 NOT_SUPPORTED that says why."""
    if not EGRESS_REFUSED:
        pytest.skip("this pass enforces egress policies")
    for kwargs in (
        {"network_policy": NetworkPolicy(default_action="deny", egress=[NetworkRule(action="allow", target="api.example.com")])},
        {"network_policy": NetworkPolicy(default_action="deny", egress=[]), "credential_proxy": CredentialProxyConfig(enabled=True)},
    ):
        err = api_error(lambda: create_egress_sandbox("egress-refused", **kwargs), [400])
        assert err.error is not None and err.error.code == "NOT_SUPPORTED", repr(err)
        assert err.error.message, repr(err)


def test_egress_without_network_policy():
    sbx = create_egress_sandbox("egress-open")
    try:
        policy = sbx.get_egress_policy()
        assert policy.default_action == "allow"
        assert not policy.egress
        # The vault needs credentialProxy (and a network policy) at create.
        api_error(
            lambda: sbx.credential_vault.create(**vault_request(SECRET)),
            [400, 403, 409, 412],
        )
    finally:
        try:
            sbx.kill()
        finally:
            sbx.close()


def test_wrong_api_key_is_401():
    bad = SandboxManagerSync.create(connection_config=connection("definitely-wrong-key"))
    try:
        with pytest.raises(SandboxApiException) as excinfo:
            bad.list_sandbox_infos(SandboxFilter())
        assert excinfo.value.status_code == 401
        assert excinfo.value.error.code == "INVALID_API_KEY"
    finally:
        bad.close()


def test_kill(manager, sandbox, second_sandbox):
    second_sandbox.kill()
    try:
        info = manager.get_sandbox_info(second_sandbox.id)
        assert info.status.state == "Terminated"
    except SandboxApiException as err:
        assert err.status_code == 404, err
    running = manager.list_sandbox_infos(
        SandboxFilter(metadata={"run": RUN_ID}, states=["Running"])
    )
    assert [s.id for s in running.sandbox_infos] == [sandbox.id]
