"""What executions return: rich results, logs, errors, command results."""

from __future__ import annotations

import base64
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ._errors import CommandExitError, ExecutionError, StreamError

__all__ = [
    "Result",
    "Logs",
    "ExecutionErrorInfo",
    "Execution",
    "CommandResult",
    "OutputHandler",
    "ResultHandler",
    "ErrorHandler",
]

OutputHandler = Callable[[str], "Awaitable[object] | object"]
"""A callback for output text; it may be a coroutine function."""

# Binary MIME types travel base64-encoded; everything else is text.
_TEXT_PREFIXES = ("text/", "image/svg+xml", "application/json", "application/javascript")


@dataclass
class Result:
    """One rich result of an execution: every representation the value had, by MIME type.

    ``text/plain`` is under ``"text/plain"`` here (the wire calls it ``text``); binary types
    such as ``image/png`` are base64 strings, as on the wire. The object implements
    ``_repr_*_`` so that a notebook displays it with its richest representation.
    """

    data: dict[str, str] = field(default_factory=dict)
    """Every representation by MIME type, each a string."""
    execution_count: int | None = None
    """The context's execution counter when the result was produced."""

    @classmethod
    def from_wire(cls, results: dict[str, Any], execution_count: int | None = None) -> Result:
        """A result from an event's ``results`` map (``text`` becomes ``text/plain``)."""
        data: dict[str, str] = {}
        for k, v in results.items():
            if not isinstance(v, str):
                v = json.dumps(v)
            data["text/plain" if k == "text" else k] = v
        return cls(data=data, execution_count=execution_count)

    def formats(self) -> list[str]:
        """The MIME types this result has."""
        return list(self.data)

    def get(self, mime: str) -> str | None:
        """The representation of one MIME type, or None."""
        return self.data.get(mime)

    @property
    def text(self) -> str | None:
        """``text/plain``: the value's repr."""
        return self.data.get("text/plain")

    @property
    def html(self) -> str | None:
        """``text/html``."""
        return self.data.get("text/html")

    @property
    def markdown(self) -> str | None:
        """``text/markdown``."""
        return self.data.get("text/markdown")

    @property
    def svg(self) -> str | None:
        """``image/svg+xml``."""
        return self.data.get("image/svg+xml")

    @property
    def png(self) -> str | None:
        """``image/png``, base64."""
        return self.data.get("image/png")

    @property
    def jpeg(self) -> str | None:
        """``image/jpeg``, base64."""
        return self.data.get("image/jpeg")

    @property
    def latex(self) -> str | None:
        """``text/latex``."""
        return self.data.get("text/latex")

    @property
    def json(self) -> Any:
        """``application/json``, decoded (None when absent)."""
        raw = self.data.get("application/json")
        return None if raw is None else json.loads(raw)

    def bytes_of(self, mime: str) -> bytes | None:
        """A representation as bytes: base64-decoded for binary types, UTF-8 otherwise."""
        raw = self.data.get(mime)
        if raw is None:
            return None
        if mime.startswith(_TEXT_PREFIXES) or mime.endswith(("+json", "+xml")):
            return raw.encode()
        return base64.b64decode(raw)

    # -- notebook display (IPython's rich display protocol) --
    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        bundle: dict[str, Any] = {}
        for k, v in self.data.items():
            if include is not None and k not in include:
                continue
            if exclude is not None and k in exclude:
                continue
            bundle[k] = json.loads(v) if k == "application/json" else v
        return bundle

    def _repr_html_(self) -> str | None:
        return self.html

    def _repr_markdown_(self) -> str | None:
        return self.markdown

    def _repr_svg_(self) -> str | None:
        return self.svg

    def _repr_png_(self) -> bytes | None:
        return self.bytes_of("image/png")

    def _repr_jpeg_(self) -> bytes | None:
        return self.bytes_of("image/jpeg")

    def _repr_latex_(self) -> str | None:
        return self.latex

    def _repr_json_(self) -> Any:
        return self.json

    def __str__(self) -> str:
        return self.text or ""


ResultHandler = Callable[[Result], "Awaitable[object] | object"]
"""A callback for rich results; it may be a coroutine function."""


@dataclass
class Logs:
    """An execution's output as it arrived: chunks (code) or lines (commands)."""

    stdout: list[str] = field(default_factory=list)
    """Standard output."""
    stderr: list[str] = field(default_factory=list)
    """Standard error."""


@dataclass
class ExecutionErrorInfo:
    """The exception an execution ended with."""

    name: str
    """The exception's name, such as ``ZeroDivisionError`` or ``TimeoutError``."""
    value: str
    """The exception's value (for a command, the exit code)."""
    traceback: list[str] = field(default_factory=list)
    """The traceback's lines."""


ErrorHandler = Callable[[ExecutionErrorInfo], "Awaitable[object] | object"]
"""A callback for an execution's error; it may be a coroutine function."""


@dataclass
class Execution:
    """A code execution: its results, output, error and counters."""

    id: str | None = None
    """The execution id (for :meth:`interrupt`)."""
    results: list[Result] = field(default_factory=list)
    """Rich results: ``display()`` outputs and the trailing expression's value, in order."""
    logs: Logs = field(default_factory=Logs)
    """Output as it arrived."""
    error: ExecutionErrorInfo | None = None
    """The exception the code raised, or None."""
    execution_count: int | None = None
    """The context's execution counter."""
    execution_time: float | None = None
    """Seconds the server took, when it completed."""

    @property
    def text(self) -> str | None:
        """The ``text/plain`` of the last result (a trailing expression's value comes last)."""
        return self.results[-1].text if self.results else None

    @property
    def stdout(self) -> str:
        """All standard output."""
        return "".join(self.logs.stdout)

    @property
    def stderr(self) -> str:
        """All standard error."""
        return "".join(self.logs.stderr)

    def check(self) -> Execution:
        """Returns self, or raises :class:`ExecutionError` if the code raised."""
        if self.error is not None:
            raise ExecutionError(self.error.name, self.error.value, self.error.traceback)
        return self

    def _repr_mimebundle_(
        self, include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
    ) -> dict[str, Any]:
        if self.results:
            return self.results[-1]._repr_mimebundle_(include, exclude)
        return {"text/plain": repr(self)}


@dataclass
class CommandResult:
    """A finished command: output, exit code, timing. A non-zero exit code is data."""

    id: str | None = None
    """The command id."""
    exit_code: int = 0
    """The exit code (non-zero when the command failed or was stopped)."""
    logs: Logs = field(default_factory=Logs)
    """Output lines, without their newlines."""
    error: ExecutionErrorInfo | None = None
    """The error event, if the command failed (``CommandExecError`` for a non-zero exit)."""
    execution_time: float | None = None
    """Seconds the server took, when it completed."""

    @property
    def stdout(self) -> str:
        """Standard output, each line ending with a newline."""
        return "".join(line + "\n" for line in self.logs.stdout)

    @property
    def stderr(self) -> str:
        """Standard error, each line ending with a newline."""
        return "".join(line + "\n" for line in self.logs.stderr)

    def check(self) -> CommandResult:
        """Returns self, or raises :class:`CommandExitError` for a non-zero exit code."""
        if self.exit_code != 0:
            raise CommandExitError(self.exit_code, self.stdout, self.stderr)
        return self


async def _call(fn: Callable[[Any], Any] | None, arg: Any) -> None:
    if fn is None:
        return
    r = fn(arg)
    if inspect.isawaitable(r):
        await r


@dataclass
class Handlers:
    """Callbacks of one execution (private)."""

    on_stdout: OutputHandler | None = None
    on_stderr: OutputHandler | None = None
    on_result: ResultHandler | None = None
    on_error: ErrorHandler | None = None
    on_init: Callable[[str], None] | None = None


def _error_info(ev: dict[str, Any]) -> ExecutionErrorInfo:
    e = ev.get("error") or {}
    return ExecutionErrorInfo(
        name=str(e.get("ename", "")), value=str(e.get("evalue", "")), traceback=list(e.get("traceback") or [])
    )


async def fold(events: Any, h: Handlers, x: Execution | CommandResult) -> bool:
    """Folds a stream's events into x, calling the handlers; True when the stream finished."""
    done = False
    async for ev in events:
        t = ev.get("type")
        if t == "stdout":
            text = ev.get("text", "")
            x.logs.stdout.append(text)
            await _call(h.on_stdout, text)
        elif t == "stderr":
            text = ev.get("text", "")
            x.logs.stderr.append(text)
            await _call(h.on_stderr, text)
        elif t == "result" and isinstance(x, Execution):
            r = Result.from_wire(ev.get("results") or {}, ev.get("execution_count"))
            x.results.append(r)
            await _call(h.on_result, r)
        elif t == "init":
            x.id = ev.get("text")
            if h.on_init is not None and x.id:
                h.on_init(x.id)
        elif t == "execution_count" and isinstance(x, Execution):
            x.execution_count = ev.get("execution_count")
        elif t == "execution_complete":
            et = ev.get("execution_time")
            x.execution_time = None if et is None else et / 1000
            done = True
        elif t == "error":
            info = _error_info(ev)
            x.error = info
            if isinstance(x, CommandResult) and info.name == "CommandExecError":
                try:
                    x.exit_code = int(info.value)
                except ValueError:
                    x.exit_code = 1
            elif isinstance(x, CommandResult):
                x.exit_code = x.exit_code or 1
            await _call(h.on_error, info)
            done = True
        if isinstance(x, Execution) and ev.get("execution_count"):
            x.execution_count = ev["execution_count"]
    return done


def now() -> float:
    """Monotonic seconds (for timing)."""
    return time.monotonic()


def incomplete() -> StreamError:
    """The error of a stream that ended before its execution finished."""
    return StreamError("the stream ended before the execution finished")
