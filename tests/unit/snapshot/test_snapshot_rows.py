"""Each snapshot object from a hand-built row (``from_row``), and ``build_snapshot`` over hand-built tables:
the child rows in their written order, the indexes, host-key values and the problems it reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relay.crypto.sealing import SecretBox
from relay.domain.grants import Grant
from relay.snapshot import (
    Binding,
    Host,
    HostKey,
    Model,
    Policy,
    Project,
    RelayKey,
    ServiceAccount,
    Team,
    User,
    build_snapshot,
)
from tests.fixtures.catalog_rows import catalog_tables, policy_row, relay_key_row

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BOX = SecretBox(b"k" * 32)


def test_team_project_and_service_account_from_their_rows() -> None:
    assert Team.from_row({"id": "tm_1", "name": "ml", "extra": 1}) == Team("tm_1", "ml")
    project = Project.from_row(
        {"id": "prj_1", "name": "search", "team_id": "tm_1", "default_policy_id": None, "enabled": False}
    )
    assert project == Project("prj_1", "search", "tm_1", None, False)
    account = ServiceAccount.from_row(
        {"id": "sa_1", "name": "bot", "project_id": "prj_1", "policy_id": "pol_1", "enabled": True}
    )
    assert account == ServiceAccount("sa_1", "bot", "prj_1", "pol_1", True)


def test_user_from_its_row_keeps_its_memberships_read_only() -> None:
    row = {"id": "usr_1", "name": "ada", "email": "ada@x.io", "enabled": True, "token_version": 3}
    given = {"prj_1": "pol_1", "prj_2": None}
    user = User.from_row(row, given)
    assert (user.id, user.name, user.email, user.enabled, user.token_version) == (
        "usr_1",
        "ada",
        "ada@x.io",
        True,
        3,
    )
    assert dict(user.memberships) == {"prj_1": "pol_1", "prj_2": None}
    given["prj_3"] = "pol_3"  # the snapshot does not see later changes to what it was given
    assert "prj_3" not in user.memberships
    with pytest.raises(TypeError):
        user.memberships["prj_9"] = None  # type: ignore[index]


def test_host_and_host_key_from_their_rows() -> None:
    host = Host.from_row({"id": "hst_1", "name": "openai", "base_url": "http://x", "enabled": True})
    assert host == Host("hst_1", "openai", "http://x", True)
    row = {"id": "hk_1", "name": "k1", "host_id": "hst_1", "enabled": False, "updated_at": T0}
    key = HostKey.from_row(row, "sk-1")
    assert key == HostKey("hk_1", "k1", "hst_1", "sk-1", False, str(T0))
    assert HostKey.from_row(row, None).value is None


def test_model_from_its_row_with_its_aliases() -> None:
    row = {"id": "mdl_1", "name": "gpt", "provider": "openai", "enabled": True}
    assert Model.from_row(row, ("g", "gp")) == Model("mdl_1", "gpt", "openai", ("g", "gp"), True)


def _binding_row(**over: Any) -> dict[str, Any]:
    row = {
        "id": "bnd_1",
        "name": "gpt-on-openai",
        "model_id": "mdl_1",
        "host_id": "hst_1",
        "adapter": "openai",
        "upstream_name": None,
        "pricing": {"input": 1.5, "output": 2},
        "enabled": True,
    }
    return {**row, **over}


def test_binding_from_its_row_prices_it_once() -> None:
    binding = Binding.from_row(_binding_row())
    assert (binding.id, binding.model_id, binding.host_id, binding.adapter) == (
        "bnd_1",
        "mdl_1",
        "hst_1",
        "openai",
    )
    assert dict(binding.pricing or {}) == {"input": 1.5, "output": 2}
    assert binding.prices is not None and not binding.unpriced
    unpriced = Binding.from_row(_binding_row(pricing=None))
    assert unpriced.pricing is None and unpriced.prices is None and unpriced.unpriced
    assert Binding.from_row(_binding_row(pricing={"input": 1})).unpriced
    # more than 9 decimals: no integer prices, but still priced (exactly, per call)
    fine = Binding.from_row(_binding_row(pricing={"input": 0.0000000001, "output": 1}))
    assert fine.prices is None and not fine.unpriced


def _policy_row(**over: Any) -> dict[str, Any]:
    given: dict[str, Any] = {
        "models": ["*", "openai/*", "gpt@openai"],
        "key_selection": "round_robin",
        "rate_limit": {"rules": [{"meter": "requests", "limit": 10, "window": "1m"}]},
        "payload_logging": True,
    }
    return policy_row(**{**given, **over})


def test_policy_from_its_row_parses_grants_rules_and_keys_fallbacks_by_model_id() -> None:
    row = _policy_row(fallbacks={"gpt": ["claude"], "g": ["other"], "gone": ["claude"]})
    policy = Policy.from_row(row, ("hk_2", "hk_1"), {"gpt": "mdl_1", "g": "mdl_2"})
    assert policy.grants == (Grant(every=True), Grant(provider="openai"), Grant(model="gpt", host="openai"))
    assert policy.host_key_ids == ("hk_2", "hk_1")
    assert policy.key_selection == "round_robin" and policy.payload_logging and policy.enabled
    assert [(r.meter, r.limit, r.window) for r in policy.rules] == [("requests", 10, "1m")]
    assert dict(policy.fallbacks) == {"mdl_1": ("claude",), "mdl_2": ("other",)}
    bare = Policy.from_row(_policy_row(rate_limit={}, fallbacks=None), (), {})
    assert bare.rules == () and dict(bare.fallbacks) == {}


def test_relay_key_from_its_row_reads_every_field_by_name() -> None:
    row = relay_key_row(
        key_hash="h1",
        expires_at=T0,
        previous_key_hash="h0",
        grace_until=T0 + timedelta(hours=1),
        created_at=T0,  # columns the snapshot does not hold are ignored
    )
    key = RelayKey.from_row(row)
    assert (key.id, key.key_hash, key.previous_key_hash, key.expires_at) == ("key_1", "h1", "h0", T0)
    with pytest.raises(KeyError):
        RelayKey.from_row({k: v for k, v in row.items() if k != "prefix"})


def _tables() -> dict[str, list[dict[str, Any]]]:
    return catalog_tables(
        **{
            "teams": [{"id": "tm_1", "name": "ml"}],
            "projects": [
                {"id": "prj_1", "name": "p", "team_id": "tm_1", "default_policy_id": "pol_1", "enabled": True}
            ],
            "users": [{"id": "usr_1", "name": "ada", "email": "a@x.io", "enabled": True, "token_version": 0}],
            "user_memberships": [
                {"user_id": "usr_1", "project_id": "prj_2", "policy_id": None, "position": 1},
                {"user_id": "usr_1", "project_id": "prj_1", "policy_id": "pol_1", "position": 0},
            ],
            "hosts": [{"id": "hst_1", "name": "openai", "base_url": "http://x", "enabled": True}],
            "host_keys": [
                {
                    "id": "hk_1",
                    "name": "sealed",
                    "host_id": "hst_1",
                    "value_encrypted": BOX.seal("sk-sealed", bound_to="hk_1"),
                    "value_from_env": None,
                    "enabled": True,
                    "updated_at": T0,
                },
                {
                    "id": "hk_2",
                    "name": "moved",
                    "host_id": "hst_1",
                    "value_encrypted": BOX.seal("sk-other-row", bound_to="hk_9"),
                    "value_from_env": None,
                    "enabled": True,
                    "updated_at": T0,
                },
                {
                    "id": "hk_3",
                    "name": "from-env",
                    "host_id": "hst_1",
                    "value_encrypted": None,
                    "value_from_env": "OPENAI_KEY",
                    "enabled": True,
                    "updated_at": T0,
                },
            ],
            "models": [
                {"id": "mdl_1", "name": "gpt", "provider": "openai", "enabled": True},
                {"id": "mdl_2", "name": "claude", "provider": "anthropic", "enabled": True},
            ],
            "model_aliases": [
                {"model_id": "mdl_1", "alias": "g2", "position": 1},
                {"model_id": "mdl_1", "alias": "g1", "position": 0},
            ],
            "bindings": [
                _binding_row(id="bnd_b", name="later", created_at=T0 + timedelta(seconds=1)),
                _binding_row(id="bnd_a", name="free", created_at=T0, pricing=None),
                _binding_row(
                    id="bnd_c", name="off", created_at=T0, pricing=None, enabled=False, model_id="mdl_2"
                ),
            ],
            "policies": [_policy_row(fallbacks={"g1": ["claude"]})],
            "policy_host_keys": [
                {"policy_id": "pol_1", "host_key_id": "hk_3", "position": 1},
                {"policy_id": "pol_1", "host_key_id": "hk_1", "position": 0},
            ],
            "settings": [{"key": "payload_logging", "value": {"enabled": False}}],
        }
    )


def test_build_snapshot_orders_children_indexes_and_reports_problems() -> None:
    snap = build_snapshot(7, _tables(), BOX, {"OPENAI_KEY": "sk-env"})
    assert snap.revision == 7
    assert list(snap.users["usr_1"].memberships) == ["prj_1", "prj_2"]
    assert snap.models["mdl_1"].aliases == ("g1", "g2")
    assert snap.model_by_name["g2"] is snap.models["mdl_1"] is snap.model_by_name["gpt"]
    assert snap.host_by_name["openai"] is snap.hosts["hst_1"]
    assert [b.id for b in snap.bindings_by_model["mdl_1"]] == ["bnd_a", "bnd_b"]  # creation order
    assert snap.policies["pol_1"].host_key_ids == ("hk_1", "hk_3")
    assert dict(snap.policies["pol_1"].fallbacks) == {"mdl_1": ("claude",)}  # written by alias
    assert [snap.host_keys[k].value for k in ("hk_1", "hk_2", "hk_3")] == ["sk-sealed", None, "sk-env"]
    assert snap.settings["payload_logging"] == {"enabled": False}
    assert snap.problems == (
        "host key moved does not decrypt with this master key; it is not used",
        "binding free has no pricing: its calls cost nothing in usage (cost_nanos null) "
        "and spend limits do not count them; set pricing, or pricing: from_catalog",
    )


def test_build_snapshot_names_an_unset_environment_variable() -> None:
    snap = build_snapshot(1, _tables(), BOX, {})
    assert snap.host_keys["hk_3"].value is None
    assert "host key from-env: environment variable OPENAI_KEY is unset" in snap.problems


def test_the_token_verifier_carries_over_while_the_signing_keys_are_unchanged() -> None:
    first = build_snapshot(1, _tables(), BOX, {})
    second = build_snapshot(2, _tables(), BOX, {}, first)
    assert second.verifier is first.verifier
    tables = {**_tables(), "signing_keys": [{"id": "sk_1", "public_key": b"\x00" * 32}]}
    third = build_snapshot(3, tables, BOX, {}, second)
    assert third.verifier is not second.verifier and third.signing_key_ids == {"sk_1"}
