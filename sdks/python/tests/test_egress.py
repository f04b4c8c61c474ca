"""The egress policy and the credential vault of a sandbox."""

from __future__ import annotations

import pytest

import hybox
from conftest import Server


def test_egress_policy(server: Server) -> None:
    with hybox.Sandbox.create(network_policy={"defaultAction": "deny", "egress": [hybox.allow("example.com")]}) as sb:
        st = sb.egress.get()
        assert st.policy.defaultAction is not None and st.policy.defaultAction.root == "deny"
        assert [r.target for r in st.policy.egress or []] == ["example.com"]
        st = sb.egress.patch([hybox.allow("*.example.org"), hybox.deny("10.0.0.0/8")])
        targets = [r.target for r in st.policy.egress or []]
        assert set(targets) == {"example.com", "*.example.org", "10.0.0.0/8"}
        st = sb.egress.delete(["example.com"])
        assert "example.com" not in [r.target for r in st.policy.egress or []]
        st = sb.egress.set({"defaultAction": "allow", "egress": []})
        assert st.mode == "allow_all"
        with pytest.raises(hybox.InvalidArgumentError):
            sb.egress.patch([{"action": "maybe", "target": "x.com"}])


def test_vault(server: Server) -> None:
    with hybox.Sandbox.create(
        network_policy={"defaultAction": "deny", "egress": [hybox.allow("api.example.com")]},
        credential_proxy=True,
    ) as sb:
        with pytest.raises(hybox.NotFoundError):
            sb.vault.get()
        binding = {
            "name": "api",
            "match": {"hosts": ["api.example.com"], "schemes": ["https"], "ports": [443]},
            "auth": {"type": "bearer", "credential": "token"},
        }
        st = sb.vault.create([hybox.inline_credential("token", "s3cret")], [binding])
        assert [c.name for c in st.credentials] == ["token"]
        assert "s3cret" not in st.model_dump_json()
        with pytest.raises(hybox.ConflictError) as e:
            sb.vault.create([hybox.inline_credential("token", "x")], [binding])
        assert e.value.code == "VAULT_EXISTS"
        assert sb.vault.credential("token").name == "token"
        assert [b.name for b in sb.vault.bindings().bindings] == ["api"]
        assert sb.vault.binding("api").name == "api"
        st2 = sb.vault.patch({"expectedRevision": st.revision,
                              "credentials": {"replace": [hybox.inline_credential("token", "n3w")]}})
        assert st2.revision > st.revision
        with pytest.raises(hybox.ConflictError) as e:
            sb.vault.patch({"expectedRevision": st.revision, "credentials": {"delete": ["token"]}})
        assert e.value.code == "REVISION_CONFLICT"
        assert [c.name for c in sb.vault.credentials().credentials] == ["token"]
        sb.vault.delete()
        with pytest.raises(hybox.NotFoundError):
            sb.vault.get()
