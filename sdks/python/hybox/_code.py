"""The code interpreter (async implementation)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _models as m
from ._execution import ErrorHandler, Execution, Handlers, OutputHandler, ResultHandler

if TYPE_CHECKING:
    from ._sandbox import AsyncSandbox

__all__ = ["AsyncCode", "Context"]

class Context(m.CodeContext):
    """A code context: ``id``, ``language``, ``cwd``. Variables live on between its executions."""

_EXECD = 44772


class AsyncCode:
    """Code contexts and executions in one sandbox (``sandbox.code``)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def run(
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
        """Runs ``code`` and returns its :class:`Execution`.

        Without ``context`` the code runs in the sandbox's default context for ``language``.
        Output, rich results (``display()`` included) and the error stream to the callbacks
        as they happen. An exception in the code is data (``execution.error``);
        :meth:`Execution.check` raises it. ``timeout`` (seconds) stops the execution on the
        server; cancelling the call interrupts it. Raises :class:`BusyError` while the
        context runs another execution.
        """
        body: dict[str, Any] = {"code": code}
        if context is None:
            body["context"] = {"language": language}
        else:
            cid = context if isinstance(context, str) else context.id
            body["context"] = {"id": cid}
        if timeout is not None:
            body["timeoutMs"] = max(1, int(timeout * 1000))
        x = Execution()
        h = Handlers(on_stdout=on_stdout, on_stderr=on_stderr, on_result=on_result, on_error=on_error)
        await self._sb._stream("/code", body, h, x, "/code", timeout)
        return x

    async def create_context(self, language: str = "python", *, cwd: str | None = None) -> Context:
        """Starts a new context (a fresh interpreter) for ``language``."""
        body: dict[str, Any] = {"language": language}
        if cwd is not None:
            body["cwd"] = cwd
        data = await self._sb._call(_EXECD, "POST", "/code/context", json_body=body, idempotent=False)
        return Context.model_validate(data)

    async def list_contexts(self, language: str | None = None) -> list[Context]:
        """The sandbox's contexts, optionally of one language."""
        params = {} if language is None else {"language": language}
        data = await self._sb._call(_EXECD, "GET", "/code/contexts", params=params)
        return [Context.model_validate(c) for c in data or []]

    async def delete_context(self, context: Context | str) -> None:
        """Ends a context. Raises :class:`NotFoundError` for an unknown one."""
        cid = context if isinstance(context, str) else context.id
        await self._sb._send(_EXECD, "DELETE", f"/code/contexts/{cid}")

    async def interrupt(self, execution_id: str) -> None:
        """Interrupts a running execution (its ``Execution.id``, or a context id)."""
        await self._sb._send(_EXECD, "DELETE", "/code", params={"id": execution_id})
