"""The synchronous API: each object wraps its asynchronous twin, which runs over a blocking
transport and is driven to its end on the caller's thread (see ``_transport.drive``).
Terminals, which need a WebSocket, run on a private event loop thread instead.

No logic lives here: every method forwards to the async implementation.
"""

from __future__ import annotations

import builtins
import datetime as _dt
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import IO, Any, Literal, TypeVar, overload

T = TypeVar("T")

from . import _loop
from . import _models as m
from ._code import AsyncCode, Context
from ._commands import AsyncCommandHandle, AsyncCommands, AsyncPtySession, AsyncSession, CommandStatus
from ._config import ConnectionConfig
from ._egress import AsyncEgress, AsyncVault, PolicyStatus, VaultState
from ._execution import CommandResult, ErrorHandler, Execution, OutputHandler, ResultHandler
from ._files import AsyncFiles, FileInfo, WriteEntry
from ._sandbox import DEFAULT_IMAGE, AsyncSandbox, Endpoint, SandboxInfo, SandboxPage, _transport, create_body
from ._transport import Transport, drive

__all__ = ["Sandbox", "Commands", "CommandHandle", "Session", "Pty", "PtySession", "Code", "Files", "Egress", "Vault"]

_run = drive


def _iterate(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterates over an async iterator of a blocking transport."""
    try:
        while True:
            try:
                yield drive(agen.__anext__())  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
    finally:
        close = getattr(agen, "aclose", None)
        if close is not None:
            drive(close())


class CommandHandle:
    """A background command: poll its status and logs, wait for it, kill it."""

    def __init__(self, a: AsyncCommandHandle) -> None:
        self._a = a
        self.id: str = a.id
        """The command id."""

    def status(self) -> CommandStatus:
        """The command's status. Raises :class:`NotFoundError` for an unknown id."""
        return _run(self._a.status())

    def logs(self, cursor: int | None = None) -> tuple[str, int]:
        """Output from byte offset ``cursor`` (default: where the last call stopped) and the next cursor."""
        return _run(self._a.logs(cursor))

    def wait(self, *, timeout: float | None = None, interval: float = 0.05) -> CommandResult:
        """Waits until the command ends; returns its exit code and output."""
        return _run(self._a.wait(timeout=timeout, interval=interval))

    def kill(self) -> None:
        """Kills the command (its whole process group)."""
        _run(self._a.kill())

    def __repr__(self) -> str:
        return f"CommandHandle(id={self.id!r})"


class Session:
    """A persistent shell: ``cd`` and ``export`` carry over from one run to the next."""

    def __init__(self, a: AsyncSession) -> None:
        self._a = a
        self.id: str = a.id
        """The session id."""

    def run(
        self,
        cmd: str,
        *,
        timeout: float | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Runs ``cmd`` in the session. Raises :class:`BusyError` while another run is going on."""
        return _run(self._a.run(cmd, timeout=timeout, on_stdout=on_stdout, on_stderr=on_stderr, check=check))

    def close(self) -> None:
        """Ends the session's shell."""
        _run(self._a.close())

    def __repr__(self) -> str:
        return f"Session(id={self.id!r})"


class Commands:
    """Shell commands in one sandbox (``sandbox.commands``)."""

    def __init__(self, a: AsyncCommands) -> None:
        self._a = a

    @overload
    def run(
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
    def run(
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
    ) -> CommandHandle: ...

    @overload
    def run(
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
    ) -> CommandResult | CommandHandle: ...

    def run(
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
    ) -> CommandResult | CommandHandle:
        """Runs ``cmd`` in the sandbox's shell; see :meth:`AsyncCommands.run`. Callbacks are
        called on this thread while the command runs; Ctrl-C kills the command."""
        r = _run(
            self._a.run(
                cmd,
                background=background,
                cwd=cwd,
                envs=envs,
                timeout=timeout,
                on_stdout=on_stdout,
                on_stderr=on_stderr,
                check=check,
                uid=uid,
                gid=gid,
            )
        )
        return CommandHandle(r) if isinstance(r, AsyncCommandHandle) else r

    def connect(self, command_id: str) -> CommandHandle:
        """A handle on a background command by id."""
        return CommandHandle(self._a.connect(command_id))

    def kill(self, command_id: str) -> None:
        """Kills a running command."""
        _run(self._a.kill(command_id))

    def create_session(self, *, cwd: str | None = None, envs: Mapping[str, str] | None = None) -> Session:
        """Starts a persistent shell."""
        return Session(_run(self._a.create_session(cwd=cwd, envs=envs)))


class PtySession:
    """An attached terminal: send input, resize, read output, kill."""

    def __init__(self, a: AsyncPtySession) -> None:
        self._a = a
        self.id: str = a.id
        """The terminal's id."""

    @property
    def exit_code(self) -> int | None:
        """The program's exit code once it ended."""
        return self._a.exit_code

    def send_input(self, data: str | bytes) -> None:
        """Writes keystrokes to the terminal."""
        _loop.run(self._a.send_input(data))

    def resize(self, cols: int, rows: int) -> None:
        """Changes the terminal's size."""
        _loop.run(self._a.resize(cols, rows))

    def signal(self, name: str) -> None:
        """Sends a signal such as ``SIGINT`` to the program."""
        _loop.run(self._a.signal(name))

    def read(self, timeout: float | None = None) -> bytes:
        """The next chunk of output; ``b""`` once the program ended."""
        return _loop.run(self._a.read(timeout))

    def output(self) -> Iterator[bytes]:
        """Iterates over output chunks until the program ends."""
        return _loop.iterate(self._a.output())

    def wait(self, timeout: float | None = None) -> int | None:
        """Waits for the program to end and returns its exit code."""
        return _loop.run(self._a.wait(timeout))

    def kill(self) -> None:
        """Kills the program and forgets the terminal."""
        _loop.run(self._a.kill())

    def close(self) -> None:
        """Detaches from the terminal."""
        _loop.run(self._a.close())


class Pty:
    """Terminals in one sandbox (``sandbox.pty``); container sandboxes only."""

    def __init__(self, sb: AsyncSandbox) -> None:
        self._sb = sb

    def create(
        self,
        command: str | None = None,
        *,
        cols: int = 80,
        rows: int = 24,
        cwd: str | None = None,
        envs: Mapping[str, str] | None = None,
    ) -> PtySession:
        """Starts ``command`` (default: a shell) on a terminal and attaches to it."""
        sb = self._sb

        async def create() -> AsyncPtySession:
            # a twin of the sandbox on the private loop, over an async transport
            twin = AsyncSandbox(sb.info, Transport(sb._t.config))
            return await twin.pty.create(command, cols=cols, rows=rows, cwd=cwd, envs=envs)

        return PtySession(_loop.run(create()))


class Code:
    """Code contexts and executions in one sandbox (``sandbox.code``)."""

    def __init__(self, a: AsyncCode) -> None:
        self._a = a

    def run(
        self,
        code: str,
        *,
        language: str = "python",
        context: Context | str | None = None,
        on_stdout: OutputHandler | None = None,
        on_stderr: OutputHandler | None = None,
        on_result: ResultHandler | None = None,
        on_error: ErrorHandler | None = None,
        timeout: float | None = None,
    ) -> Execution:
        """Runs ``code``; see :meth:`AsyncCode.run`. Callbacks are called on this thread as
        events arrive; Ctrl-C interrupts the execution."""
        return _run(
            self._a.run(
                code,
                language=language,
                context=context,
                on_stdout=on_stdout,
                on_stderr=on_stderr,
                on_result=on_result,
                on_error=on_error,
                timeout=timeout,
            )
        )

    def create_context(self, language: str = "python", *, cwd: str | None = None) -> Context:
        """Starts a new context for ``language``."""
        return _run(self._a.create_context(language, cwd=cwd))

    def list_contexts(self, language: str | None = None) -> builtins.list[Context]:
        """The sandbox's contexts, optionally of one language."""
        return _run(self._a.list_contexts(language))

    def delete_context(self, context: Context | str) -> None:
        """Ends a context."""
        _run(self._a.delete_context(context))

    def interrupt(self, execution_id: str) -> None:
        """Interrupts a running execution."""
        _run(self._a.interrupt(execution_id))


class Files:
    """Files in one sandbox (``sandbox.files``)."""

    def __init__(self, a: AsyncFiles) -> None:
        self._a = a

    def read(self, path: str, encoding: str = "utf-8") -> str:
        """The file's content as text."""
        return _run(self._a.read(path, encoding))

    def read_bytes(self, path: str) -> bytes:
        """The file's content."""
        return _run(self._a.read_bytes(path))

    def stream(self, path: str, chunk_size: int = 1 << 16) -> Iterator[bytes]:
        """Iterates over the file's content as it downloads."""
        return _iterate(self._a.stream(path, chunk_size))

    def write(self, path: str, data: str | bytes | IO[bytes], *, mode: int | None = None) -> None:
        """Writes one file (parents are created)."""
        _run(self._a.write(path, data, mode=mode))

    def write_many(self, entries: Iterable[WriteEntry]) -> None:
        """Writes several files in one upload."""
        _run(self._a.write_many(entries))

    def list(self, path: str, *, depth: int = 1) -> builtins.list[FileInfo]:
        """The entries below directory ``path``."""
        return _run(self._a.list(path, depth=depth))

    def info(self, path: str) -> FileInfo:
        """The description of ``path``."""
        return _run(self._a.info(path))

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        return _run(self._a.exists(path))

    def remove(self, path: str) -> None:
        """Removes a file or a directory tree; a missing path is not an error."""
        _run(self._a.remove(path))

    def rename(self, src: str, dest: str) -> None:
        """Moves ``src`` to ``dest``."""
        _run(self._a.rename(src, dest))

    def make_dir(self, path: str, *, mode: int | None = None) -> None:
        """Creates a directory and its parents."""
        _run(self._a.make_dir(path, mode=mode))

    def search(self, path: str, pattern: str) -> builtins.list[FileInfo]:
        """Files below ``path`` matching the glob ``pattern``."""
        return _run(self._a.search(path, pattern))

    def replace(self, path: str, old: str, new: str) -> int:
        """Replaces every ``old`` with ``new`` in the file; returns the count."""
        return _run(self._a.replace(path, old, new))

    def replace_many(self, edits: Mapping[str, tuple[str, str]]) -> dict[str, int]:
        """Replaces text in several files; returns counts by path."""
        return _run(self._a.replace_many(edits))

    def set_permissions(
        self, path: str, *, mode: int | None = None, owner: str | None = None, group: str | None = None
    ) -> None:
        """Changes a file's mode, owner and group."""
        _run(self._a.set_permissions(path, mode=mode, owner=owner, group=group))


class Egress:
    """The sandbox's egress policy (``sandbox.egress``)."""

    def __init__(self, a: AsyncEgress) -> None:
        self._a = a

    def get(self) -> PolicyStatus:
        """The policy in force."""
        return _run(self._a.get())

    def set(self, policy: m.NetworkPolicy | Mapping[str, Any]) -> PolicyStatus:
        """Replaces the policy."""
        return _run(self._a.set(policy))

    def patch(self, rules: Iterable[m.EgressRule | Mapping[str, Any]]) -> PolicyStatus:
        """Adds rules ahead of the current ones."""
        return _run(self._a.patch(rules))

    def delete(self, targets: Iterable[str]) -> PolicyStatus:
        """Removes the rules for ``targets``."""
        return _run(self._a.delete(targets))


class Vault:
    """The sandbox's credential vault (``sandbox.vault``)."""

    def __init__(self, a: AsyncVault) -> None:
        self._a = a

    def create(
        self,
        credentials: Sequence[m.VaultCredential | Mapping[str, Any]],
        bindings: Sequence[m.VaultBinding | Mapping[str, Any]],
    ) -> VaultState:
        """Creates the vault."""
        return _run(self._a.create(credentials, bindings))

    def get(self) -> VaultState:
        """The vault's state."""
        return _run(self._a.get())

    def patch(self, patch: m.VaultPatchRequest | Mapping[str, Any]) -> VaultState:
        """Adds, replaces or deletes credentials and bindings."""
        return _run(self._a.patch(patch))

    def delete(self) -> None:
        """Deletes the vault."""
        _run(self._a.delete())

    def credentials(self) -> m.VaultCredentialList:
        """The credentials (names and revisions, never values)."""
        return _run(self._a.credentials())

    def credential(self, name: str) -> m.VaultCredentialInfo:
        """One credential's description."""
        return _run(self._a.credential(name))

    def bindings(self) -> m.VaultBindingList:
        """The bindings."""
        return _run(self._a.bindings())

    def binding(self, name: str) -> m.VaultBindingInfo:
        """One binding."""
        return _run(self._a.binding(name))


class Sandbox:
    """A sandbox, driven synchronously. Make one with :meth:`create` or :meth:`connect`.

    ``with Sandbox.create() as sb:`` kills the sandbox on exit. Calls block the calling thread
    (callbacks run on it too) and may be made from several threads at once.
    """

    def __init__(self, a: AsyncSandbox) -> None:
        self._a = a
        self.id: str = a.id
        """The sandbox id."""
        self.commands: Commands = Commands(a.commands)
        """Shell commands, background commands, sessions."""
        self.code: Code = Code(a.code)
        """The code interpreter: contexts and executions."""
        self.files: Files = Files(a.files)
        """The sandbox's filesystem."""
        self.pty: Pty = Pty(a)
        """Terminals (container sandboxes)."""
        self.egress: Egress = Egress(a.egress)
        """The egress policy."""
        self.vault: Vault = Vault(a.vault)
        """The credential vault."""

    @classmethod
    def create(
        cls,
        image: str = DEFAULT_IMAGE,
        *,
        runtime: str | None = None,
        timeout: float | None = 300,
        env: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
        entrypoint: Sequence[str] | None = None,
        resource_limits: Mapping[str, str] | None = None,
        network_policy: m.NetworkPolicy | Mapping[str, Any] | None = None,
        credential_proxy: bool = False,
        extensions: Mapping[str, str] | None = None,
        domain: str | None = None,
        api_key: str | None = None,
        config: ConnectionConfig | None = None,
    ) -> Sandbox:
        """Creates a sandbox and returns it running; see :meth:`AsyncSandbox.create`."""
        body = create_body(
            image,
            runtime=runtime,
            timeout=timeout,
            env=env,
            metadata=metadata,
            entrypoint=entrypoint,
            resource_limits=resource_limits,
            network_policy=network_policy,
            credential_proxy=credential_proxy,
            extensions=extensions,
        )
        return cls(_run(AsyncSandbox._create(_transport(config, domain, api_key, blocking=True), body)))

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        domain: str | None = None,
        api_key: str | None = None,
        config: ConnectionConfig | None = None,
    ) -> Sandbox:
        """A handle on an existing sandbox. Raises :class:`NotFoundError` if there is none."""
        return cls(_run(AsyncSandbox._connect(_transport(config, domain, api_key, blocking=True), sandbox_id)))

    @classmethod
    def list(
        cls,
        *,
        state: str | Sequence[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        page: int | None = None,
        page_size: int | None = None,
        domain: str | None = None,
        api_key: str | None = None,
        config: ConnectionConfig | None = None,
    ) -> SandboxPage:
        """One page of the server's sandboxes, filtered by state and metadata."""
        t = _transport(config, domain, api_key, blocking=True)
        return _run(AsyncSandbox._list(t, state, metadata, page, page_size))

    @property
    def info(self) -> SandboxInfo:
        """The sandbox's record as last seen."""
        return self._a.info

    def get_info(self) -> SandboxInfo:
        """Fetches the sandbox's record."""
        return _run(self._a.get_info())

    def is_running(self) -> bool:
        """Whether the sandbox's state is ``Running``."""
        return _run(self._a.is_running())

    def kill(self) -> None:
        """Removes the sandbox and everything in it."""
        _run(self._a.kill())

    def pause(self) -> None:
        """Pauses the sandbox."""
        _run(self._a.pause())

    def resume(self) -> None:
        """Resumes a paused sandbox."""
        _run(self._a.resume())

    def fork(self, count: int = 1, *, metadata: Mapping[str, str] | None = None) -> builtins.list[Sandbox]:
        """Copies the sandbox; see :meth:`AsyncSandbox.fork`."""
        return [Sandbox(a) for a in _run(self._a.fork(count, metadata=metadata))]

    def renew(self, expires_at: _dt.datetime) -> _dt.datetime:
        """Sets when the sandbox expires."""
        return _run(self._a.renew(expires_at))

    def set_timeout(self, seconds: float) -> _dt.datetime:
        """Makes the sandbox expire ``seconds`` from now."""
        return _run(self._a.set_timeout(seconds))

    def patch_metadata(self, patch: Mapping[str, str | None]) -> SandboxInfo:
        """Merges ``patch`` into the metadata (None deletes a key)."""
        return _run(self._a.patch_metadata(patch))

    def endpoint(self, port: int) -> Endpoint:
        """Where the sandbox's ``port`` is reached."""
        return _run(self._a.endpoint(port))

    def endpoint_url(self, port: int) -> tuple[str, dict[str, str]]:
        """The URL of the sandbox's ``port`` and the headers to send with every request."""
        return _run(self._a.endpoint_url(port))

    def ping(self) -> bool:
        """Whether the sandbox's execd answers ``/ping``."""
        return _run(self._a.ping())

    def metrics(self) -> m.Metrics:
        """The sandbox's resource usage (CPU count and use, memory total and use)."""
        return _run(self._a.metrics())

    def close(self) -> None:
        """Closes the handle's connections (the sandbox keeps running)."""
        _run(self._a.close())

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        try:
            _run(self._a.kill())
        finally:
            _run(self._a.close())

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r})"
