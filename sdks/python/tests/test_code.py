"""The code interpreter: results, rich results, display(), contexts, interrupts, timeouts."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest

import hybox
from conftest import Server

RICH = r'''
class Chart:
    def __repr__(self):
        return "Chart()"
    def _repr_html_(self):
        return "<b>chart</b>"
    def _repr_png_(self):
        return b"\x89PNG\r\n\x1a\n-fake"
Chart()
'''


@pytest.fixture()
def sb(server: Server):  # type: ignore[no-untyped-def]
    with hybox.Sandbox.create() as s:
        yield s


def test_run_result_logs_count(sb: hybox.Sandbox) -> None:
    x = sb.code.run("print('a')\nimport sys; print('b', file=sys.stderr)\n40 + 2")
    assert x.text == "42" and x.stdout == "a\n" and x.stderr == "b\n"
    assert x.error is None and x.execution_count is not None
    assert x.id
    y = sb.code.run("x = 1")
    assert y.results == [] and y.text is None
    assert (y.execution_count or 0) > (x.execution_count or 0)


def test_error_name_value_traceback(sb: hybox.Sandbox) -> None:
    errors: list[hybox.ExecutionErrorInfo] = []
    x = sb.code.run("def f():\n    1/0\nf()", on_error=errors.append)
    assert x.error is not None and x.error.name == "ZeroDivisionError"
    assert x.error.value == "division by zero"
    assert any("f()" in line for line in x.error.traceback)
    assert errors == [x.error]
    with pytest.raises(hybox.ExecutionError) as e:
        x.check()
    assert e.value.name == "ZeroDivisionError"


def test_rich_result_html_and_png(sb: hybox.Sandbox) -> None:
    x = sb.code.run(RICH)
    [r] = x.results
    assert set(r.formats()) == {"text/plain", "text/html", "image/png"}
    assert r.text == "Chart()" and r.html == "<b>chart</b>"
    assert r.png is not None and base64.b64decode(r.png) == b"\x89PNG\r\n\x1a\n-fake"
    # the result displays itself in a notebook
    bundle = r._repr_mimebundle_()
    assert bundle["text/html"] == "<b>chart</b>" and bundle["image/png"] == r.png
    assert r._repr_png_() == b"\x89PNG\r\n\x1a\n-fake"
    assert x._repr_mimebundle_()["text/plain"] == "Chart()"


def test_every_mime_type(sb: hybox.Sandbox) -> None:
    x = sb.code.run(r'''
class All:
    def _repr_markdown_(self): return "**md**"
    def _repr_svg_(self): return "<svg/>"
    def _repr_latex_(self): return ("$x^2$", {"isolated": True})
    def _repr_json_(self): return {"a": [1, 2]}
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": "bundle", "application/json": {"k": True}, "image/png": b"\x00\x01"}
    def _repr_html_(self): return "<i>also</i>"
display(All())
Bundle()
''')
    a, b = x.results
    assert a.markdown == "**md**" and a.svg == "<svg/>" and a.latex == "$x^2$"
    assert a.json == {"a": [1, 2]} and json.loads(a.data["application/json"]) == {"a": [1, 2]}
    assert a._repr_latex_() == "$x^2$" and a._repr_json_() == {"a": [1, 2]}
    assert b.text == "bundle" and b.json == {"k": True} and b.html == "<i>also</i>"
    assert b.bytes_of("image/png") == b"\x00\x01"
    assert all(isinstance(v, str) for r in x.results for v in r.data.values())


def test_display_streams_mid_execution(sb: hybox.Sandbox) -> None:
    seen: list[tuple[float, hybox.Result]] = []
    start = time.monotonic()
    x = sb.code.run(
        RICH.replace("Chart()\n", "") + "display(Chart())\nimport time\ntime.sleep(1)\n'end'",
        on_result=lambda r: seen.append((time.monotonic() - start, r)),
    )
    end = time.monotonic() - start
    assert [r.text for _, r in seen] == ["Chart()", "'end'"]
    assert seen[0][1].html == "<b>chart</b>"
    assert seen[0][0] < end - 0.7, (seen, end)
    assert x.text == "'end'"


def test_contexts(sb: hybox.Sandbox) -> None:
    c = sb.code.create_context("python")
    sb.code.run("v = 'in context'", context=c)
    assert sb.code.run("v", context=c.id).text == "'in context'"
    assert sb.code.run("'v' in dir()").text == "False"  # the default context is another one
    ids = [ctx.id for ctx in sb.code.list_contexts("python")]
    assert c.id in ids
    js = sb.code.create_context("javascript")
    assert sb.code.run("1 + 2", context=js).text == "3"
    assert js.id not in [ctx.id for ctx in sb.code.list_contexts("python")]
    sb.code.delete_context(c)
    assert c.id not in [ctx.id for ctx in sb.code.list_contexts()]
    with pytest.raises(hybox.NotFoundError):
        sb.code.run("1", context=c)


def test_typescript_and_bash_contexts(sb: hybox.Sandbox) -> None:
    ts = sb.code.create_context("typescript")
    assert sb.code.run("interface P { n: number }\nconst p: P = { n: 20 }", context=ts).error is None
    assert sb.code.run("p.n + 22", context=ts).text == "42"
    e = sb.code.run("type T = string\n\nthrow new RangeError('far')", context=ts).error
    assert e is not None and e.name == "RangeError" and any(":3" in line for line in e.traceback), e
    sh = sb.code.create_context("bash")
    sb.code.run("N=41; cd /tmp", context=sh)
    assert sb.code.run("echo $((N + 1)) $PWD", context=sh).stdout == "42 /tmp\n"
    assert {c.language.root for c in sb.code.list_contexts()} >= {"typescript", "bash"}


def test_timeout(sb: hybox.Sandbox) -> None:
    t = time.monotonic()
    x = sb.code.run("while True: pass", timeout=0.5)
    assert time.monotonic() - t < 5
    assert x.error is not None and x.error.name == "TimeoutError"
    assert sb.code.run("1 + 1").text == "2"


async def test_interrupt_and_busy(server: Server) -> None:
    async with await hybox.AsyncSandbox.create() as sb:
        ctx = await sb.code.create_context()
        started = asyncio.Event()
        task = asyncio.create_task(
            sb.code.run(
                "import time\nprint('go', flush=True)\nwhile True: time.sleep(0.01)",
                context=ctx,
                on_stdout=lambda _: started.set(),
            )
        )
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(hybox.BusyError) as e:
            await sb.code.run("1", context=ctx)
        assert e.value.code == "CONTEXT_BUSY" and e.value.status == 409
        await sb.code.interrupt(ctx.id)
        x = await asyncio.wait_for(task, 10)
        assert x.error is not None and x.error.name == "KeyboardInterrupt"
        assert (await sb.code.run("2 + 2", context=ctx)).text == "4"


async def test_cancel_interrupts_on_the_server(server: Server) -> None:
    async with await hybox.AsyncSandbox.create() as sb:
        ctx = await sb.code.create_context()
        started = asyncio.Event()
        task = asyncio.create_task(
            sb.code.run("import time\nprint('go', flush=True)\ntime.sleep(60)", context=ctx,
                        on_stdout=lambda _: started.set())
        )
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the context is free again at once: the server stopped the execution
        t = time.monotonic()
        while True:
            try:
                assert (await sb.code.run("'free'", context=ctx)).text == "'free'"
                break
            except hybox.BusyError:
                assert time.monotonic() - t < 5, "the execution goes on after the cancel"
                await asyncio.sleep(0.05)


def test_ctrl_c_interrupts_on_the_server(sb: hybox.Sandbox) -> None:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals need the main thread")
    ctx = sb.code.create_context()

    def on_alarm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.8)
        with pytest.raises(KeyboardInterrupt):
            sb.code.run("import time\ntime.sleep(60)", context=ctx)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    t = time.monotonic()
    while True:  # the server stopped the execution: the context is free again
        try:
            assert sb.code.run("'free'", context=ctx).text == "'free'"
            break
        except hybox.BusyError:
            assert time.monotonic() - t < 5, "the execution goes on after Ctrl-C"
            time.sleep(0.05)


def test_callbacks_may_call_the_sdk(sb: hybox.Sandbox) -> None:
    # synchronous callbacks run on the caller's thread: they may use the SDK themselves
    seen: list[str] = []

    def save(text: str) -> None:
        seen.append(text)
        sb.files.write("/seen.txt", "".join(seen))

    x = sb.code.run("print('saving')", on_stdout=save)
    assert x.error is None and sb.files.read("/seen.txt") == "saving\n"
