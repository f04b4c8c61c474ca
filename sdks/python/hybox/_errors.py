"""Typed errors: every error answer of a hybox server becomes one of these."""

from __future__ import annotations

import email.utils
import json
import time
from typing import Final

import httpx

__all__ = [
    "HyboxError",
    "APIError",
    "InvalidArgumentError",
    "AuthenticationError",
    "NotFoundError",
    "ConflictError",
    "BusyError",
    "RateLimitedError",
    "TimeoutError",
    "UnavailableError",
    "NotSupportedError",
    "InternalError",
    "StreamError",
    "CommandExitError",
    "ExecutionError",
]


class HyboxError(Exception):
    """The base class of every error the SDK raises."""

    @property
    def is_retryable(self) -> bool:
        """Whether the same call may succeed if made again unchanged."""
        return False


class APIError(HyboxError):
    """An error answer of the server: HTTP status and the body ``{"code", "message"}``.

    Subclasses name the kind; catch :class:`APIError` (or :class:`HyboxError`) for all.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status: int = status
        """The HTTP status code."""
        self.code: str = code
        """The wire code, such as ``SANDBOX_NOT_FOUND`` (``HTTP_<status>`` when the body had none)."""
        self.message: str = message
        """The server's message."""
        self.request_id: str | None = request_id
        """The answer's ``X-Request-ID``, for the server's logs."""
        self.retry_after: float | None = retry_after
        """Seconds the server asked to wait before retrying (``Retry-After``), if it said."""
        super().__init__(f"{code} ({status}): {message}" if message else f"{code} ({status})")

    @property
    def is_retryable(self) -> bool:
        """True for 429, 502, 503 and 504 answers: the server did not do the work."""
        return self.status in (429, 502, 503, 504)


class InvalidArgumentError(APIError):
    """The request is malformed or names something invalid (400, 405, 413, 416, 422)."""


class AuthenticationError(APIError):
    """The API key or a sandbox token is missing, wrong, or does not allow the call (401, 403)."""


class NotFoundError(APIError):
    """The sandbox, file, context, command or other resource does not exist (404)."""


class ConflictError(APIError):
    """The resource is in a state that refuses the call, such as a paused sandbox (409)."""


class BusyError(ConflictError):
    """The code context or session is running another execution (409 ``CONTEXT_BUSY``)."""


class RateLimitedError(APIError):
    """The server refused the call for now (429); see :attr:`retry_after`."""


class TimeoutError(APIError):  # noqa: A001 - the SDK's own kind, also reachable as hybox.TimeoutError
    """An operation did not finish in time on the server (504), or the client gave up waiting."""


class UnavailableError(APIError):
    """The server, the runtime or the sandbox cannot serve the call now (502, 503)."""


class NotSupportedError(InvalidArgumentError):
    """The server or this sandbox's runtime does not implement the operation (``NOT_SUPPORTED``)."""


class InternalError(APIError):
    """The server failed (500 and other 5xx answers)."""


class StreamError(HyboxError):
    """An execution's stream ended before the execution finished, or carried a malformed event."""


class CommandExitError(HyboxError):
    """Raised by ``check=True`` (or :meth:`CommandResult.check`) for a non-zero exit code."""

    def __init__(self, exit_code: int, stdout: str, stderr: str) -> None:
        self.exit_code: int = exit_code
        """The command's exit code."""
        self.stdout: str = stdout
        """The command's standard output."""
        self.stderr: str = stderr
        """The command's standard error."""
        super().__init__(f"command exited with code {exit_code}")


class ExecutionError(HyboxError):
    """Raised by :meth:`Execution.check` when the code raised: carries name, value, traceback."""

    def __init__(self, name: str, value: str, traceback: list[str]) -> None:
        self.name: str = name
        """The exception's name, such as ``ZeroDivisionError``."""
        self.value: str = value
        """The exception's value."""
        self.traceback: list[str] = traceback
        """The traceback's lines."""
        super().__init__(f"{name}: {value}")


_BY_CODE: Final[dict[str, type[APIError]]] = {
    "CONTEXT_BUSY": BusyError,
    "NOT_SUPPORTED": NotSupportedError,
    "TOO_MANY_EXECUTIONS": RateLimitedError,
    "TIMEOUT": TimeoutError,
}

_BY_STATUS: Final[dict[int, type[APIError]]] = {
    400: InvalidArgumentError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    405: InvalidArgumentError,
    408: TimeoutError,
    409: ConflictError,
    413: InvalidArgumentError,
    416: InvalidArgumentError,
    422: InvalidArgumentError,
    426: InvalidArgumentError,
    429: RateLimitedError,
    501: NotSupportedError,
    502: UnavailableError,
    503: UnavailableError,
    504: TimeoutError,
}


def error_class(status: int, code: str) -> type[APIError]:
    """The exception class for an answer's status and wire code."""
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is not None:
        return cls
    return InternalError if status >= 500 else APIError


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def from_response(resp: httpx.Response, body: bytes) -> APIError:
    """Builds the typed error of a non-2xx answer whose body has been read."""
    code = f"HTTP_{resp.status_code}"
    message = ""
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("code"), str):
        code = obj["code"]
        message = str(obj.get("message") or "")
    else:
        message = body[:512].decode("utf-8", "replace").strip()
    cls = error_class(resp.status_code, code)
    return cls(
        resp.status_code,
        code,
        message,
        request_id=resp.headers.get("x-request-id"),
        retry_after=parse_retry_after(resp.headers.get("retry-after")),
    )
