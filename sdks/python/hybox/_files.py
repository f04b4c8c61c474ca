"""The sandbox's filesystem (async implementation)."""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from . import _models as m
from ._errors import NotFoundError

if TYPE_CHECKING:
    from ._sandbox import AsyncSandbox

__all__ = ["AsyncFiles", "FileInfo", "WriteEntry"]

class FileInfo(m.FileInfo):
    """A file's description: ``path``, ``type``, ``size``, times, ``owner``, ``group``, ``mode``
    (octal digits as a decimal number: 644 means 0o644)."""

_EXECD = 44772


@dataclass
class WriteEntry:
    """One file of :meth:`AsyncFiles.write_many`."""

    path: str
    """Where to write, absolute or relative to the sandbox's working directory."""
    data: str | bytes | IO[bytes]
    """The content: text (UTF-8), bytes, or a binary file object read as the upload streams."""
    mode: int | None = None
    """Permission bits as octal digits (644), or None for the server's default (0644)."""


def _content(data: str | bytes | IO[bytes]) -> bytes | IO[bytes]:
    return data.encode() if isinstance(data, str) else data


class AsyncFiles:
    """Files in one sandbox (``sandbox.files``)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def read_bytes(self, path: str) -> bytes:
        """The file's content. Raises :class:`NotFoundError` if it does not exist."""
        resp = await self._sb._send(_EXECD, "GET", "/files/download", params={"path": path})
        return bytes(resp.content)

    async def read(self, path: str, encoding: str = "utf-8") -> str:
        """The file's content as text."""
        return (await self.read_bytes(path)).decode(encoding)

    async def stream(self, path: str, chunk_size: int = 1 << 16) -> AsyncIterator[bytes]:
        """Iterates over the file's content as it downloads."""
        ep = await self._sb._resolve(_EXECD)
        resp = await self._sb._t.send(
            "GET", ep.base + "/files/download", headers=ep.headers, params={"path": path}, stream=True
        )
        try:
            async for chunk in self._sb._t.iter_bytes(resp, chunk_size):
                yield chunk
        finally:
            await self._sb._t.close(resp)

    async def write(self, path: str, data: str | bytes | IO[bytes], *, mode: int | None = None) -> None:
        """Writes one file (parents are created). ``data`` may be a binary file object."""
        await self.write_many([WriteEntry(path, data, mode)])

    async def write_many(self, entries: Iterable[WriteEntry]) -> None:
        """Writes several files in one upload."""
        parts: list[tuple[str, tuple[str | None, Any, str]]] = []
        replayable = True  # a file object is read once: such an upload is not retried
        for e in entries:
            replayable = replayable and isinstance(e.data, (str, bytes))
            meta: dict[str, Any] = {"path": e.path}
            if e.mode is not None:
                meta["mode"] = e.mode
            parts.append(("metadata", (None, json.dumps(meta), "application/json")))
            parts.append(("file", (e.path.rsplit("/", 1)[-1] or "file", _content(e.data), "application/octet-stream")))
        if not parts:
            return
        await self._sb._send(_EXECD, "POST", "/files/upload", files=parts, idempotent=replayable)

    async def list(self, path: str, *, depth: int = 1) -> builtins.list[FileInfo]:
        """The entries below directory ``path``, ``depth`` levels deep."""
        data = await self._sb._call(_EXECD, "GET", "/directories/list", params={"path": path, "depth": depth})
        return [FileInfo.model_validate(x) for x in data or []]

    async def info(self, path: str) -> FileInfo:
        """The description of ``path`` (a symlink is described, not followed).
        Raises :class:`NotFoundError` if it does not exist."""
        data = await self._sb._call(_EXECD, "GET", "/files/info", params={"path": path})
        return FileInfo.model_validate(data[path])

    async def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        try:
            await self.info(path)
        except NotFoundError:
            return False
        return True

    async def remove(self, path: str) -> None:
        """Removes a file, a symlink or a directory with everything in it. A missing path is
        not an error."""
        try:
            fi = await self.info(path)
        except NotFoundError:
            return
        if fi.type == "directory":
            await self._sb._send(_EXECD, "DELETE", "/directories", params={"path": path})
        else:
            await self._sb._send(_EXECD, "DELETE", "/files", params={"path": path})

    async def rename(self, src: str, dest: str) -> None:
        """Moves ``src`` to ``dest``. Raises :class:`ConflictError` if ``dest`` exists."""
        await self._sb._send(_EXECD, "POST", "/files/mv", json_body=[{"src": src, "dest": dest}], idempotent=False)

    async def make_dir(self, path: str, *, mode: int | None = None) -> None:
        """Creates a directory and its parents (``mkdir -p``)."""
        await self._sb._send(
            _EXECD, "POST", "/directories", json_body={path: {"mode": mode or 755}}, idempotent=True
        )

    async def search(self, path: str, pattern: str) -> builtins.list[FileInfo]:
        """Files below ``path`` matching the glob ``pattern`` (``**`` spans directories)."""
        data = await self._sb._call(_EXECD, "GET", "/files/search", params={"path": path, "pattern": pattern})
        return [FileInfo.model_validate(x) for x in data or []]

    async def replace(self, path: str, old: str, new: str) -> int:
        """Replaces every ``old`` with ``new`` in the file; returns the number of replacements."""
        counts = await self.replace_many({path: (old, new)})
        return counts.get(path, 0)

    async def replace_many(self, edits: Mapping[str, tuple[str, str]]) -> dict[str, int]:
        """Replaces text in several files: ``{path: (old, new)}``; returns counts by path."""
        body = {p: {"old": o, "new": n} for p, (o, n) in edits.items()}
        data = await self._sb._call(
            _EXECD, "POST", "/files/replace", params={"verbose": "true"}, json_body=body, idempotent=False
        )
        return {p: int(v.get("replacedCount", 0)) for p, v in (data or {}).items()}

    async def set_permissions(
        self, path: str, *, mode: int | None = None, owner: str | None = None, group: str | None = None
    ) -> None:
        """Changes a file's mode (octal digits, 644) and, in containers, its owner and group."""
        p: dict[str, Any] = {}
        if mode is not None:
            p["mode"] = mode
        if owner is not None:
            p["owner"] = owner
        if group is not None:
            p["group"] = group
        await self._sb._send(_EXECD, "POST", "/files/permissions", json_body={path: p}, idempotent=True)
