"""Routing (SPEC §4 steps 1–4) and the model listing, in-process over a hand-built snapshot: each
refusal with its exact status and code, aliases and pins, binding order, and which keys a plan gets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from relay.errors import RelayError
from relay.request.routing import granted_models, resolve
from tests.unit.request.conftest import CHAT_ALIAS, CHAT_MODEL, CHAT_UPSTREAM, CoreCatalog


def refusal(catalog: CoreCatalog, requested: str, policy_name: str = "core-main") -> RelayError:
    snapshot = catalog.snapshot()
    policy = next(p for p in snapshot.policies.values() if p.name == policy_name)
    with pytest.raises(RelayError) as caught:
        resolve(policy, requested, snapshot)
    return caught.value


def test_a_model_routes_to_its_binding_with_the_pool_keys_of_its_host(catalog: CoreCatalog) -> None:
    plan = resolve(catalog.policy, CHAT_MODEL, catalog.snapshot())
    assert (plan.model.id, plan.binding.id, plan.host.id) == (
        catalog.model.id,
        catalog.binding.id,
        catalog.host.id,
    )
    assert [k.id for k in plan.keys] == [catalog.k1.id, catalog.k2.id]
    assert plan.upstream_model == CHAT_UPSTREAM


def test_an_alias_and_surrounding_spaces_find_the_model(catalog: CoreCatalog) -> None:
    assert resolve(catalog.policy, f"  {CHAT_ALIAS} ", catalog.snapshot()).model.name == CHAT_MODEL


def test_without_an_upstream_name_the_model_name_is_sent(catalog: CoreCatalog) -> None:
    catalog.build.change(catalog.binding, upstream_name=None)
    assert resolve(catalog.policy, CHAT_MODEL, catalog.snapshot()).upstream_model == CHAT_MODEL


@pytest.mark.parametrize("requested", ["no-such-model", f"{CHAT_MODEL}@no-such-host"])
def test_an_unknown_model_or_pinned_host_is_404_model_not_found(catalog: CoreCatalog, requested: str) -> None:
    error = refusal(catalog, requested)
    assert (error.status, error.code) == (404, "model_not_found")
    assert requested in str(error)


def test_a_typo_is_answered_with_the_closest_granted_model(catalog: CoreCatalog) -> None:
    error = refusal(catalog, "core-caht")
    assert (error.status, error.code) == (404, "model_not_found")
    assert str(error) == f'model "core-caht" not found; did you mean "{CHAT_MODEL}"?'
    assert str(refusal(catalog, "core-chat-alais")).endswith(f'did you mean "{CHAT_ALIAS}"?')
    assert str(refusal(catalog, "completely-different")) == 'model "completely-different" not found'
    assert str(refusal(catalog, "core-caht" * 20)).endswith("not found")  # too long to compare


def test_a_suggestion_is_worked_out_once_per_snapshot_policy_and_name(catalog: CoreCatalog) -> None:
    """A batch of thousands of items naming one mistyped model compares the names once."""
    snapshot = catalog.snapshot()
    policy = catalog.policy
    for _ in range(3):
        with pytest.raises(RelayError):
            resolve(policy, "core-caht", snapshot)
    assert snapshot.suggestions == {(policy.id, "core-caht"): CHAT_MODEL}
    snapshot.suggestions[(policy.id, "core-caht")] = "remembered"  # the memo is what answers now
    with pytest.raises(RelayError) as caught:
        resolve(policy, "core-caht", snapshot)
    assert str(caught.value).endswith('did you mean "remembered"?')
    assert catalog.snapshot().suggestions == {}  # a new snapshot starts afresh


def test_a_suggestion_never_names_a_model_the_caller_is_not_granted(catalog: CoreCatalog) -> None:
    secret = catalog.build.model("core-secret-model")
    catalog.build.bind(secret, catalog.host)
    catalog.build.policy("narrow", models=(CHAT_MODEL,), keys=(catalog.k1,))
    assert str(refusal(catalog, "core-secret-modle")).endswith('did you mean "core-secret-model"?')
    narrow = refusal(catalog, "core-secret-modle", "narrow")
    assert str(narrow) == 'model "core-secret-modle" not found', narrow
    assert str(refusal(catalog, "core-chta", "narrow")).endswith(f'did you mean "{CHAT_MODEL}"?')


def test_a_disabled_model_is_403_model_disabled(catalog: CoreCatalog) -> None:
    catalog.build.change(catalog.model, enabled=False)
    assert (refusal(catalog, CHAT_MODEL).status, refusal(catalog, CHAT_MODEL).code) == (403, "model_disabled")


@pytest.mark.parametrize("grant", ["other-model", "anthropic/*", "@other-host", f"{CHAT_MODEL}@other-host"])
def test_a_policy_that_does_not_grant_the_model_is_403_model_not_allowed(
    catalog: CoreCatalog, grant: str
) -> None:
    catalog.build.policy("narrow", models=(grant,), keys=(catalog.k1,))
    error = refusal(catalog, CHAT_MODEL, "narrow")
    assert (error.status, error.code) == (403, "model_not_allowed")
    assert '"narrow"' in str(error)


@pytest.mark.parametrize(
    "grant", [CHAT_MODEL, CHAT_ALIAS, "openai/*", "@core-openai", f"{CHAT_MODEL}@core-openai"]
)
def test_each_grant_form_that_names_the_model_allows_it(catalog: CoreCatalog, grant: str) -> None:
    policy = catalog.build.policy("granting", models=(grant,), keys=(catalog.k1,))
    assert resolve(policy, CHAT_MODEL, catalog.snapshot()).keys == (catalog.k1,)


def test_no_pool_key_on_the_host_is_503_no_binding(catalog: CoreCatalog) -> None:
    other = catalog.build.host("elsewhere", "http://127.0.0.1:9")
    catalog.build.policy("keyless", keys=(catalog.build.host_key("far", other),))
    error = refusal(catalog, CHAT_MODEL, "keyless")
    assert (error.status, error.code) == (503, "no_binding")


def test_a_model_without_bindings_is_503_no_binding(catalog: CoreCatalog) -> None:
    catalog.build.model("unbound")
    assert refusal(catalog, "unbound").code == "no_binding"


@pytest.mark.parametrize("broken", [{"enabled": False}, {"value": None}])
def test_pool_keys_there_but_none_usable_is_503_no_keys(
    catalog: CoreCatalog, broken: dict[str, object]
) -> None:
    catalog.build.change(catalog.k1, **broken)
    catalog.build.change(catalog.k2, **broken)
    error = refusal(catalog, CHAT_MODEL)
    assert (error.status, error.code) == (503, "no_keys")


def test_a_plan_keeps_only_usable_keys_in_pool_order(catalog: CoreCatalog) -> None:
    catalog.build.change(catalog.k1, enabled=False)
    third = catalog.build.host_key("core-k3", catalog.host)
    policy = catalog.build.policy("ordered", keys=(third, catalog.k1, catalog.k2))
    assert [k.name for k in resolve(policy, CHAT_MODEL, catalog.snapshot()).keys] == ["core-k3", "core-k2"]


def test_the_first_usable_binding_in_creation_order_wins(catalog: CoreCatalog) -> None:
    second_host = catalog.build.host("second", "http://127.0.0.1:9")
    second_key = catalog.build.host_key("second-k", second_host)
    later = catalog.build.bind(catalog.model, second_host, upstream_name="later")
    both = catalog.build.policy("both", keys=(second_key, catalog.k1))
    assert resolve(both, CHAT_MODEL, catalog.snapshot()).binding.id == catalog.binding.id
    binding = catalog.build.change(catalog.binding, enabled=False)
    assert resolve(both, CHAT_MODEL, catalog.snapshot()).binding.id == later.id
    catalog.build.change(binding, enabled=True)
    catalog.build.change(catalog.host, enabled=False)
    assert resolve(both, CHAT_MODEL, catalog.snapshot()).host.name == "second"


def test_a_pin_routes_to_that_host_only(catalog: CoreCatalog) -> None:
    second_host = catalog.build.host("second", "http://127.0.0.1:9")
    second_key = catalog.build.host_key("second-k", second_host)
    catalog.build.bind(catalog.model, second_host)
    both = catalog.build.policy("both", keys=(catalog.k1, second_key))
    assert resolve(both, f"{CHAT_MODEL}@second", catalog.snapshot()).host.name == "second"
    assert resolve(both, f"{CHAT_MODEL}@core-openai", catalog.snapshot()).host.name == "core-openai"


def test_the_listing_shows_granted_models_with_a_usable_binding_sorted(catalog: CoreCatalog) -> None:
    catalog.build.bind(catalog.build.model("a-listed"), catalog.host)
    catalog.build.bind(catalog.build.model("hidden-disabled", enabled=False), catalog.host)
    catalog.build.model("hidden-unbound")
    off = catalog.build.host("off", "http://127.0.0.1:9", enabled=False)
    catalog.build.bind(catalog.build.model("hidden-host-off"), off)
    snapshot = catalog.snapshot()
    assert [m.name for m in granted_models(catalog.policy, snapshot)] == ["a-listed", CHAT_MODEL]
    narrow = catalog.build.policy("narrow", models=(CHAT_ALIAS,))
    assert [m.name for m in granted_models(narrow, catalog.snapshot())] == [CHAT_MODEL]


def test_a_routed_plan_is_remembered_per_snapshot_and_policy(catalog: CoreCatalog) -> None:
    """``Snapshot.plans``: the second request for a model under a policy gets the first one's plan;
    another policy object (even with the same id) and a new snapshot are routed afresh, and a refusal
    is never remembered."""
    snapshot = catalog.snapshot()
    plan = resolve(catalog.policy, CHAT_MODEL, snapshot)
    assert resolve(catalog.policy, CHAT_MODEL, snapshot) is plan
    assert snapshot.plans[(catalog.policy.id, CHAT_MODEL)] == (catalog.policy, plan)
    narrowed = replace(catalog.policy, grants=())  # same id, other grants: never served the memo
    with pytest.raises(RelayError) as refused:
        resolve(narrowed, CHAT_MODEL, snapshot)
    assert refused.value.code == "model_not_allowed"
    assert (narrowed.id, "core-missing") not in snapshot.plans
    with pytest.raises(RelayError):
        resolve(catalog.policy, "core-missing", snapshot)
    assert (catalog.policy.id, "core-missing") not in snapshot.plans
    catalog.build.change(catalog.model, enabled=False)
    with pytest.raises(RelayError) as disabled:
        resolve(catalog.policy, CHAT_MODEL, catalog.snapshot())
    assert disabled.value.code == "model_disabled"
