"""AsyncSandbox: the implementation of every sandbox operation (Sandbox drives it)."""

from __future__ import annotations

import builtins as _builtins
import asyncio
import datetime as _dt
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from . import _models as m
from ._code import AsyncCode
from ._commands import AsyncCommands, AsyncPty
from ._config import ConnectionConfig
from ._egress import AsyncEgress, AsyncVault
from ._execution import CommandResult, Execution, Handlers, fold, incomplete
from ._files import AsyncFiles
from ._errors import HyboxError
from ._transport import Transport

__all__ = ["AsyncSandbox", "SandboxInfo", "SandboxPage", "Endpoint", "EXECD_PORT", "EGRESS_PORT"]

EXECD_PORT = 44772
"""The sandbox port of the execd API (commands, code, files, terminals)."""
EGRESS_PORT = 18080
"""The sandbox port of the egress API (policy, credential vault)."""

class SandboxInfo(m.Sandbox):
    """A sandbox's record as the server reports it: ``id``, ``image``, ``status``,
    ``metadata``, ``createdAt``, ``expiresAt``, ..."""


class SandboxPage(m.ListSandboxesResponse):
    """One page of :meth:`AsyncSandbox.list`: ``items`` and ``pagination``."""

    items: list[SandboxInfo]  # type: ignore[assignment]


class Endpoint(m.Endpoint):
    """Where a sandbox port is reached: ``endpoint`` (no scheme) and ``headers`` to send."""

DEFAULT_IMAGE = "wasm://default"
_INTERRUPT_TIMEOUT = 5.0


def _transport(
    config: ConnectionConfig | None, domain: str | None, api_key: str | None, blocking: bool = False
) -> Transport:
    cfg = config or ConnectionConfig()
    if domain is not None or api_key is not None:
        cfg = ConnectionConfig(
            domain=domain or cfg.domain,
            api_key=api_key or cfg.api_key,
            request_timeout=cfg.request_timeout,
            max_retries=cfg.max_retries,
            max_retry_wait=cfg.max_retry_wait,
            headers=dict(cfg.headers),
        )
    return Transport(cfg, blocking=blocking)


def _metadata_filter(metadata: Mapping[str, str]) -> str:
    return urlencode(sorted(metadata.items()))


class _Endpoint:
    """A resolved sandbox endpoint: base URL and headers (private)."""

    __slots__ = ("base", "headers")

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base = base
        self.headers = headers


class AsyncSandbox:
    """A sandbox, driven with ``async``/``await``. Make one with :meth:`create` or :meth:`connect`.

    ``async with await AsyncSandbox.create() as sb:`` kills the sandbox on exit.
    """

    def __init__(self, info: SandboxInfo, transport: Transport, *, own_transport: bool = True) -> None:
        self._info = info
        self._t = transport
        self._own = own_transport
        self._endpoints: dict[int, _Endpoint] = {}
        self.id: str = str(info.id)
        """The sandbox id."""
        self.commands: AsyncCommands = AsyncCommands(self)
        """Shell commands, background commands, sessions."""
        self.code: AsyncCode = AsyncCode(self)
        """The code interpreter: contexts and executions."""
        self.files: AsyncFiles = AsyncFiles(self)
        """The sandbox's filesystem."""
        self.pty: AsyncPty = AsyncPty(self)
        """Terminals (container sandboxes)."""
        self.egress: AsyncEgress = AsyncEgress(self)
        """The egress policy."""
        self.vault: AsyncVault = AsyncVault(self)
        """The credential vault."""

    # ------------------------------------------------------------ lifecycle
    @classmethod
    async def create(
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
    ) -> AsyncSandbox:
        """Creates a sandbox and returns it running.

        ``image`` is an image reference (``wasm://default`` for an in-process wasm sandbox);
        ``runtime`` picks ``wasm``, ``runc`` or ``runsc`` explicitly; ``timeout`` is the
        sandbox's lifetime in seconds (None: no expiry). Raises :class:`InvalidArgumentError`
        for a bad request, :class:`UnavailableError` when the runtime cannot start it.
        """
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
        return await cls._create(_transport(config, domain, api_key), body)

    @classmethod
    async def _create(cls, t: Transport, body: dict[str, Any]) -> AsyncSandbox:
        try:
            data = await t.call("POST", t.url("/sandboxes"), json_body=body, idempotent=False)
        except BaseException:
            await t.aclose()
            raise
        return cls(SandboxInfo.model_validate(data), t)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        domain: str | None = None,
        api_key: str | None = None,
        config: ConnectionConfig | None = None,
    ) -> AsyncSandbox:
        """A handle on an existing sandbox. Raises :class:`NotFoundError` if there is none."""
        return await cls._connect(_transport(config, domain, api_key), sandbox_id)

    @classmethod
    async def _connect(cls, t: Transport, sandbox_id: str) -> AsyncSandbox:
        try:
            data = await t.call("GET", t.url("/sandboxes/" + quote(sandbox_id, safe="")))
        except BaseException:
            await t.aclose()
            raise
        return cls(SandboxInfo.model_validate(data), t)

    @classmethod
    async def list(
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
        """One page of the server's sandboxes, filtered by state (any of) and metadata (all of)."""
        return await cls._list(_transport(config, domain, api_key), state, metadata, page, page_size)

    @classmethod
    async def _list(
        cls,
        t: Transport,
        state: str | Sequence[str] | None,
        metadata: Mapping[str, str] | None,
        page: int | None,
        page_size: int | None,
    ) -> SandboxPage:
        params: list[tuple[str, str]] = []
        if state is not None:
            for s in [state] if isinstance(state, str) else state:
                params.append(("state", s))
        if metadata:
            params.append(("metadata", _metadata_filter(metadata)))
        if page is not None:
            params.append(("page", str(page)))
        if page_size is not None:
            params.append(("pageSize", str(page_size)))
        try:
            data = await t.call("GET", t.url("/sandboxes"), params=params)
        finally:
            await t.aclose()
        return SandboxPage.model_validate(data)

    @property
    def info(self) -> SandboxInfo:
        """The sandbox's record as last seen (see :meth:`get_info`)."""
        return self._info

    def _path(self, suffix: str = "") -> str:
        return self._t.url("/sandboxes/" + self.id + suffix)

    async def get_info(self) -> SandboxInfo:
        """Fetches the sandbox's record. Raises :class:`NotFoundError` once it is gone."""
        self._info = SandboxInfo.model_validate(await self._t.call("GET", self._path()))
        return self._info

    async def is_running(self) -> bool:
        """Whether the sandbox's state is ``Running``."""
        return (await self.get_info()).status.state.root == "Running"

    async def kill(self) -> None:
        """Removes the sandbox and everything in it. Killing a gone sandbox is not an error."""
        from ._errors import NotFoundError

        try:
            await self._t.send("DELETE", self._path())
        except NotFoundError:
            pass

    async def pause(self) -> None:
        """Pauses the sandbox (executions answer 409 ``SANDBOX_PAUSED`` until resumed)."""
        await self._t.send("POST", self._path("/pause"), idempotent=True)

    async def resume(self) -> None:
        """Resumes a paused sandbox. Raises :class:`ConflictError` if it is not paused."""
        await self._t.send("POST", self._path("/resume"), idempotent=True)

    async def fork(self, count: int = 1, *, metadata: Mapping[str, str] | None = None) -> _builtins.list[AsyncSandbox]:
        """Copies the sandbox ``count`` times (1..16): each copy runs with a copy of the
        workspace and of every code context's state (ids, execution counts, variables), and the
        metadata with ``metadata`` merged over it. Copies and source are independent. Raises
        :class:`InvalidArgumentError` for a bad count, or an error of kind not supported for a
        runtime that cannot fork (only wasm can today)."""
        body: dict[str, Any] = {"count": count}
        if metadata:
            body["metadata"] = dict(metadata)
        data = await self._t.call("POST", self._path("/fork"), json_body=body, idempotent=False)
        infos = [SandboxInfo.model_validate(d) for d in data["sandboxes"]]
        return [AsyncSandbox(info, Transport(self._t.config, blocking=self._t.blocking)) for info in infos]

    async def renew(self, expires_at: _dt.datetime) -> _dt.datetime:
        """Sets when the sandbox expires (a timezone-aware time in the future)."""
        if expires_at.tzinfo is None:
            raise ValueError("hybox: expires_at must be timezone-aware")
        data = await self._t.call(
            "POST", self._path("/renew-expiration"), json_body={"expiresAt": expires_at.isoformat()}, idempotent=True
        )
        return m.RenewExpirationResponse.model_validate(data).expiresAt

    async def set_timeout(self, seconds: float) -> _dt.datetime:
        """Makes the sandbox expire ``seconds`` from now; returns the new expiry time."""
        return await self.renew(_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=seconds))

    async def patch_metadata(self, patch: Mapping[str, str | None]) -> SandboxInfo:
        """Merges ``patch`` into the metadata (a None value deletes the key)."""
        data = await self._t.call("PATCH", self._path("/metadata"), json_body=dict(patch), idempotent=True)
        self._info = SandboxInfo.model_validate(data)
        return self._info

    async def endpoint(self, port: int) -> Endpoint:
        """Where the sandbox's ``port`` is reached: an address without scheme, and headers."""
        data = await self._t.call("GET", self._path(f"/endpoints/{int(port)}"))
        return Endpoint.model_validate(data)

    async def endpoint_url(self, port: int) -> tuple[str, dict[str, str]]:
        """The URL of the sandbox's ``port`` (with the lifecycle connection's scheme) and the
        headers every request to it must carry."""
        ep = await self._resolve(port)
        return ep.base, dict(ep.headers)

    async def ping(self) -> bool:
        """Whether the sandbox's execd answers ``/ping`` (False when it does not answer)."""
        ep = await self._resolve(44772)
        try:
            await self._t.call("GET", ep.base + "/ping", headers=ep.headers)
        except HyboxError:
            return False
        return True

    async def metrics(self) -> m.Metrics:
        """The sandbox's resource usage (CPU count and use, memory total and use)."""
        ep = await self._resolve(44772)
        data = await self._t.call("GET", ep.base + "/metrics", headers=ep.headers)
        return m.Metrics.model_validate(data)

    async def _resolve(self, port: int) -> _Endpoint:
        ep = self._endpoints.get(port)
        if ep is None:
            raw = await self.endpoint(port)
            scheme = urlsplit(self._t.base_url).scheme
            ep = _Endpoint(f"{scheme}://{raw.endpoint.rstrip('/')}", dict(raw.headers))
            self._endpoints[port] = ep
        return ep

    async def close(self) -> None:
        """Closes the handle's connections (the sandbox keeps running)."""
        if self._own:
            await self._t.aclose()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await asyncio.shield(self.kill())
        finally:
            await self.close()

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r})"

    # ----------------------------------------------------- for the sub-APIs
    async def _call(self, port: int, method: str, path: str, **kw: Any) -> Any:
        ep = await self._resolve(port)
        return await self._t.call(method, ep.base + path, headers=ep.headers, **kw)

    async def _send(self, port: int, method: str, path: str, **kw: Any) -> Any:
        ep = await self._resolve(port)
        return await self._t.send(method, ep.base + path, headers=ep.headers, **kw)

    async def _stream(
        self,
        path: str,
        body: dict[str, Any],
        h: Handlers,
        x: Execution | CommandResult,
        interrupt_path: str | None,
        timeout: float | None,
    ) -> None:
        """Runs one execution stream to its end, folding it into x. A client deadline or a
        cancellation interrupts the execution on the server."""
        ep = await self._resolve(EXECD_PORT)
        await run_stream(self._t, ep.base, ep.headers, path, body, h, x, interrupt_path, timeout)


async def run_stream(
    t: Transport,
    base: str,
    headers: dict[str, str],
    path: str,
    body: dict[str, Any],
    h: Handlers,
    x: Execution | CommandResult,
    interrupt_path: str | None,
    timeout: float | None,
) -> None:
    """Opens ``POST base+path`` and folds its events into x (shared by sandboxes and one-shot runs)."""

    async def go(read_timeout: float | None) -> None:
        async with t.events(
            "POST", base + path, headers=headers, json_body=body, timeout=read_timeout, idempotent=False
        ) as events:
            if not await fold(events, h, x):
                raise incomplete()

    async def interrupt() -> None:
        await t.send("DELETE", base + str(interrupt_path), headers=headers, params={"id": x.id},
                     retry=False, timeout=_INTERRUPT_TIMEOUT)

    if t.blocking:
        # No event loop: the server enforces `timeout`, the stream's read timeout backs it up,
        # and an interrupt of the caller (KeyboardInterrupt) stops the execution too.
        try:
            await go(None if timeout is None else timeout + 5)
        except BaseException:
            if x.id and interrupt_path is not None:
                try:
                    await interrupt()
                except Exception:
                    pass
            raise
        return
    try:
        if timeout is None:
            await go(None)
        else:
            # the server enforces `timeout`; the client waits a little longer for its answer
            await asyncio.wait_for(go(None), timeout + 5)
    except (asyncio.CancelledError, asyncio.TimeoutError) as e:
        if x.id and interrupt_path is not None:
            try:
                await asyncio.shield(interrupt())
            except Exception:
                pass
        if isinstance(e, asyncio.TimeoutError):
            from ._errors import TimeoutError as HyboxTimeout

            raise HyboxTimeout(0, "CLIENT_TIMEOUT", "the execution did not finish in time") from e
        raise


def create_body(
    image: str,
    *,
    runtime: str | None,
    timeout: float | None,
    env: Mapping[str, str] | None,
    metadata: Mapping[str, str] | None,
    entrypoint: Sequence[str] | None,
    resource_limits: Mapping[str, str] | None,
    network_policy: m.NetworkPolicy | Mapping[str, Any] | None,
    credential_proxy: bool,
    extensions: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The body of ``POST /sandboxes`` for :meth:`AsyncSandbox.create`'s arguments."""
    body: dict[str, Any] = {"image": {"uri": image}, "timeout": None if timeout is None else int(timeout)}
    if env:
        body["env"] = dict(env)
    if metadata:
        body["metadata"] = dict(metadata)
    if entrypoint is not None:
        body["entrypoint"] = list(entrypoint)
    if resource_limits:
        body["resourceLimits"] = dict(resource_limits)
    if network_policy is not None:
        body["networkPolicy"] = _dump(network_policy)
    if credential_proxy:
        body["credentialProxy"] = {"enabled": True}
    ext = dict(extensions or {})
    if runtime is not None:
        ext["hybox.io/runtime"] = runtime
    if ext:
        body["extensions"] = ext
    return body


def _dump(v: Any) -> Any:
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json", by_alias=True, exclude_none=True)
    return v
