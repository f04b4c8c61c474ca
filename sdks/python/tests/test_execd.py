"""The SDK against a stand-alone hybox-execd, the daemon of container sandboxes, on this host:
terminals and the native-CPython code path (rich results, matplotlib figures), which wasm
sandboxes do not have. The daemon runs as a host process with a temporary files root and an
access token; $HYBOX_EXECD_BIN (default bin/hybox-execd) is the binary.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import hybox
from conftest import REPO, _free_port
from hybox._sandbox import _Endpoint  # the one private name: point a handle at a bare execd
from hybox._transport import Transport


@pytest.fixture(scope="module")
def execd() -> Iterator[tuple[str, str]]:
    binary = Path(os.environ.get("HYBOX_EXECD_BIN", REPO / "bin" / "hybox-execd"))
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run make build")
    work = Path(tempfile.mkdtemp(prefix="hybox-pysdk-execd-"))
    (work / "root").mkdir()
    token = secrets.token_hex(16)
    (work / "token").write_text(token)
    port = _free_port()
    # python3 of the daemon's contexts is this virtualenv's interpreter
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    log = open(work / "execd.log", "wb")
    proc = subprocess.Popen(
        [str(binary), "-listen-tcp", f"127.0.0.1:{port}", "-listen-unix", "", "-listen-interpreter", "",
         "-root", str(work / "root"), "-access-token-file", str(work / "token"), "-subreaper"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/ping", headers={"X-EXECD-ACCESS-TOKEN": token}, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("hybox-execd did not start: " + (work / "execd.log").read_text()[-2000:])
            time.sleep(0.05)
        yield url, token
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def _handle(execd: tuple[str, str]) -> hybox.AsyncSandbox:
    url, token = execd
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    info = hybox.SandboxInfo.model_validate({
        "id": str(uuid.uuid4()), "image": {"uri": "host"}, "metadata": {}, "entrypoint": [],
        "status": {"state": "Running", "lastTransitionAt": now}, "createdAt": now,
    })
    sb = hybox.AsyncSandbox(info, Transport(hybox.ConnectionConfig(domain="127.0.0.1:9", api_key="unused")))
    sb._endpoints[hybox.EXECD_PORT] = _Endpoint(url, {"X-EXECD-ACCESS-TOKEN": token})
    return sb


async def test_pty(execd: tuple[str, str]) -> None:
    sb = _handle(execd)
    p = await sb.pty.create("bash --norc -i", cols=100, rows=30)
    await p.send_input("echo pty-$((40 + 2))\n")
    out = b""
    while b"pty-42" not in out:
        out += await p.read(10)
    await p.resize(120, 40)
    await p.send_input("stty size; exit 3\n")
    async for chunk in p.output():
        out += chunk
    assert b"40 120" in out
    assert await p.wait(10) == 3

    q = await sb.pty.create("sleep 60")
    await q.kill()
    assert await q.read(5) == b""  # the terminal is gone: its output has ended
    with pytest.raises(hybox.NotFoundError):
        await sb._send(hybox.EXECD_PORT, "GET", f"/pty/{q.id}")


async def test_native_python_rich_results(execd: tuple[str, str]) -> None:
    sb = _handle(execd)
    seen: list[hybox.Result] = []
    x = await sb.code.run(
        "class R:\n"
        "    def _repr_html_(self): return '<b>x</b>'\n"
        "    def _repr_png_(self): return b'\\x89PNG'\n"
        "    def _repr_mimebundle_(self, include=None, exclude=None): return {'text/markdown': '*m*'}\n"
        "display(R())\n"
        "R()",
        on_result=seen.append,
    )
    assert x.error is None and len(x.results) == 2 and seen == x.results
    r = x.results[1]
    assert r.html == "<b>x</b>" and r.markdown == "*m*" and r.png is not None
    assert base64.b64decode(r.png) == b"\x89PNG" and r.text is not None


async def test_matplotlib_figure_is_png(execd: tuple[str, str]) -> None:
    pytest.importorskip("matplotlib")
    sb = _handle(execd)
    x = await sb.code.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nprint('after')")
    assert x.error is None, x.error
    [fig] = x.results
    assert fig.png is not None and base64.b64decode(fig.png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert x.stdout == "after\n"
    # a figure left open is shown at the end of the cell, after the cell's value
    y = await sb.code.run("plt.plot([3, 2, 1])")
    assert [r.png is not None for r in y.results] == [False, True]
