"""Container sandboxes through the real server (runc, and runsc when the server has it): a
Python code context in the plotting test image localhost/hybox/python-plot:3-bookworm
(Debian's python3-matplotlib and python3-numpy), where a figure is an image/png result and
display() of a rich object streams its MIME bundle as in wasm. One sandbox per runtime. Java and
Go code contexts in the code-interpreter test image localhost/hybox/code-interpreter:bookworm."""

from __future__ import annotations

import base64

import pytest

import hybox
from conftest import CONTAINERD, NO_CONTAINERS, RUNSC, Server

PLOT_IMAGE = "localhost/hybox/python-plot:3-bookworm"

RICH = """
class Card:
    def _repr_html_(self): return '<b>card</b>'
    def _repr_markdown_(self): return '*card*'
    def _repr_json_(self): return {'n': len(xs)}
    def __repr__(self): return 'Card()'
display(Card())
print('between')
40 + 2
"""


@pytest.mark.skipif(not CONTAINERD, reason=NO_CONTAINERS)
@pytest.mark.parametrize("runtime", [
    "runc",
    pytest.param("runsc", marks=pytest.mark.skipif(not RUNSC, reason="the server has no runsc (HYBOX_SDK_RUNSC)")),
])
def test_plot_image_code_context(server: Server, runtime: str) -> None:
    with hybox.Sandbox.create(PLOT_IMAGE, runtime=runtime) as sb:
        ctx = sb.code.create_context("python")
        setup = sb.code.run("import matplotlib\nimport numpy as np\nxs = np.linspace(0, 1, 5)\n"
                            "matplotlib.__version__", context=ctx)
        assert setup.error is None, setup.error
        assert setup.text is not None and setup.text.startswith("'3.")

        fig = sb.code.run("import matplotlib.pyplot as plt\nplt.plot(xs, xs ** 2)\nplt.show()\n"
                          "print('after')", context=ctx)
        assert fig.error is None, fig.error
        pngs = [r for r in fig.results if r.png is not None]
        assert len(pngs) == 1, [r.formats() for r in fig.results]
        assert pngs[0].png is not None
        assert base64.b64decode(pngs[0].png)[:8] == b"\x89PNG\r\n\x1a\n"
        assert pngs[0]._repr_png_() == base64.b64decode(pngs[0].png)
        assert fig.stdout == "after\n"

        seen: list[list[str]] = []
        rich = sb.code.run(RICH, context=ctx, on_result=lambda r: seen.append(sorted(r.formats())))
        assert rich.error is None, rich.error
        assert seen == [["application/json", "text/html", "text/markdown", "text/plain"], ["text/plain"]]
        card, value = rich.results
        assert card.html == "<b>card</b>" and card.markdown == "*card*" and card.json == {"n": 5}
        assert card._repr_html_() == "<b>card</b>"
        assert value.text == "42"
        assert any(c.id == ctx.id for c in sb.code.list_contexts())


@pytest.mark.skipif(not CONTAINERD, reason=NO_CONTAINERS)
def test_pools_and_volumes(server: Server) -> None:
    import time

    image = "localhost/hybox/python:3-bookworm"
    created = hybox.Pool.create("py-pool", image, runtime="runc", size=1)
    try:
        assert created.name == "py-pool"
        deadline = time.monotonic() + 90
        while hybox.Pool.get("py-pool").status.available != 1:
            assert time.monotonic() < deadline, "the pool never filled"
            time.sleep(0.05)
        assert any(p.name == "py-pool" for p in hybox.Pool.list())
        with hybox.Sandbox.create(image, runtime="runc", entrypoint=["sleep", "infinity"], env={"FROM": "pool"}) as sb:
            assert sb.commands.run("echo $FROM").stdout == "pool\n"
            assert hybox.Pool.get("py-pool").status.allocated == 1
        assert hybox.Pool.resize("py-pool", 0).capacitySpec.bufferMax == 0
        with pytest.raises(hybox.NotFoundError):
            hybox.Pool.get("none")
        with pytest.raises(hybox.ConflictError):
            hybox.Pool.create("py-pool", image)
        with pytest.raises(hybox.InvalidArgumentError):
            hybox.Pool.create("other", "localhost/none:1")
    finally:
        hybox.Pool.delete("py-pool")
    with pytest.raises(hybox.NotFoundError):
        hybox.Pool.get("py-pool")

    v = hybox.Volume.create("py-vol")
    assert v.name == "py-vol" and v.usedBy == []
    assert any(x.name == "py-vol" for x in hybox.Volume.list())
    with pytest.raises(hybox.ConflictError):
        hybox.Volume.create("py-vol")
    hybox.Volume.delete("py-vol")
    with pytest.raises(hybox.NotFoundError):
        hybox.Volume.get("py-vol")


CODE_IMAGE = "localhost/hybox/code-interpreter:bookworm"


@pytest.mark.skipif(not CONTAINERD, reason=NO_CONTAINERS)
def test_java_and_go_code_contexts(server: Server) -> None:
    """Java (JShell) and Go contexts of the code-interpreter image (JDK 17, Go) keep their state
    between runs; errors come back as the execution's error."""
    with hybox.Sandbox.create(CODE_IMAGE, runtime="runc") as sb:
        java = sb.code.create_context("java")
        assert sb.code.run("int x = 41;", context=java).error is None
        got = sb.code.run("x + 1", context=java)
        assert got.error is None and got.text == "42", got
        bad = sb.code.run("int y = nope;", context=java)
        assert bad.error is not None and bad.error.name == "CompilationError", bad.error

        go = sb.code.create_context("go")
        first = sb.code.run('import "fmt"\nfunc half(n int) int { return n / 2 }\nfmt.Println(half(84))',
                            context=go)
        assert first.error is None and first.stdout == "42\n", first
        second = sb.code.run("fmt.Println(half(10))", context=go)
        assert second.error is None and second.stdout == "5\n", second
        crash = sb.code.run('panic("boom")', context=go)
        assert crash.error is not None and crash.error.name == "panic" and crash.error.value == "boom", crash.error
        assert {c.language.root for c in sb.code.list_contexts()} >= {"java", "go"}
