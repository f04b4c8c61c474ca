"""hybox: the Python SDK of hybox, a sandbox runtime for AI agents.

``Sandbox`` (synchronous) and ``AsyncSandbox`` (asyncio) create and drive sandboxes: shell
commands, a code interpreter with rich results, files, terminals, the egress policy and the
credential vault. ``run`` runs code once in a throw-away sandbox. Errors of the server are
subclasses of :class:`HyboxError`. The server and key come from ``HYBOX_DOMAIN`` and
``HYBOX_API_KEY`` (or ``OPEN_SANDBOX_DOMAIN`` and ``OPEN_SANDBOX_API_KEY``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import _models as models
from ._code import AsyncCode, Context
from ._commands import (
    AsyncCommandHandle,
    AsyncCommands,
    AsyncPty,
    AsyncPtySession,
    AsyncSession,
    CommandStatus,
)
from ._config import ConnectionConfig
from ._egress import AsyncEgress, AsyncVault, PolicyStatus, VaultState, allow, deny, inline_credential
from ._errors import (
    APIError,
    AuthenticationError,
    BusyError,
    CommandExitError,
    ConflictError,
    ExecutionError,
    HyboxError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    NotSupportedError,
    RateLimitedError,
    StreamError,
    TimeoutError,
    UnavailableError,
)
from ._execution import (
    CommandResult,
    ErrorHandler,
    Execution,
    ExecutionErrorInfo,
    Handlers,
    Logs,
    OutputHandler,
    Result,
    ResultHandler,
)
from ._files import AsyncFiles, FileInfo, WriteEntry
from ._sandbox import (
    EGRESS_PORT,
    EXECD_PORT,
    AsyncSandbox,
    Endpoint,
    SandboxInfo,
    SandboxPage,
    _dump,
    _transport,
    run_stream,
)
from ._pools import AsyncPool, AsyncVolume, Pool, PoolInfo, Volume, VolumeInfo
from ._transport import Transport, drive
from ._sync import Code, CommandHandle, Commands, Egress, Files, Pty, PtySession, Sandbox, Session, Vault

__version__ = "0.1.0"
"""The SDK's version."""

__all__ = [
    "APIError",
    "AsyncCode",
    "AsyncCommandHandle",
    "AsyncCommands",
    "AsyncEgress",
    "AsyncFiles",
    "AsyncPool",
    "AsyncPty",
    "AsyncPtySession",
    "AsyncSandbox",
    "AsyncSession",
    "AsyncVault",
    "AsyncVolume",
    "AuthenticationError",
    "BusyError",
    "Code",
    "CommandExitError",
    "CommandHandle",
    "CommandResult",
    "CommandStatus",
    "Commands",
    "ConflictError",
    "ConnectionConfig",
    "Context",
    "EGRESS_PORT",
    "EXECD_PORT",
    "Egress",
    "Endpoint",
    "ErrorHandler",
    "Execution",
    "ExecutionError",
    "ExecutionErrorInfo",
    "FileInfo",
    "Files",
    "HyboxError",
    "InternalError",
    "InvalidArgumentError",
    "Logs",
    "NotFoundError",
    "NotSupportedError",
    "OutputHandler",
    "PolicyStatus",
    "Pool",
    "PoolInfo",
    "Pty",
    "PtySession",
    "RateLimitedError",
    "Result",
    "ResultHandler",
    "Sandbox",
    "SandboxInfo",
    "SandboxPage",
    "Session",
    "StreamError",
    "TimeoutError",
    "UnavailableError",
    "Vault",
    "VaultState",
    "Volume",
    "VolumeInfo",
    "WriteEntry",
    "allow",
    "async_run",
    "deny",
    "inline_credential",
    "models",
    "run",
]


async def async_run(
    code: str,
    language: str = "python",
    *,
    timeout: float | None = None,
    network_policy: models.NetworkPolicy | Mapping[str, Any] | None = None,
    on_stdout: OutputHandler | None = None,
    on_stderr: OutputHandler | None = None,
    on_result: ResultHandler | None = None,
    on_error: ErrorHandler | None = None,
    domain: str | None = None,
    api_key: str | None = None,
    config: ConnectionConfig | None = None,
) -> Execution:
    """Runs ``code`` once in a throw-away wasm sandbox (``POST /v1/run``): no lifecycle.

    The code has no network unless ``network_policy`` is given. Events stream to the callbacks.
    Raises :class:`InvalidArgumentError` for an unknown language, :class:`RateLimitedError`
    when the server is saturated (after the SDK's retries).
    """
    return await _run_once(_transport(config, domain, api_key), code, language, timeout, network_policy,
                           Handlers(on_stdout=on_stdout, on_stderr=on_stderr, on_result=on_result, on_error=on_error))


async def _run_once(
    t: Transport,
    code: str,
    language: str,
    timeout: float | None,
    network_policy: models.NetworkPolicy | Mapping[str, Any] | None,
    h: Handlers,
) -> Execution:
    body: dict[str, Any] = {"language": language, "code": code}
    if timeout is not None:
        body["timeoutMs"] = max(1, int(timeout * 1000))
    if network_policy is not None:
        body["networkPolicy"] = _dump(network_policy)
    x = Execution()
    try:
        await run_stream(t, t.base_url, {}, "/run", body, h, x, None, timeout)
    finally:
        await t.aclose()
    return x


def run(
    code: str,
    language: str = "python",
    *,
    timeout: float | None = None,
    network_policy: models.NetworkPolicy | Mapping[str, Any] | None = None,
    on_stdout: OutputHandler | None = None,
    on_stderr: OutputHandler | None = None,
    on_result: ResultHandler | None = None,
    on_error: ErrorHandler | None = None,
    domain: str | None = None,
    api_key: str | None = None,
    config: ConnectionConfig | None = None,
) -> Execution:
    """Runs ``code`` once in a throw-away wasm sandbox; see :func:`async_run`."""
    return drive(
        _run_once(
            _transport(config, domain, api_key, blocking=True), code, language, timeout, network_policy,
            Handlers(on_stdout=on_stdout, on_stderr=on_stderr, on_result=on_result, on_error=on_error),
        )
    )
