"""Lifecycle against a real server: create, connect, info, list, timeouts, pause, endpoints, kill."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest

import hybox
from conftest import Server


def test_installed_package_is_tested(server: Server) -> None:
    # the suite runs against the installed wheel, not the source tree
    here = Path(__file__).resolve().parents[1] / "hybox"
    pkg = Path(hybox.__file__).resolve().parent
    assert pkg != here, f"hybox imported from the source tree {pkg}"
    assert (pkg / "py.typed").exists()
    assert (pkg / "_models.py").exists()


def test_create_context_manager_kills(server: Server) -> None:
    with hybox.Sandbox.create(metadata={"suite": "py", "case": "cm"}) as sb:
        assert uuid.UUID(sb.id).version == 4
        assert sb.info.status.state.root == "Running"
        assert sb.is_running()
        sid = sb.id
    with pytest.raises(hybox.NotFoundError):
        hybox.Sandbox.connect(sid)


def test_connect_info_list_timeout_metadata(server: Server) -> None:
    tag = uuid.uuid4().hex
    sb = hybox.Sandbox.create(metadata={"suite": "py", "tag": tag}, timeout=120)
    try:
        other = hybox.Sandbox.connect(sb.id)
        assert other.get_info().id == sb.info.id
        other.close()

        page = hybox.Sandbox.list(metadata={"tag": tag})
        assert [str(s.id) for s in page.items] == [sb.id]
        assert hybox.Sandbox.list(metadata={"tag": tag}, state="Paused").items == []
        assert len(hybox.Sandbox.list(metadata={"tag": tag}, state=["paused", "running"]).items) == 1

        before = sb.get_info().expiresAt
        assert before is not None
        new = sb.set_timeout(3600)
        assert new > before
        when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=900)
        got = sb.renew(when)
        assert abs((got - when).total_seconds()) < 1

        info = sb.patch_metadata({"tag": None, "added": "yes"})
        assert info.metadata.root.get("added") == "yes" and "tag" not in info.metadata.root

        ep = sb.endpoint(hybox.EXECD_PORT)
        assert "/sandboxes/" in ep.endpoint and "://" not in ep.endpoint
        assert ep.headers, "the execd endpoint carries the sandbox token"
        url, headers = sb.endpoint_url(hybox.EXECD_PORT)
        assert url.startswith("http://") and headers == ep.headers
    finally:
        sb.kill()
    sb.kill()  # killing a gone sandbox is not an error


def test_pause_resume(server: Server) -> None:
    with hybox.Sandbox.create() as sb:
        sb.code.run("x = 41")
        sb.pause()
        assert sb.get_info().status.state.root == "Paused"
        with pytest.raises(hybox.ConflictError) as e:
            sb.commands.run("echo no")
        assert e.value.code == "SANDBOX_PAUSED"
        sb.resume()
        assert sb.code.run("x + 1").text == "42"


async def test_async_sandbox(server: Server) -> None:
    lines: list[str] = []

    async def on_stdout(line: str) -> None:
        lines.append(line)

    async with await hybox.AsyncSandbox.create() as sb:
        r = await sb.commands.run("echo a; echo b", on_stdout=on_stdout)
        assert r.exit_code == 0 and lines == ["a", "b"]
        x = await sb.code.run("6 * 7")
        assert x.text == "42"
        await sb.files.write("/f.txt", "async")
        assert await sb.files.read("/f.txt") == "async"
        sid = sb.id
    with pytest.raises(hybox.NotFoundError):
        await hybox.AsyncSandbox.connect(sid)


def test_one_shot_run(server: Server) -> None:
    out: list[str] = []
    x = hybox.run("print('hi')\n2 ** 10", on_stdout=out.append)
    assert x.stdout == "hi\n" and "".join(out) == "hi\n"
    assert x.text == "1024"
    assert hybox.run("console.log(1 + 1)", language="javascript").stdout.strip() == "2"
    err = hybox.run("raise ValueError('nope')")
    assert err.error is not None and err.error.name == "ValueError"
    with pytest.raises(hybox.ExecutionError):
        err.check()


def test_config_from_env_fallback(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYBOX_DOMAIN")
    monkeypatch.delenv("HYBOX_API_KEY")
    monkeypatch.setenv("OPEN_SANDBOX_DOMAIN", "http://" + server.domain)
    monkeypatch.setenv("OPEN_SANDBOX_API_KEY", server.api_key)
    cfg = hybox.ConnectionConfig()
    assert cfg.base_url() == f"http://{server.domain}/v1"
    assert hybox.run("1").text == "1"
    with pytest.raises(ValueError):
        hybox.ConnectionConfig(domain="ftp://x").base_url()


def test_ping_and_metrics(server: Server) -> None:
    with hybox.Sandbox.create() as sb:
        assert sb.ping()
        got = sb.metrics()
        assert got.cpu_count > 0
        assert got.mem_total_mib > 0
        assert got.timestamp > 0


def test_fork(server: Server) -> None:
    with hybox.Sandbox.create(metadata={"suite": "py", "case": "fork"}) as sb:
        sb.code.run("x = 1\nopen('/workspace/f', 'w').write('src')")
        forks = sb.fork(2, metadata={"copy": "yes"})
        try:
            assert len(forks) == 2
            assert all(f.info.metadata is not None and f.info.metadata.root["copy"] == "yes" for f in forks)
            forks[0].code.run("x = 2")
            assert sb.code.run("(x, open('/workspace/f').read())").text == "(1, 'src')"
            assert forks[1].code.run("x").text == "1"
            assert forks[0].code.run("x").text == "2"
        finally:
            for f in forks:
                f.kill()
