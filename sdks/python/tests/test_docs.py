"""The README's quickstart, exactly as written, and the examples, against the real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CONTAINERD, NO_CONTAINERS, Server

SDK = Path(__file__).resolve().parents[1]


def _run(args: list[str], server: Server) -> str:
    env = {**os.environ, "HYBOX_DOMAIN": server.domain, "HYBOX_API_KEY": server.api_key}
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120,
                       cwd=SDK.parents[1] / "build")
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_readme_quickstart(server: Server) -> None:
    readme = (SDK / "README.md").read_text()
    quick = readme.split("## Quickstart", 1)[1]
    [code] = re.findall(r"```python\n(.*?)```", quick, re.S)[:1]
    out = _run(["-c", code], server)
    assert out.splitlines() == [
        "hello",
        "exit code 3",
        "area 12.566370614359172",
        "remember the milk",
        "42",
    ]


def test_example_code_interpreter(server: Server) -> None:
    out = _run([str(SDK / "examples" / "code_interpreter.py")], server)
    assert "step 2: error: NameError" in out
    assert "step 3: result (text/plain): 3.5" in out
    assert "result (text/plain, text/html)" in out


def test_example_egress_vault(server: Server) -> None:
    out = _run([str(SDK / "examples" / "egress_vault.py")], server)
    assert "Bearer s3cret-token" in out
    assert "example.com: URLError" in out


@pytest.mark.skipif(not CONTAINERD, reason=NO_CONTAINERS)
def test_example_web_server(server: Server) -> None:
    out = _run([str(SDK / "examples" / "web_server.py")], server)
    assert "hello from the sandbox" in out
