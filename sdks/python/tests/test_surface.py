"""The public surface: every public name documented, the sync and async twins in step."""

from __future__ import annotations

import inspect

import hybox

PAIRS = [
    (hybox.Sandbox, hybox.AsyncSandbox),
    (hybox.Commands, hybox.AsyncCommands),
    (hybox.CommandHandle, hybox.AsyncCommandHandle),
    (hybox.Session, hybox.AsyncSession),
    (hybox.Pty, hybox.AsyncPty),
    (hybox.PtySession, hybox.AsyncPtySession),
    (hybox.Code, hybox.AsyncCode),
    (hybox.Files, hybox.AsyncFiles),
    (hybox.Egress, hybox.AsyncEgress),
    (hybox.Vault, hybox.AsyncVault),
]


def _public(cls: type) -> dict[str, object]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_")}


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for name in hybox.__all__:
        obj = getattr(hybox, name)
        if name == "models" or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("hybox.") and obj.__module__ != "hybox._models":
            for attr, member in _public(obj).items():
                fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if callable(fn) and not (getattr(fn, "__doc__", None) or "").strip():
                    missing.append(f"{name}.{attr}")
    assert missing == []


def test_sync_and_async_surfaces_match() -> None:
    for sync, aio in PAIRS:
        s, a = set(_public(sync)), set(_public(aio))
        assert s == a, f"{sync.__name__} vs {aio.__name__}: only sync {s - a}, only async {a - s}"
        for name in s:
            sm, am = getattr(sync, name), getattr(aio, name)
            if callable(sm) and callable(am) and not isinstance(sm, type):
                sp = list(inspect.signature(sm).parameters)
                ap = list(inspect.signature(am).parameters)
                assert sp == ap, f"{sync.__name__}.{name}: {sp} != {ap}"
