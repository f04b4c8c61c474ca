"""Fixtures: a real `hybox serve` on a free loopback port, and a proxy that refuses on cue.

The server binary is $HYBOX_BIN (default: bin/hybox of the repository), the guests
$HYBOX_GUEST_DIR (default: build/guests). The server gets a temporary data directory (the
wazero compilation cache is shared in build/wazero-cache) and is stopped at the end, even
after a failure. With $HYBOX_SDK_CONTAINERD (a containerd socket; scripts/sdk-containers.sh
sets it as root) it has container sandboxes from $HYBOX_SDK_NAMESPACE, and runsc ones too
with $HYBOX_SDK_RUNSC.
"""

from __future__ import annotations

import asyncio
import http.server
import inspect
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
CONTAINERD = os.environ.get("HYBOX_SDK_CONTAINERD", "")
RUNSC = os.environ.get("HYBOX_SDK_RUNSC", "") if CONTAINERD else ""
NO_CONTAINERS = "container sandboxes are off (HYBOX_SDK_CONTAINERD names no containerd socket; " \
    "make test-sdk-python sets it as root)"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs ``async def`` tests on a fresh event loop."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {k: pyfuncitem.funcargs[k] for k in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**args))
        return True
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running hybox server."""

    domain: str
    api_key: str
    url: str


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    binary = Path(os.environ.get("HYBOX_BIN", REPO / "bin" / "hybox"))
    guests = Path(os.environ.get("HYBOX_GUEST_DIR", REPO / "build" / "guests"))
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run make build")
    data = Path(tempfile.mkdtemp(prefix="hybox-pysdk-"))
    cache = REPO / "build" / "wazero-cache"
    cache.mkdir(parents=True, exist_ok=True)
    (data / "wazero-cache").symlink_to(cache)
    port = _free_port()
    key = secrets.token_hex(16)
    env = {**os.environ, "HYBOX_VAULT_KEY": secrets.token_hex(32)}
    log = open(data / "server.log", "wb")
    args = [str(binary), "serve", "--addr", f"127.0.0.1:{port}", "--data-dir", str(data),
            "--api-key", key, "--guest-dir", str(guests)]
    if CONTAINERD:
        cfg = data / "hybox.toml"
        cfg.write_text(f'[oci]\nnamespace = "{os.environ.get("HYBOX_SDK_NAMESPACE", "hybox-test-sdk")}"\n')
        args += ["--config", str(cfg), "--containerd", CONTAINERD]
        if RUNSC:
            args += ["--runsc-binary", RUNSC]
    proc = subprocess.Popen(
        args,
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail("hybox serve exited: " + (data / "server.log").read_text()[-2000:])
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("hybox serve did not become healthy in 120 s")
            time.sleep(0.1)
        old = {k: os.environ.get(k) for k in ("HYBOX_DOMAIN", "HYBOX_API_KEY")}
        os.environ["HYBOX_DOMAIN"] = f"127.0.0.1:{port}"
        os.environ["HYBOX_API_KEY"] = key
        yield Server(domain=f"127.0.0.1:{port}", api_key=key, url=url)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(data, ignore_errors=True)


@dataclass
class Refuser:
    """A forwarding proxy in front of the server that answers the next ``refuse`` requests
    with ``status`` (and a ``Retry-After``), or stalls them by ``stall`` seconds."""

    domain: str
    refuse: int = 0
    status: int = 429
    retry_after: str | None = "0"
    stall: float = 0.0
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture()
def refuser(server: Server) -> Iterator[Refuser]:
    port = _free_port()
    state = Refuser(domain=f"127.0.0.1:{port}")
    upstream = httpx.Client(base_url=server.url, timeout=30)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            with state.lock:
                state.seen.append(f"{self.command} {self.path}")
                refuse = state.refuse > 0
                if refuse:
                    state.refuse -= 1
            if state.stall:
                time.sleep(state.stall)
            if refuse:
                msg = b'{"code":"TOO_MANY_EXECUTIONS","message":"busy, retry"}' if state.status == 429 else \
                    b'{"code":"UNAVAILABLE","message":"not now"}'
                self.send_response(state.status)
                self.send_header("Content-Type", "application/json")
                if state.retry_after is not None:
                    self.send_header("Retry-After", state.retry_after)
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            r = upstream.request(self.command, self.path, headers=headers, content=body)
            self.send_response(r.status_code)
            for k, v in r.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(r.content)))
            self.end_headers()
            self.wfile.write(r.content)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _any

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield state
    finally:
        srv.shutdown()
        srv.server_close()
        upstream.close()
