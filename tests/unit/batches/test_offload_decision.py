"""Which submitted batches go to a provider's batch API (SPEC §22): every item routed to one binding
whose ``batch_offload`` is ``native``, at least ``min_items`` items, in the binding's own shape."""

from __future__ import annotations

from relay.batches.offload.decision import offload_target
from relay.domain.batch_offload import BatchOffload
from relay.request import routing
from tests.fixtures.snapshots import CatalogBuilder

NATIVE = BatchOffload(mode="native", min_items=3, discount=0.5)


def catalog() -> tuple[CatalogBuilder, dict[str, object]]:
    c = CatalogBuilder()
    openai, anthropic = (
        c.host("openai", "https://api.openai.com"),
        c.host("anthropic", "https://api.anthropic.com"),
    )
    keys = (c.host_key("oa-key", openai), c.host_key("an-key", anthropic))
    gpt, other, claude = c.model("gpt"), c.model("gpt-mini"), c.model("claude", provider="anthropic")
    bindings = {
        "gpt": c.change(c.bind(gpt, openai), offload=NATIVE),
        "gpt-mini": c.bind(other, openai),
        "claude": c.change(c.bind(claude, anthropic, "anthropic"), offload=NATIVE),
    }
    c.policy("all", keys=keys)
    return c, bindings


def test_a_batch_wholly_routed_to_a_native_binding_with_enough_items_is_offloaded() -> None:
    c, bindings = catalog()
    snapshot, policy = c.snapshot(), c.policies["pol_all"]
    target = offload_target(policy, snapshot, "openai", ["gpt"] * 3, 3)
    assert target is not None and target.endpoint == "/v1/chat/completions"
    assert target.plan.binding.id == bindings["gpt"].id and target.plan.host.name == "openai"
    claude = offload_target(policy, snapshot, "anthropic", ["claude"] * 5, 5)
    assert claude is not None and claude.endpoint == "/v1/messages"
    embeddings = offload_target(policy, snapshot, "openai_embeddings", ["gpt"] * 3, 3)
    assert embeddings is not None and embeddings.endpoint == "/v1/embeddings"


def test_anything_else_runs_on_relays_workers() -> None:
    c, _ = catalog()
    snapshot, policy = c.snapshot(), c.policies["pol_all"]
    assert offload_target(policy, snapshot, "openai", ["gpt"] * 2, 2) is None  # below min_items
    assert offload_target(policy, snapshot, "openai", ["gpt-mini"] * 5, 5) is None  # mode never
    assert offload_target(policy, snapshot, "openai", ["gpt", "gpt", "gpt-mini"], 3) is None  # two bindings
    assert offload_target(policy, snapshot, "openai", ["gpt", "gpt", "nope"], 3) is None  # unknown model
    assert offload_target(policy, snapshot, "openai", ["gpt", "gpt", 7], 3) is None  # not a model name
    assert offload_target(policy, snapshot, "openai", ["claude"] * 3, 3) is None  # needs translation
    assert offload_target(policy, snapshot, "openai_responses", ["gpt"] * 3, 3) is None  # another adapter
    assert offload_target(policy, snapshot, "openai", [], 0) is None
    narrow = c.policy("narrow", models=("claude",), keys=tuple(c.host_keys.values()))
    assert offload_target(narrow, c.snapshot(), "openai", ["gpt"] * 3, 3) is None  # not granted


def test_each_model_is_routed_once_whatever_the_batch_size(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    c, _ = catalog()
    snapshot, policy = c.snapshot(), c.policies["pol_all"]
    calls: list[str] = []
    real = routing.resolve

    def counting(policy, requested, snapshot):  # type: ignore[no-untyped-def]
        calls.append(requested)
        return real(policy, requested, snapshot)

    monkeypatch.setattr("relay.batches.offload.decision.resolve", counting)
    assert offload_target(policy, snapshot, "openai", ["gpt"] * 10_000, 10_000) is not None
    assert calls == ["gpt"]
