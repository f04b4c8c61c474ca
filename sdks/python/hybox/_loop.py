"""The private event loop that the synchronous API drives the asynchronous one on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _get() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    loop = _loop
    if loop is not None:
        return loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name="hybox-sync", daemon=True)
            t.start()
            _thread = t
            _loop = loop
        return _loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Runs ``coro`` on the private loop and waits for it. An interrupt of the caller (such as
    Ctrl-C) cancels the coroutine, which stops the work on the server."""
    loop = _get()
    if _thread is threading.current_thread():
        coro.close()
        raise RuntimeError(
            "hybox: the synchronous API was called from an SDK callback, which runs on the "
            "SDK's own thread; hand the work to another thread, or use AsyncSandbox"
        )
    fut = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return fut.result()
    except BaseException:
        if not fut.done():
            fut.cancel()
            try:
                fut.result(timeout=6)
            except (concurrent.futures.CancelledError, Exception):
                pass
        raise


def iterate(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterates over an async iterator from synchronous code, one item at a time."""
    nxt = agen.__anext__
    try:
        while True:
            try:
                yield run(nxt())  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
    finally:
        close = getattr(agen, "aclose", None)
        if close is not None:
            run(close())
