"""Server-wide resources: warm pools of container sandboxes (``/pools``) and named volumes
(``/volumes``). ``AsyncPool``/``AsyncVolume`` are the implementation; ``Pool``/``Volume`` drive
them over a blocking transport."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from . import _models as m
from ._config import ConnectionConfig
from ._sandbox import _transport
from ._transport import Transport, drive

__all__ = ["AsyncPool", "AsyncVolume", "Pool", "Volume", "PoolInfo", "VolumeInfo"]

T = TypeVar("T")


class PoolInfo(m.Pool):
    """A pool as the server reports it: ``name``, ``template``, ``capacitySpec``, ``status``
    (``available``, ``allocated``, ``starting``, ``lastError``), ``source``."""


class VolumeInfo(m.NamedVolume):
    """A named volume: ``name``, ``createdAt``, ``sizeBytes`` and ``usedBy`` (sandbox ids)."""


async def _with(t: Transport, f: Callable[[Transport], Awaitable[T]]) -> T:
    try:
        return await f(t)
    finally:
        await t.aclose()


def _capacity(size: int, max_size: int) -> dict[str, int]:
    return {"bufferMin": size, "bufferMax": size, "poolMin": 0, "poolMax": max(max_size, size)}


async def _pool_list(t: Transport) -> list[PoolInfo]:
    data = await t.call("GET", t.url("/pools"))
    return [PoolInfo.model_validate(p) for p in data["items"]]


async def _pool_get(t: Transport, name: str) -> PoolInfo:
    return PoolInfo.model_validate(await t.call("GET", t.url("/pools/" + quote(name, safe=""))))


async def _pool_create(t: Transport, body: dict[str, Any]) -> PoolInfo:
    return PoolInfo.model_validate(await t.call("POST", t.url("/pools"), json_body=body))


async def _pool_resize(t: Transport, name: str, size: int, max_size: int) -> PoolInfo:
    return PoolInfo.model_validate(await t.call("PUT", t.url("/pools/" + quote(name, safe="")),
                                                json_body={"capacitySpec": _capacity(size, max_size)}))


async def _pool_delete(t: Transport, name: str) -> None:
    await t.send("DELETE", t.url("/pools/" + quote(name, safe="")))


def _pool_body(name: str, image: str, runtime: str | None, size: int, max_size: int,
               resource_limits: Mapping[str, str] | None, max_idle_seconds: int) -> dict[str, Any]:
    template: dict[str, Any] = {"image": {"uri": image}}
    if runtime:
        template["runtime"] = runtime
    if resource_limits:
        template["resourceLimits"] = dict(resource_limits)
    if max_idle_seconds:
        template["maxIdleSeconds"] = max_idle_seconds
    return {"name": name, "template": template, "capacitySpec": _capacity(size, max_size)}


class AsyncPool:
    """Warm pools: containers of one image and runtime started ahead, which a create of that
    image and runtime claims instead of starting one (the server's ``/pools``)."""

    @staticmethod
    async def list(*, domain: str | None = None, api_key: str | None = None,
                   config: ConnectionConfig | None = None) -> list[PoolInfo]:
        """Every pool of the server, with its status."""
        return await _with(_transport(config, domain, api_key), _pool_list)

    @staticmethod
    async def get(name: str, *, domain: str | None = None, api_key: str | None = None,
                  config: ConnectionConfig | None = None) -> PoolInfo:
        """One pool. Raises :class:`NotFoundError` when there is none of that name."""
        return await _with(_transport(config, domain, api_key), lambda t: _pool_get(t, name))

    @staticmethod
    async def create(name: str, image: str, *, runtime: str | None = None, size: int = 2,
                     max_size: int = 1024, resource_limits: Mapping[str, str] | None = None,
                     max_idle_seconds: int = 0, domain: str | None = None, api_key: str | None = None,
                     config: ConnectionConfig | None = None) -> PoolInfo:
        """Creates a pool keeping ``size`` idle members of ``image``; they start in the
        background. Raises :class:`InvalidArgumentError` (bad name, an image the server lacks, a
        runtime that keeps no pools) or :class:`ConflictError` (the name is taken)."""
        body = _pool_body(name, image, runtime, size, max_size, resource_limits, max_idle_seconds)
        return await _with(_transport(config, domain, api_key), lambda t: _pool_create(t, body))

    @staticmethod
    async def resize(name: str, size: int, *, max_size: int = 1024, domain: str | None = None,
                     api_key: str | None = None, config: ConnectionConfig | None = None) -> PoolInfo:
        """Changes how many idle members a pool keeps."""
        return await _with(_transport(config, domain, api_key), lambda t: _pool_resize(t, name, size, max_size))

    @staticmethod
    async def delete(name: str, *, domain: str | None = None, api_key: str | None = None,
                     config: ConnectionConfig | None = None) -> None:
        """Deletes a pool and its idle members; sandboxes claimed from it keep running."""
        await _with(_transport(config, domain, api_key), lambda t: _pool_delete(t, name))


class Pool:
    """The blocking twin of :class:`AsyncPool`."""

    @staticmethod
    def list(*, domain: str | None = None, api_key: str | None = None,
             config: ConnectionConfig | None = None) -> list[PoolInfo]:
        """Every pool of the server, with its status."""
        return drive(_with(_transport(config, domain, api_key, blocking=True), _pool_list))

    @staticmethod
    def get(name: str, *, domain: str | None = None, api_key: str | None = None,
            config: ConnectionConfig | None = None) -> PoolInfo:
        """One pool. Raises :class:`NotFoundError` when there is none of that name."""
        return drive(_with(_transport(config, domain, api_key, blocking=True), lambda t: _pool_get(t, name)))

    @staticmethod
    def create(name: str, image: str, *, runtime: str | None = None, size: int = 2, max_size: int = 1024,
               resource_limits: Mapping[str, str] | None = None, max_idle_seconds: int = 0,
               domain: str | None = None, api_key: str | None = None,
               config: ConnectionConfig | None = None) -> PoolInfo:
        """Creates a pool (see :meth:`AsyncPool.create`)."""
        body = _pool_body(name, image, runtime, size, max_size, resource_limits, max_idle_seconds)
        return drive(_with(_transport(config, domain, api_key, blocking=True), lambda t: _pool_create(t, body)))

    @staticmethod
    def resize(name: str, size: int, *, max_size: int = 1024, domain: str | None = None,
               api_key: str | None = None, config: ConnectionConfig | None = None) -> PoolInfo:
        """Changes how many idle members a pool keeps."""
        return drive(_with(_transport(config, domain, api_key, blocking=True),
                           lambda t: _pool_resize(t, name, size, max_size)))

    @staticmethod
    def delete(name: str, *, domain: str | None = None, api_key: str | None = None,
               config: ConnectionConfig | None = None) -> None:
        """Deletes a pool and its idle members."""
        drive(_with(_transport(config, domain, api_key, blocking=True), lambda t: _pool_delete(t, name)))


async def _vol_list(t: Transport) -> list[VolumeInfo]:
    data = await t.call("GET", t.url("/volumes"))
    return [VolumeInfo.model_validate(v) for v in data["items"]]


async def _vol_get(t: Transport, name: str) -> VolumeInfo:
    return VolumeInfo.model_validate(await t.call("GET", t.url("/volumes/" + quote(name, safe=""))))


async def _vol_create(t: Transport, name: str) -> VolumeInfo:
    return VolumeInfo.model_validate(await t.call("POST", t.url("/volumes"), json_body={"name": name}))


async def _vol_delete(t: Transport, name: str) -> None:
    await t.send("DELETE", t.url("/volumes/" + quote(name, safe="")))


class AsyncVolume:
    """Named volumes: directories the server keeps, which sandboxes mount by name (a create's
    ``pvc`` volume) and share."""

    @staticmethod
    async def list(*, domain: str | None = None, api_key: str | None = None,
                   config: ConnectionConfig | None = None) -> list[VolumeInfo]:
        """Every named volume and the sandboxes using it."""
        return await _with(_transport(config, domain, api_key), _vol_list)

    @staticmethod
    async def get(name: str, *, domain: str | None = None, api_key: str | None = None,
                  config: ConnectionConfig | None = None) -> VolumeInfo:
        """One named volume. Raises :class:`NotFoundError` when there is none of that name."""
        return await _with(_transport(config, domain, api_key), lambda t: _vol_get(t, name))

    @staticmethod
    async def create(name: str, *, domain: str | None = None, api_key: str | None = None,
                     config: ConnectionConfig | None = None) -> VolumeInfo:
        """Makes an empty named volume. Raises :class:`ConflictError` when it exists."""
        return await _with(_transport(config, domain, api_key), lambda t: _vol_create(t, name))

    @staticmethod
    async def delete(name: str, *, domain: str | None = None, api_key: str | None = None,
                     config: ConnectionConfig | None = None) -> None:
        """Removes a named volume and its files; :class:`ConflictError` while a sandbox uses it."""
        await _with(_transport(config, domain, api_key), lambda t: _vol_delete(t, name))


class Volume:
    """The blocking twin of :class:`AsyncVolume`."""

    @staticmethod
    def list(*, domain: str | None = None, api_key: str | None = None,
             config: ConnectionConfig | None = None) -> list[VolumeInfo]:
        """Every named volume and the sandboxes using it."""
        return drive(_with(_transport(config, domain, api_key, blocking=True), _vol_list))

    @staticmethod
    def get(name: str, *, domain: str | None = None, api_key: str | None = None,
            config: ConnectionConfig | None = None) -> VolumeInfo:
        """One named volume."""
        return drive(_with(_transport(config, domain, api_key, blocking=True), lambda t: _vol_get(t, name)))

    @staticmethod
    def create(name: str, *, domain: str | None = None, api_key: str | None = None,
               config: ConnectionConfig | None = None) -> VolumeInfo:
        """Makes an empty named volume."""
        return drive(_with(_transport(config, domain, api_key, blocking=True), lambda t: _vol_create(t, name)))

    @staticmethod
    def delete(name: str, *, domain: str | None = None, api_key: str | None = None,
               config: ConnectionConfig | None = None) -> None:
        """Removes a named volume and its files."""
        drive(_with(_transport(config, domain, api_key, blocking=True), lambda t: _vol_delete(t, name)))
