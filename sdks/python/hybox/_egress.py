"""The egress policy and the credential vault of one sandbox (async implementation)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _models as m

if TYPE_CHECKING:
    from ._sandbox import AsyncSandbox

__all__ = ["AsyncEgress", "AsyncVault", "PolicyStatus", "VaultState", "allow", "deny", "inline_credential"]

PolicyStatus = m.PolicyStatus
"""The egress policy in force: ``mode``, ``enforcementMode``, ``policy``."""
VaultState = m.VaultState
"""The vault's revision, credentials (names only: secrets are never returned) and bindings."""

_EGRESS = 18080


def allow(target: str) -> dict[str, str]:
    """An egress rule allowing ``target`` (``example.com``, ``*.example.com``, an IP or a CIDR)."""
    return {"action": "allow", "target": target}


def deny(target: str) -> dict[str, str]:
    """An egress rule denying ``target``."""
    return {"action": "deny", "target": target}


def inline_credential(name: str, value: str) -> dict[str, Any]:
    """A vault credential whose secret is given inline."""
    return {"name": name, "source": {"type": "inline", "value": value}}


def _dump(v: Any) -> Any:
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(v, Mapping):
        return {k: _dump(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_dump(x) for x in v]
    return v


class AsyncEgress:
    """The sandbox's egress policy (``sandbox.egress``). A sandbox created without a network
    policy is unrestricted."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def _policy(self, method: str, body: Any = None) -> PolicyStatus:
        kw: dict[str, Any] = {} if body is None else {"json_body": body}
        data = await self._sb._call(_EGRESS, method, "/policy", idempotent=True, **kw)
        return m.PolicyStatus.model_validate(data)

    async def get(self) -> PolicyStatus:
        """The policy in force."""
        return await self._policy("GET")

    async def set(self, policy: m.NetworkPolicy | Mapping[str, Any]) -> PolicyStatus:
        """Replaces the policy (``{"defaultAction": ..., "egress": [rules]}``)."""
        return await self._policy("PUT", _dump(policy))

    async def patch(self, rules: Iterable[m.EgressRule | Mapping[str, Any]]) -> PolicyStatus:
        """Adds rules ahead of the current ones (new rules take priority)."""
        return await self._policy("PATCH", [_dump(r) for r in rules])

    async def delete(self, targets: Iterable[str]) -> PolicyStatus:
        """Removes the rules for ``targets``."""
        return await self._policy("DELETE", list(targets))


class AsyncVault:
    """The sandbox's credential vault (``sandbox.vault``): the sandbox's HTTP requests to bound
    hosts get the credential injected, and the secret never enters the sandbox. Needs a sandbox
    created with ``credential_proxy=True`` and a network policy."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def _call(self, method: str, path: str = "", body: Any = None, idempotent: bool | None = None) -> Any:
        kw: dict[str, Any] = {} if body is None else {"json_body": body}
        return await self._sb._call(_EGRESS, method, "/credential-vault" + path, idempotent=idempotent, **kw)

    async def create(
        self,
        credentials: Sequence[m.VaultCredential | Mapping[str, Any]],
        bindings: Sequence[m.VaultBinding | Mapping[str, Any]],
    ) -> VaultState:
        """Creates the vault. Raises :class:`ConflictError` (``VAULT_EXISTS``) if it exists."""
        body = {"credentials": _dump(list(credentials)), "bindings": _dump(list(bindings))}
        return m.VaultState.model_validate(await self._call("POST", body=body, idempotent=False))

    async def get(self) -> VaultState:
        """The vault's state. Raises :class:`NotFoundError` if there is none."""
        return m.VaultState.model_validate(await self._call("GET"))

    async def patch(self, patch: m.VaultPatchRequest | Mapping[str, Any]) -> VaultState:
        """Adds, replaces or deletes credentials and bindings, optionally at an
        ``expectedRevision`` (a stale one raises :class:`ConflictError`)."""
        return m.VaultState.model_validate(await self._call("PATCH", body=_dump(patch), idempotent=False))

    async def delete(self) -> None:
        """Deletes the vault."""
        await self._call("DELETE")

    async def credentials(self) -> m.VaultCredentialList:
        """The credentials (names and revisions, never values)."""
        return m.VaultCredentialList.model_validate(await self._call("GET", "/credentials"))

    async def credential(self, name: str) -> m.VaultCredentialInfo:
        """One credential's description."""
        return m.VaultCredentialInfo.model_validate(await self._call("GET", f"/credentials/{name}"))

    async def bindings(self) -> m.VaultBindingList:
        """The bindings."""
        return m.VaultBindingList.model_validate(await self._call("GET", "/bindings"))

    async def binding(self, name: str) -> m.VaultBindingInfo:
        """One binding."""
        return m.VaultBindingInfo.model_validate(await self._call("GET", f"/bindings/{name}"))
