"""The one HTTP layer: authentication, typed errors, bounded retries, event streams."""

from __future__ import annotations

import asyncio
import json
import random
import time
import weakref
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx

from ._config import ConnectionConfig
from ._errors import (
    APIError,
    HyboxError,
    StreamError,
    TimeoutError,
    UnavailableError,
    from_response,
)

T = TypeVar("T")

_IDEMPOTENT = frozenset(("GET", "HEAD", "PUT", "DELETE", "OPTIONS"))
_USER_AGENT = "hybox-python/0.1.0"


# One connection pool per event loop, shared by every sandbox handle on it: making a client
# costs far more than a request (TLS context), and the pool keeps connections warm.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()

DEFAULT_TIMEOUT = -1.0
"""A request's ``timeout`` meaning the config's ``request_timeout`` (None means no limit)."""


_sync_client: httpx.Client | None = None


def shared_sync_client() -> httpx.Client:
    """The process's blocking connection pool (httpx.Client is thread-safe)."""
    global _sync_client
    if _sync_client is None or _sync_client.is_closed:
        _sync_client = httpx.Client(limits=httpx.Limits(max_keepalive_connections=64, keepalive_expiry=30))
    return _sync_client


def shared_client() -> httpx.AsyncClient:
    """The connection pool of the running event loop."""
    loop = asyncio.get_running_loop()
    c = _clients.get(loop)
    if c is None or c.is_closed:
        c = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=64, keepalive_expiry=30))
        _clients[loop] = c
    return c


def _retryable(method: str, status: int, idempotent: bool | None) -> bool:
    if status == 429:
        return True  # the server did nothing
    if status in (502, 503, 504):
        return method in _IDEMPOTENT if idempotent is None else idempotent
    return False


class Transport:
    """Sends requests to the lifecycle API and to sandbox endpoints over one connection pool.

    Its methods are coroutines either way. A blocking transport (``blocking=True``, used by
    the synchronous API) does its I/O with ``httpx.Client`` and never suspends, so the
    synchronous API runs the one implementation with :func:`drive`, on the caller's thread.
    """

    def __init__(self, config: ConnectionConfig, *, blocking: bool = False) -> None:
        self.config = config
        self.base_url = config.base_url()
        self.headers: dict[str, str] = {"User-Agent": _USER_AGENT, **config.headers}
        key = config.resolved_api_key()
        if key:
            self.headers["OPEN-SANDBOX-API-KEY"] = key
        self.blocking = blocking
        self.client: httpx.AsyncClient | httpx.Client = shared_sync_client() if blocking else shared_client()
        self._timeouts = {
            DEFAULT_TIMEOUT: httpx.Timeout(config.request_timeout).as_dict(),
            None: httpx.Timeout(None).as_dict(),
        }

    async def aclose(self) -> None:
        """Releases the transport (the loop's shared connection pool stays open)."""

    def url(self, path: str) -> str:
        """A lifecycle URL: the base URL and ``path``."""
        return self.base_url + path

    def _build(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        params: Any,
        json_body: Any,
        content: Any,
        files: Any,
        timeout: float | None,
    ) -> httpx.Request:
        h = self.headers if headers is None else {**self.headers, **headers}
        kw: dict[str, Any] = {}
        if json_body is not None:
            kw["content"] = json.dumps(json_body, separators=(",", ":")).encode()
            h = {**h, "Content-Type": "application/json"}
        elif content is not None:
            kw["content"] = content
        if files is not None:
            kw["files"] = files
        t = self._timeouts.get(timeout)
        if t is None:
            t = httpx.Timeout(timeout).as_dict()
        return self.client.build_request(method, url, headers=h, params=params, extensions={"timeout": t}, **kw)

    async def send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Any = None,
        json_body: Any = None,
        content: Any = None,
        files: Any = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        stream: bool = False,
        idempotent: bool | None = None,
        retry: bool = True,
    ) -> httpx.Response:
        """Sends a request and returns a 2xx answer; raises the typed error of any other.

        Retryable answers are retried up to ``config.max_retries`` times, after the server's
        ``Retry-After`` or an exponential back-off. With ``stream`` the body is not read.
        """
        attempt = 0
        while True:
            req = self._build(method, url, headers, params, json_body, content, files, timeout)
            try:
                if isinstance(self.client, httpx.Client):
                    resp = self.client.send(req, stream=stream)
                else:
                    resp = await self.client.send(req, stream=stream)
            except httpx.TimeoutException as e:
                raise TimeoutError(0, "CLIENT_TIMEOUT", f"{method} {url}: {e or 'timed out'}") from e
            except httpx.TransportError as e:
                err: APIError = UnavailableError(0, "CONNECTION_FAILED", f"{method} {url}: {e!r}")
                if retry and attempt < self.config.max_retries and (
                    method in _IDEMPOTENT if idempotent is None else idempotent
                ):
                    attempt += 1
                    await self.sleep(self._backoff(attempt, None))
                    continue
                raise err from e
            if resp.status_code < 300:
                return resp
            body = await self.read(resp)
            await self.close(resp)
            err = from_response(resp, body)
            if not retry or attempt >= self.config.max_retries or not _retryable(
                method, resp.status_code, idempotent
            ):
                raise err
            attempt += 1
            await self.sleep(self._backoff(attempt, err.retry_after))

    async def sleep(self, seconds: float) -> None:
        """Waits (blocking the thread for a blocking transport)."""
        if self.blocking:
            time.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    async def read(self, resp: httpx.Response) -> bytes:
        """Reads a streamed answer's whole body."""
        return resp.read() if self.blocking else await resp.aread()

    async def close(self, resp: httpx.Response) -> None:
        """Closes a streamed answer."""
        if self.blocking:
            resp.close()
        else:
            await resp.aclose()

    async def iter_bytes(self, resp: httpx.Response, chunk_size: int) -> AsyncIterator[bytes]:
        """A streamed answer's body in chunks."""
        if self.blocking:
            for chunk in resp.iter_bytes(chunk_size):
                yield chunk
        else:
            async for chunk in resp.aiter_bytes(chunk_size):
                yield chunk

    async def lines(self, resp: httpx.Response) -> AsyncIterator[str]:
        """A streamed answer's body in lines."""
        if self.blocking:
            for line in resp.iter_lines():
                yield line
        else:
            async for line in resp.aiter_lines():
                yield line

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return float(min(retry_after, self.config.max_retry_wait))
        base = 0.05 * (2 ** (attempt - 1))
        return float(min(base * (0.5 + random.random()), self.config.max_retry_wait))

    async def call(self, method: str, url: str, **kw: Any) -> Any:
        """Sends a request and decodes its JSON answer (None for an empty body)."""
        resp = await self.send(method, url, **kw)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError as e:
            raise HyboxError(f"{method} {url}: the answer is not JSON") from e

    @asynccontextmanager
    async def events(self, method: str, url: str, **kw: Any) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Opens an execution stream and yields an iterator over its events (JSON objects)."""
        resp = await self.send(method, url, stream=True, **kw)
        try:
            yield _parse_events(self.lines(resp))
        finally:
            await self.close(resp)


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine of a blocking transport to its end on this thread. Such a coroutine
    never suspends; one that does (a coroutine callback awaiting real I/O) is an error."""
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError(
        "hybox: a synchronous call suspended: pass plain functions as callbacks to Sandbox "
        "(coroutine callbacks belong to AsyncSandbox)"
    )


async def _parse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """Events of a stream: JSON objects each followed by a blank line, ``data:`` optional."""
    pending: list[str] = []
    try:
        async for line in lines:
            if line.startswith("data:"):
                line = line[5:]
            line = line.strip()
            if line:
                if line[0] != ":":
                    pending.append(line)
                if len(pending) == 1 and line[-1] == "}":
                    # the common case: one event on one line
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    pending.clear()
                    if not isinstance(ev, dict):
                        raise StreamError(f"malformed stream event: {line[:200]!r}")
                    yield ev
                continue
            if pending:
                text = "".join(pending)
                pending.clear()
                try:
                    ev = json.loads(text)
                except ValueError as e:
                    raise StreamError(f"malformed stream event: {text[:200]!r}") from e
                if not isinstance(ev, dict):
                    raise StreamError(f"malformed stream event: {text[:200]!r}")
                yield ev
    except httpx.TimeoutException as e:
        raise TimeoutError(0, "CLIENT_TIMEOUT", "the stream timed out") from e
    except httpx.TransportError as e:
        raise StreamError(f"the stream broke: {e!r}") from e
