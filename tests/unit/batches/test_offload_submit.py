"""The submit-time half of provider batch offload (SPEC §22): a create's items noted as they are
written, the batch's offload columns (binding, key, ``submitting``), nothing when no binding is
``native`` or the batch is not §14/§15, the estimate checked against the submitter's budgets, and an
offloaded item's price at the binding's discount."""

from __future__ import annotations

import orjson
import pytest

from relay.batches.offload.mapping import discounted
from relay.batches.offload.submit import OffloadAtSubmit
from relay.domain.batch_offload import BatchOffload
from relay.errors import BudgetExceeded
from relay.request.auth import Principal, build_principal
from relay.request.batch_budget import BatchBudget, Caller
from relay.snapshot import Policy
from relay.state import MemoryState
from tests.fixtures.snapshots import CatalogBuilder

NATIVE = BatchOffload(mode="native", min_items=2, discount=0.5)


def principal(policy: Policy) -> Principal:
    return build_principal(
        policy,
        key_hash="ab" * 32,
        credential_id="rk_1",
        principal_kind="serviceaccount",
        principal_id="sa_1",
        project_id="prj_1",
        team_id="tm_1",
    )


def catalog(*, native: bool = True, rules: tuple[dict[str, object], ...] = ()) -> CatalogBuilder:
    c = CatalogBuilder()
    host = c.host("openai", "https://api.openai.com")
    key = c.host_key("oa-key", host)
    binding = c.bind(c.model("gpt"), host)
    if native:
        c.change(binding, offload=NATIVE)
    c.policy("all", keys=(key,), rules=rules)
    return c


def bodies(n: int, **extra: object) -> list[bytes]:
    return [
        orjson.dumps({"model": "gpt", "messages": [{"role": "user", "content": "hi"}], **extra})
        for _ in range(n)
    ]


async def test_a_qualifying_batch_gets_its_offload_columns_as_its_bodies_pass() -> None:
    c = catalog()
    offload = OffloadAtSubmit(c.snapshot, None, default_max_tokens=100)
    watch = offload.watch(principal(c.policies["pol_all"]), "openai")
    assert watch is not None
    written = bodies(3)
    assert list(watch.through(written)) == written  # unchanged on their way to the payload store
    columns = await watch.columns("openai")
    assert columns == {
        "offload_binding_id": next(iter(c.bindings)),
        "offload_key_id": "hk_oa-key",
        "offload_state": "submitting",
        "offload_polled_at": None,
    }
    assert watch.output_tokens == 300 and watch.items == 3


async def test_nothing_is_watched_or_marked_when_offload_cannot_apply() -> None:
    c = catalog()
    offload = OffloadAtSubmit(c.snapshot, None, default_max_tokens=100)
    assert offload.watch(principal(c.policies["pol_all"]), "relay") is None  # a §10 batch
    off = catalog(native=False)
    assert (
        OffloadAtSubmit(off.snapshot, None, default_max_tokens=100).watch(
            principal(off.policies["pol_all"]), "openai"
        )
        is None
    )  # no native binding: nothing paid per item
    watch = offload.watch(principal(c.policies["pol_all"]), "anthropic")
    assert watch is not None
    list(watch.through(bodies(1)))
    assert await watch.columns("openai") == {}  # below min_items


async def test_the_estimate_is_checked_against_budgets_and_items_are_charged_after() -> None:
    rules = ({"meter": "cost_usd", "limit": "0.001", "window": "1d"},)
    c = catalog(rules=rules)
    state = MemoryState()
    budget = BatchBudget(state)
    who = principal(c.policies["pol_all"])
    offload = OffloadAtSubmit(c.snapshot, budget, default_max_tokens=100)
    small = offload.watch(who, "openai")
    assert small is not None
    list(small.through(bodies(2, max_tokens=10)))
    assert (await small.columns("openai"))["offload_state"] == "submitting"

    large = offload.watch(who, "openai")
    assert large is not None
    list(large.through(bodies(2, max_tokens=1_000_000)))
    with pytest.raises(BudgetExceeded, match="budget exceeded"):
        await large.columns("openai")

    policy = c.policies["pol_all"]
    await budget.charge(policy, Caller("rk_1", "prj_1", "tm_1"), 1_000_000)  # the window's whole limit
    with pytest.raises(BudgetExceeded):
        await small.columns("openai")


def test_an_offloaded_item_is_priced_at_the_discount() -> None:
    assert discounted(1001, 0.5) == 501  # half up
    assert discounted(1000, 0.0) == 0
    assert discounted(None, 0.5) is None
