"""Typed errors from real answers of the server, and the SDK's retries."""

from __future__ import annotations

import time

import pytest

import hybox
from conftest import Refuser, Server

MISSING = "00000000-0000-4000-8000-000000000000"


def test_typed_errors_from_the_server(server: Server) -> None:
    with pytest.raises(hybox.NotFoundError) as nf:
        hybox.Sandbox.connect(MISSING)
    assert nf.value.code == "SANDBOX_NOT_FOUND" and nf.value.status == 404 and not nf.value.is_retryable
    assert nf.value.request_id

    with pytest.raises(hybox.AuthenticationError) as au:
        hybox.Sandbox.list(api_key="wrong")
    assert au.value.code == "INVALID_API_KEY" and au.value.status == 401

    with pytest.raises(hybox.InvalidArgumentError) as ia:
        hybox.Sandbox.create(timeout=5)
    assert ia.value.code == "INVALID_REQUEST" and "timeout" in ia.value.message

    with hybox.Sandbox.create() as sb:
        with pytest.raises(hybox.ConflictError) as cf:
            sb.resume()
        assert cf.value.code == "INVALID_STATE"
        with pytest.raises(hybox.NotSupportedError) as ns:
            sb.pty.create()
        assert isinstance(ns.value, hybox.InvalidArgumentError)
        with pytest.raises(hybox.InvalidArgumentError) as ul:
            sb.code.run("1", language="cobol")
        assert ul.value.code == "UNKNOWN_LANGUAGE"
        with pytest.raises(hybox.ConflictError):
            sb.vault.get()  # created without the credential proxy
    for e in (nf.value, au.value, ia.value, cf.value):
        assert isinstance(e, hybox.APIError) and isinstance(e, hybox.HyboxError)


def test_rate_limited_is_retried(server: Server, refuser: Refuser) -> None:
    sb = hybox.Sandbox.create(domain=refuser.domain)
    try:
        refuser.refuse = 2  # two 429 answers, then the real one
        info = sb.get_info()
        assert str(info.id) == sb.id
        assert [s for s in refuser.seen if s.startswith("GET /v1/sandboxes/")][-3:] == [f"GET /v1/sandboxes/{sb.id}"] * 3

        refuser.refuse = 100
        refuser.retry_after = "1"
        t = time.monotonic()
        with pytest.raises(hybox.RateLimitedError) as e:
            hybox.Sandbox.list(config=hybox.ConnectionConfig(domain=refuser.domain, max_retries=2, max_retry_wait=0.2))
        assert e.value.retry_after == 1.0 and e.value.is_retryable and e.value.code == "TOO_MANY_EXECUTIONS"
        assert time.monotonic() - t < 3  # the wait was capped at max_retry_wait
        refuser.refuse = 0
    finally:
        sb.kill()


def test_unavailable_is_retried_only_when_idempotent(server: Server, refuser: Refuser) -> None:
    refuser.status, refuser.retry_after = 503, None
    refuser.refuse = 1
    page = hybox.Sandbox.list(domain=refuser.domain)  # GET: retried
    assert page.pagination.page == 1
    refuser.refuse = 1
    with pytest.raises(hybox.UnavailableError) as e:
        hybox.Sandbox.create(domain=refuser.domain)  # POST /sandboxes: not retried
    assert e.value.status == 503 and e.value.is_retryable
    refuser.refuse = 0


def test_client_timeout(server: Server, refuser: Refuser) -> None:
    refuser.stall = 1.0
    with pytest.raises(hybox.TimeoutError) as e:
        hybox.Sandbox.list(config=hybox.ConnectionConfig(domain=refuser.domain, request_timeout=0.2))
    assert e.value.code == "CLIENT_TIMEOUT"
    refuser.stall = 0


def test_unreachable_server() -> None:
    with pytest.raises(hybox.UnavailableError):
        hybox.Sandbox.list(config=hybox.ConnectionConfig(domain="127.0.0.1:9", api_key="k", max_retries=1))
