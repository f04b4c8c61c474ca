"""Shell commands, background commands, sessions and terminals (async implementation)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from . import _models as m
from ._execution import CommandResult, Handlers, OutputHandler

if TYPE_CHECKING:
    from ._sandbox import AsyncSandbox

__all__ = ["AsyncCommands", "AsyncCommandHandle", "AsyncSession", "AsyncPty", "AsyncPtySession", "CommandStatus"]

class CommandStatus(m.CommandStatus):
    """A command's status: ``running``, ``exit_code``, ``started_at``, ``finished_at``."""

_EXECD = 44772


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else max(1, int(seconds * 1000))


class AsyncCommands:
    """Shell commands in one sandbox (``sandbox.commands``)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    @overload
    async def run(
        self,
        cmd: str,
        *,
        background: Literal[False] = False,
        cwd: str | None = None,
        envs: Mapping[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        check: bool = False,
        uid: int | None = None,
        gid: int | None = None,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        cmd: str,
        *,
        background: Literal[True],
        cwd: str | None = None,
        envs: Mapping[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        check: bool = False,
        uid: int | None = None,
        gid: int | None = None,
    ) -> AsyncCommandHandle: ...

    @overload
    async def run(
        self,
        cmd: str,
        *,
        background: bool,
        cwd: str | None = None,
        envs: Mapping[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        check: bool = False,
        uid: int | None = None,
        gid: int | None = None,
    ) -> CommandResult | AsyncCommandHandle: ...

    async def run(
        self,
        cmd: str,
        *,
        background: bool = False,
        cwd: str | None = None,
        envs: Mapping[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        check: bool = False,
        uid: int | None = None,
        gid: int | None = None,
    ) -> CommandResult | AsyncCommandHandle:
        """Runs ``cmd`` in the sandbox's shell and returns a :class:`CommandResult`, or, with
        ``background=True``, an :class:`AsyncCommandHandle` as soon as it started.

        Output streams line by line to ``on_stdout``/``on_stderr`` (functions or coroutine
        functions) while the command runs. A non-zero exit code is data
        (``result.exit_code``); ``check=True`` raises :class:`CommandExitError` instead.
        ``timeout`` (seconds) stops the command on the server; cancelling the call kills it.
        """
        body: dict[str, Any] = {"command": cmd}
        if cwd is not None:
            body["cwd"] = cwd
        if envs:
            body["envs"] = dict(envs)
        if timeout is not None:
            body["timeout"] = _ms(timeout)
        if uid is not None:
            body["uid"] = uid
        if gid is not None:
            body["gid"] = gid
        if background:
            body["background"] = True
            res = CommandResult()
            await self._sb._stream("/command", body, Handlers(), res, "/command", None)
            if not res.id:
                from ._errors import StreamError

                raise StreamError("the server sent no command id")
            return AsyncCommandHandle(self._sb, res.id)
        res = CommandResult()
        await self._sb._stream(
            "/command", body, Handlers(on_stdout=on_stdout, on_stderr=on_stderr), res, "/command", timeout
        )
        return res.check() if check else res

    def connect(self, command_id: str) -> AsyncCommandHandle:
        """A handle on a background command by id."""
        return AsyncCommandHandle(self._sb, command_id)

    async def kill(self, command_id: str) -> None:
        """Kills a running command (its whole process group)."""
        await self._sb._send(_EXECD, "DELETE", "/command", params={"id": command_id})

    async def create_session(self, *, cwd: str | None = None, envs: Mapping[str, str] | None = None) -> AsyncSession:
        """Starts a persistent shell that keeps its working directory and environment between runs."""
        body: dict[str, Any] = {}
        if cwd is not None:
            body["cwd"] = cwd
        if envs:
            body["envs"] = dict(envs)
        data = await self._sb._call(_EXECD, "POST", "/session", json_body=body, idempotent=False)
        return AsyncSession(self._sb, m.SessionCreated.model_validate(data).session_id)


class AsyncCommandHandle:
    """A background command: poll its status and logs, wait for it, kill it."""

    def __init__(self, sandbox: AsyncSandbox, command_id: str) -> None:
        self._sb = sandbox
        self.id: str = command_id
        """The command id."""
        self._cursor = 0

    async def status(self) -> CommandStatus:
        """The command's status. Raises :class:`NotFoundError` for an unknown id."""
        data = await self._sb._call(_EXECD, "GET", f"/command/status/{self.id}")
        return CommandStatus.model_validate(data)

    async def logs(self, cursor: int | None = None) -> tuple[str, int]:
        """Output (stdout and stderr interleaved) from byte offset ``cursor`` (default: where
        the previous call stopped); returns the text and the next cursor."""
        c = self._cursor if cursor is None else cursor
        resp = await self._sb._send(_EXECD, "GET", f"/command/{self.id}/logs", params={"cursor": c})
        nxt = int(resp.headers.get("EXECD-COMMANDS-TAIL-CURSOR", c + len(resp.content)))
        self._cursor = nxt
        return resp.text, nxt

    async def wait(self, *, timeout: float | None = None, interval: float = 0.05) -> CommandResult:
        """Waits until the command ends and returns its exit code and its whole output
        (in ``stdout``). Raises :class:`TimeoutError` after ``timeout`` seconds."""
        from ._errors import TimeoutError as HyboxTimeout

        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(interval, 0.01)
        while True:
            st = await self.status()
            if not st.running:
                text, _ = await self.logs(0)
                res = CommandResult(id=self.id, exit_code=st.exit_code or 0)
                res.logs.stdout.extend(text.splitlines())
                return res
            if deadline is not None and time.monotonic() >= deadline:
                raise HyboxTimeout(0, "CLIENT_TIMEOUT", f"command {self.id} still running")
            await self._sb._t.sleep(delay)
            delay = min(delay * 2, interval if interval > 0 else 0.05)

    async def kill(self) -> None:
        """Kills the command (its whole process group)."""
        await self._sb._send(_EXECD, "DELETE", "/command", params={"id": self.id})

    def __repr__(self) -> str:
        return f"AsyncCommandHandle(id={self.id!r})"


class AsyncSession:
    """A persistent shell: ``cd`` and ``export`` carry over from one run to the next."""

    def __init__(self, sandbox: AsyncSandbox, session_id: str) -> None:
        self._sb = sandbox
        self.id: str = session_id
        """The session id."""

    async def run(
        self,
        cmd: str,
        *,
        timeout: float | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Runs ``cmd`` in the session, like :meth:`AsyncCommands.run` in the foreground.
        Raises :class:`BusyError` while another run of the session is going on."""
        body: dict[str, Any] = {"command": cmd}
        if timeout is not None:
            body["timeout"] = _ms(timeout)
        res = CommandResult()
        await self._sb._stream(
            f"/session/{self.id}/run", body, Handlers(on_stdout=on_stdout, on_stderr=on_stderr), res, None, timeout
        )
        return res.check() if check else res

    async def close(self) -> None:
        """Ends the session's shell."""
        await self._sb._send(_EXECD, "DELETE", f"/session/{self.id}")

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r})"


class AsyncPty:
    """Terminals in one sandbox (``sandbox.pty``); container sandboxes only (a wasm sandbox
    answers :class:`NotSupportedError`)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def create(
        self,
        command: str | None = None,
        *,
        cols: int = 80,
        rows: int = 24,
        cwd: str | None = None,
        envs: Mapping[str, str] | None = None,
    ) -> AsyncPtySession:
        """Starts ``command`` (default: an interactive shell) on a terminal and attaches to it."""
        body: dict[str, Any] = {"cols": cols, "rows": rows}
        if command:
            body["command"] = command
        if cwd is not None:
            body["cwd"] = cwd
        if envs:
            body["envs"] = dict(envs)
        data = await self._sb._call(_EXECD, "POST", "/pty", json_body=body, idempotent=False)
        sid = m.PtyCreated.model_validate(data).session_id
        p = AsyncPtySession(self._sb, sid)
        await p._attach()
        return p


class AsyncPtySession:
    """An attached terminal: send input, resize, read output, kill."""

    def __init__(self, sandbox: AsyncSandbox, session_id: str) -> None:
        self._sb = sandbox
        self.id: str = session_id
        """The terminal's id."""
        self._exit_code: int | None = None
        self._ws: Any = None
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._exited = asyncio.Event()

    async def _attach(self) -> None:
        import websockets

        ep = await self._sb._resolve(_EXECD)
        url = "ws" + ep.base[4:] + f"/pty/{self.id}/ws"
        self._ws = await websockets.connect(url, additional_headers=ep.headers, max_size=2 << 20)
        first = json.loads(await self._ws.recv())
        if first.get("type") != "connected":
            raise RuntimeError(f"hybox: unexpected first terminal message {first!r}")
        self._reader = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        try:
            async for msg in self._ws:
                if isinstance(msg, bytes):
                    if msg and msg[0] in (1, 2, 3):
                        await self._out.put(msg[1:])
                    continue
                obj = json.loads(msg)
                if obj.get("type") == "exit":
                    self._exit_code = obj.get("exit_code")
                    break
        except Exception:
            pass
        finally:
            self._exited.set()
            await self._out.put(None)

    @property
    def exit_code(self) -> int | None:
        """The program's exit code once it ended."""
        return self._exit_code

    async def send_input(self, data: str | bytes) -> None:
        """Writes keystrokes to the terminal."""
        b = data.encode() if isinstance(data, str) else data
        await self._ws.send(b"\x00" + b)

    async def resize(self, cols: int, rows: int) -> None:
        """Changes the terminal's size."""
        await self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    async def signal(self, name: str) -> None:
        """Sends a signal such as ``SIGINT`` to the program."""
        await self._ws.send(json.dumps({"type": "signal", "signal": name}))

    async def read(self, timeout: float | None = None) -> bytes:
        """The next chunk of output; ``b""`` once the program ended.
        Raises :class:`asyncio.TimeoutError` when nothing came within ``timeout`` seconds."""
        chunk = await asyncio.wait_for(self._out.get(), timeout)
        if chunk is None:
            await self._out.put(None)
            return b""
        return chunk

    async def output(self) -> AsyncIterator[bytes]:
        """Iterates over output chunks until the program ends."""
        while True:
            chunk = await self.read()
            if not chunk:
                return
            yield chunk

    async def wait(self, timeout: float | None = None) -> int | None:
        """Waits for the program to end and returns its exit code."""
        await asyncio.wait_for(self._exited.wait(), timeout)
        return self._exit_code

    async def kill(self) -> None:
        """Kills the program and forgets the terminal."""
        from ._errors import NotFoundError

        try:
            await self._sb._send(_EXECD, "DELETE", f"/pty/{self.id}")
        except NotFoundError:
            pass
        await self.close()

    async def close(self) -> None:
        """Detaches from the terminal (the program goes on unless killed)."""
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
