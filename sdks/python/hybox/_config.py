"""Where the server is and how to talk to it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["ConnectionConfig"]

DEFAULT_DOMAIN = "localhost:8080"


def _first_env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


@dataclass(frozen=True)
class ConnectionConfig:
    """How the SDK reaches a hybox (or any OpenSandbox-compatible) server.

    Unset fields come from the environment: ``HYBOX_DOMAIN`` and ``HYBOX_API_KEY``, falling
    back to ``OPEN_SANDBOX_DOMAIN`` and ``OPEN_SANDBOX_API_KEY``. A domain without a scheme
    means ``http://``; the lifecycle API is reached under ``/v1`` of it.
    """

    domain: str | None = None
    """``host[:port]`` or a URL such as ``https://sandbox.example.com``."""
    api_key: str | None = None
    """The server's API key, sent as ``OPEN-SANDBOX-API-KEY``."""
    request_timeout: float = 30.0
    """Seconds to wait for an answer to a call that is not an execution."""
    max_retries: int = 3
    """How many times a retryable answer (429; 502/503/504 to idempotent calls) is retried."""
    max_retry_wait: float = 5.0
    """The longest wait, in seconds, between two attempts."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra headers sent with every lifecycle request."""

    def resolved_domain(self) -> str:
        """The domain in use: the field, else the environment, else ``localhost:8080``."""
        return self.domain or _first_env("HYBOX_DOMAIN", "OPEN_SANDBOX_DOMAIN") or DEFAULT_DOMAIN

    def resolved_api_key(self) -> str | None:
        """The API key in use: the field, else the environment."""
        return self.api_key or _first_env("HYBOX_API_KEY", "OPEN_SANDBOX_API_KEY")

    def base_url(self) -> str:
        """The lifecycle API's base URL, such as ``http://localhost:8080/v1``.

        Raises :class:`ValueError` for a domain with another scheme than http(s) or no host.
        """
        d = self.resolved_domain().strip()
        if "://" not in d:
            d = "http://" + d
        u = urlsplit(d)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"hybox: domain {d!r}: want http(s)://host[:port][/path]")
        path = u.path.rstrip("/")
        if not path.endswith("/v1"):
            path += "/v1"
        return f"{u.scheme}://{u.netloc}{path}"
