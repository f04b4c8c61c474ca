"""The one HTTP layer: authentication, typed errors, bounded retries, event streams."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

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

_IDEMPOTENT = frozenset(("GET", "HEAD", "PUT", "DELETE", "OPTIONS"))
_USER_AGENT = "hybox-python/0.1.0"


def _retryable(method: str, status: int, idempotent: bool | None) -> bool:
    if status == 429:
        return True  # the server did nothing
    if status in (502, 503, 504):
        return method in _IDEMPOTENT if idempotent is None else idempotent
    return False


class Transport:
    """Sends requests to the lifecycle API and to sandbox endpoints over one connection pool."""

    def __init__(self, config: ConnectionConfig, client: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self.base_url = config.base_url()
        self.headers: dict[str, str] = {"User-Agent": _USER_AGENT, **config.headers}
        key = config.resolved_api_key()
        if key:
            self.headers["OPEN-SANDBOX-API-KEY"] = key
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(config.request_timeout),
            limits=httpx.Limits(max_keepalive_connections=32, keepalive_expiry=30),
        )

    async def aclose(self) -> None:
        """Closes the connection pool (when the transport created it)."""
        if self._own_client:
            await self.client.aclose()

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
        ext = {} if timeout is None else {"timeout": httpx.Timeout(timeout).as_dict()}
        return self.client.build_request(method, url, headers=h, params=params, extensions=ext, **kw)

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
        timeout: float | None = None,
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
                resp = await self.client.send(req, stream=stream)
            except httpx.TimeoutException as e:
                raise TimeoutError(0, "CLIENT_TIMEOUT", f"{method} {url}: {e or 'timed out'}") from e
            except httpx.TransportError as e:
                err: APIError = UnavailableError(0, "CONNECTION_FAILED", f"{method} {url}: {e!r}")
                if retry and attempt < self.config.max_retries and (
                    method in _IDEMPOTENT if idempotent is None else idempotent
                ):
                    attempt += 1
                    await asyncio.sleep(self._backoff(attempt, None))
                    continue
                raise err from e
            if resp.status_code < 300:
                return resp
            body = await resp.aread()
            await resp.aclose()
            err = from_response(resp, body)
            if not retry or attempt >= self.config.max_retries or not _retryable(
                method, resp.status_code, idempotent
            ):
                raise err
            attempt += 1
            await asyncio.sleep(self._backoff(attempt, err.retry_after))

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
            yield _parse_events(resp)
        finally:
            await resp.aclose()


async def _parse_events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Events of a stream: JSON objects each followed by a blank line, ``data:`` optional."""
    pending: list[str] = []
    try:
        async for line in resp.aiter_lines():
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
