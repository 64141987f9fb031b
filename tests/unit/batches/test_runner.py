"""``ItemRunner.execute`` in-process (SPEC §10.4, §10.6, §10.8): every way an item ends, over a hand-built
catalog, the real request core and the real fake upstream.

Each test checks what the worker pool writes: the final state, the item's ``error`` (the full text, not
only the §10.4 prefix) and its one usage event (source ``batch``, the batch's attribution, ``error_kind``,
``error_message`` equal to the error, ``cost_nanos`` only when an upstream 2xx answer was priced).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson

from relay.batches.item_result import ItemResult
from relay.domain.batch_policy import BatchPolicy
from relay.domain.batch_record import BatchRecord
from relay.snapshot.entities import Policy
from relay.store.batch_queue import ClaimedItem
from relay.usage.event import UsageEvent
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.planes import CHAT_UPSTREAM
from tests.unit.batches.conftest import RunnerBench, chat


def assert_discarded(result: ItemResult, error: str, kind: str, *, status: int = 0) -> UsageEvent:
    """The item is discarded with ``error``; its event records it, unpriced. Returns the event."""
    assert (result.state, result.error) == ("discarded", error)
    event = result.event
    assert (event.error_kind, event.error_message, event.status) == (kind, error, status)
    assert event.cost_nanos is None and event.source == "batch"
    return event


def assert_attributed(event: UsageEvent, batch: BatchRecord, idx: int) -> None:
    assert (event.batch_id, event.batch_idx, event.source, event.streamed) == (batch.id, idx, "batch", False)
    assert (event.policy_id, event.project_id, event.team_id) == (
        batch.policy_id,
        batch.project_id,
        batch.team_id,
    )
    assert (event.principal_kind, event.principal_id) == (batch.principal_kind, batch.principal_id)
    assert (event.credential_kind, event.credential_id, event.relay_key_hash) == (
        batch.credential_kind,
        batch.credential_id,
        batch.key_hash,
    )
    assert event.inbound_shape == batch.inbound_shape


# ---------------------------------------------------------------------------------------- completed


async def test_a_completed_item_keeps_its_response_and_one_priced_event(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    batch = await runner.batch([chat(), chat()])
    result = await runner.run(batch, 1)
    assert (result.state, result.status, result.error, result.store) == ("completed", 200, None, "files")
    assert result.response is not None
    event = result.event
    assert_attributed(event, batch, 1)
    assert (event.status, event.error_kind, event.attempts) == (200, None, 1)
    assert (event.model, event.requested_model, event.upstream_model) == (
        "plane-chat",
        "plane-chat",
        CHAT_UPSTREAM,
    )
    assert (event.host, event.adapter, event.host_key_id) == ("plane-openai", "openai", runner.catalog.k1.id)
    assert event.input_tokens > 0 and event.output_tokens > 0 and event.cost_nanos and event.cost_nanos > 0
    sent = fake.requests()[-1]
    assert (sent["path"], sent["key"], sent["body"]["model"]) == (
        "/v1/chat/completions",
        "ok-plane-k1",
        CHAT_UPSTREAM,
    )


async def test_a_token_submitted_item_is_charged_to_the_user(runner: RunnerBench) -> None:
    batch = await runner.batch([chat()], token=runner.catalog.token_claims())
    result = await runner.run(batch)
    assert result.state == "completed"
    assert_attributed(result.event, batch, 0)
    assert (result.event.credential_kind, result.event.relay_key_hash) == ("token", None)


async def test_an_item_falls_back_to_a_model_of_its_own_shape(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """SPEC §4 step 5 for a batch item: the requested model's keys all fail, the fallback answers."""
    c = runner.catalog
    broken = c.scenario(("fail-503", "fail-503"))
    fallback = c.scenario()
    policy = c.build.policy(
        "falls",
        keys=(*broken.keys, *fallback.keys),
        fallbacks={broken.model.id: (fallback.model.name,)},
    )
    runner.refresh()
    batch = await runner.batch([chat(broken.model.name)], policy=policy)
    result = await runner.run(batch)
    assert result.state == "completed"
    event = result.event
    assert (event.model, event.requested_model, event.host) == (
        fallback.model.name,
        broken.model.name,
        fallback.host.name,
    )
    assert event.attempts == 3 and event.cost_nanos and event.cost_nanos > 0
    assert [r["key"] for r in fake.requests()] == [k.value for k in (*broken.keys, fallback.keys[0])]


# ---------------------------------------------------------------------------------------- upstream


async def test_a_non_failover_status_is_upstream_returned(runner: RunnerBench) -> None:
    """§10.4 ``upstream returned <status>``: a 400 is the upstream's answer, not a failover."""
    batch = await runner.batch([chat(fake={"status": 400})])
    result = await runner.run(batch)
    event = assert_discarded(result, "upstream returned 400: Invalid request.", "upstream_status", status=400)
    assert (result.status, event.attempts, event.host) == (400, 1, "plane-openai")
    assert_attributed(event, batch, 0)


async def test_upstream_returned_carries_the_providers_message_bounded(runner: RunnerBench) -> None:
    """The status alone does not say what to fix: the provider's ``error.message`` follows it (one
    line, at most 300 characters), never the rest of the body."""
    batch = await runner.batch([chat(fake={"no_such_knob": 1}), chat(fake={"x\n\ty" * 200: 1})])
    said = await runner.run(batch, 0)
    assert_discarded(
        said, "upstream returned 400: unknown fake knob(s): no_such_knob", "upstream_status", status=400
    )
    long = await runner.run(batch, 1)
    assert long.error is not None and long.error.startswith(
        "upstream returned 400: unknown fake knob(s): x yx yx y"
    )
    assert len(long.error) == len("upstream returned 400: ") + 300 and long.error.endswith("…")
    assert "\n" not in long.error and "\t" not in long.error


async def test_every_key_failed(runner: RunnerBench, fake: FakeUpstream) -> None:
    """§10.4 ``all keys of host "<h>" failed``: every key answers a failover status."""
    s = runner.catalog.scenario(("fail-503", "fail-503"))
    runner.refresh()
    batch = await runner.batch([chat(s.model.name)], key=s.relay_key, policy=s.policy)
    error = f'all keys of host "{s.host.name}" failed; last status 503'
    event = assert_discarded(await runner.run(batch), error, "upstream_unavailable", status=503)
    assert event.attempts == 2 and event.model == s.model.name
    assert fake.stats()["requests"] == 2


async def test_a_short_429_on_every_key_fails_every_item_without_tripping(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    s = runner.catalog.scenario(("fail-429", "fail-429"))
    runner.refresh()
    batch = await runner.batch([chat(s.model.name)] * 3, key=s.relay_key, policy=s.policy)
    error = f'all keys of host "{s.host.name}" failed; last status 429'
    for idx in range(3):
        assert_discarded(await runner.run(batch, idx), error, "upstream_unavailable", status=429)
    assert fake.stats()["by_key"] == {s.keys[0].value: 3, s.keys[1].value: 3}


async def test_no_healthy_keys(runner: RunnerBench, fake: FakeUpstream) -> None:
    """§10.4 ``no healthy keys for host "<h>"``: once every breaker is open (a 401 opens it until the
    key is edited), items fail without calling the upstream."""
    s = runner.catalog.scenario(("fail-401", "fail-401"))
    runner.refresh()
    batch = await runner.batch([chat(s.model.name)] * 2, key=s.relay_key, policy=s.policy)
    opened = f'all keys of host "{s.host.name}" failed; last status 401'
    assert_discarded(await runner.run(batch, 0), opened, "upstream_unavailable", status=401)
    event = assert_discarded(
        await runner.run(batch, 1), f'no healthy keys for host "{s.host.name}"', "no_healthy_keys"
    )
    assert event.attempts == 0
    assert fake.stats()["requests"] == 2  # the first item's two attempts only


async def test_a_timeout_bounds_all_attempts_together(runner: RunnerBench, fake: FakeUpstream) -> None:
    """§10.4 ``timeout: ``, §10.6: the item's budget covers failover: two keys answer 503 after 1 s
    each, the third would work, and a 1.6 s budget ends the item during the second attempt."""
    s = runner.catalog.scenario(("fail-503", "fail-503", "ok"))
    runner.refresh()
    runner.item_timeout(1.6)
    batch = await runner.batch(
        [chat(s.model.name, fake={"latency_ms": 1000})], key=s.relay_key, policy=s.policy
    )
    error = "timeout: item ran longer than RELAY_BATCH_ITEM_TIMEOUT_S (1.6 s)"
    event = assert_discarded(await runner.run(batch), error, "timeout")
    assert event.attempts == 2  # one 503, then the second key's attempt cut short
    assert fake.stats()["by_key"].get(s.keys[2].value, 0) == 0


# ---------------------------------------------------------------------------------------- limits


async def test_a_spent_rate_limit_discards_at_once(runner: RunnerBench, fake: FakeUpstream) -> None:
    """§10.4 ``rate limit exceeded: ``: items never wait for a refill."""
    s = runner.catalog.scenario(rules=({"meter": "requests", "limit": 1, "window": "9999999s"},))
    runner.refresh()
    batch = await runner.batch([chat(s.model.name)] * 2, key=s.relay_key, policy=s.policy)
    assert (await runner.run(batch, 0)).state == "completed"
    error = f'rate limit exceeded: policy "{s.policy.name}" allows 1 requests per 9999999s'
    assert_discarded(await runner.run(batch, 1), error, "rate_limit_exceeded")
    assert fake.stats()["requests"] == 1


async def test_a_spent_budget_discards_at_once(runner: RunnerBench, fake: FakeUpstream) -> None:
    """§10.4 ``budget exceeded: ``: the first item's cost uses up a tiny spend limit."""
    s = runner.catalog.scenario(rules=({"meter": "cost_usd", "limit": 0.000001, "window": "1d"},))
    runner.refresh()
    batch = await runner.batch([chat(s.model.name)] * 2, key=s.relay_key, policy=s.policy)
    assert (await runner.run(batch, 0)).state == "completed"
    result = await runner.run(batch, 1)
    assert result.error is not None and result.error.startswith(
        f'budget exceeded: policy "{s.policy.name}" allows $'
    )
    assert_discarded(result, result.error, "budget_exceeded")
    assert fake.stats()["requests"] == 1


# ---------------------------------------------------------------------------------------- routing, shapes


async def test_routing_failures_carry_the_live_message(runner: RunnerBench, fake: FakeUpstream) -> None:
    """§10.4 ``routing: `` + the live error's message: unknown, not granted, disabled, no binding."""
    c = runner.catalog
    narrow = c.build.policy("narrow", models=("plane-chat",), keys=(c.k1,))
    off = c.build.model("switched-off", enabled=False)
    c.build.bind(off, c.host)
    c.build.bind(c.build.model("elsewhere"), c.host)
    c.build.model("unbound")
    runner.refresh()
    cases = [
        (chat("nope"), c.policy, 'routing: model "nope" not found', "model_not_found"),
        (
            chat("elsewhere"),
            narrow,
            'routing: policy "narrow" does not allow model "elsewhere"',
            "model_not_allowed",
        ),
        (chat("switched-off"), c.policy, 'routing: model "switched-off" is disabled', "model_disabled"),
        (
            chat("unbound"),
            c.policy,
            'routing: no enabled binding of model "unbound" is on a host with keys in policy "plane-main"',
            "no_binding",
        ),
        ({"messages": []}, c.policy, "routing: request body has no 'model'", "missing_model"),
        ({"model": " "}, c.policy, "routing: 'model' must be a non-empty string", "missing_model"),
    ]
    for body, policy, error, kind in cases:
        batch = await runner.batch([body], policy=policy)
        event = assert_discarded(await runner.run(batch), error, kind)
        assert event.host == "" and event.attempts == 0
    assert fake.stats()["requests"] == 0


async def test_an_item_of_another_shape_than_its_binding_is_cross_shape(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """§10.4 ``cross-shape dispatch``: items are never translated; nothing is sent."""
    item = {"model": "plane-chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    batch = await runner.batch([item], shape="anthropic")
    error = "cross-shape dispatch: item shape anthropic, binding adapter openai"
    event = assert_discarded(await runner.run(batch), error, "cross_shape")
    assert (event.model, event.host) == ("plane-chat", "")
    assert fake.stats()["requests"] == 0


async def test_a_responses_item_to_the_openai_host_is_sent_as_it_is(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """§10.4's one exception: an ``openai_responses`` item routed to an ``openai`` binding on the host
    named exactly ``openai`` goes unchanged (but for the model) to its Chat Completions path and fails
    with the upstream's status; the same item to an openai binding on another host is cross-shape."""
    c = runner.catalog
    s = c.scenario(host_name="openai")
    other = c.scenario()
    runner.refresh()
    item = {"model": s.model.name, "input": "hello there", "max_output_tokens": 16, "fake": {"status": 400}}
    batch = await runner.batch([item], shape="openai_responses", key=s.relay_key, policy=s.policy)
    assert_discarded(
        await runner.run(batch), "upstream returned 400: Invalid request.", "upstream_status", status=400
    )
    [sent] = fake.requests()
    assert (sent["path"], sent["status"], sent["body"]) == (
        "/v1/chat/completions",
        400,
        {**item, "model": s.upstream_model},
    )

    batch = await runner.batch(
        [{**item, "model": other.model.name}],
        shape="openai_responses",
        key=other.relay_key,
        policy=other.policy,
    )
    error = "cross-shape dispatch: item shape openai_responses, binding adapter openai"
    assert_discarded(await runner.run(batch), error, "cross_shape")
    assert fake.stats()["requests"] == 1


# ---------------------------------------------------------------------------------------- translate


def translating(runner: RunnerBench, policy: Policy) -> Policy:
    """``policy`` with ``batch.translate: true`` (SPEC §17), served from now on."""
    chosen = replace(policy, batch=BatchPolicy(translate=True))
    runner.catalog.build.policies[policy.id] = chosen
    runner.refresh()
    return chosen


async def kept_body(runner: RunnerBench, batch: BatchRecord, result: ItemResult) -> dict[str, Any]:
    assert result.response is not None and result.response.ref is not None
    await runner.runner.flush_responses()
    bodies = await runner.payloads.of("files").read_responses(
        batch.id, {batch_idx(result): result.response.ref}
    )
    body = bodies[batch_idx(result)]
    assert body is not None
    return dict(orjson.loads(body))


def batch_idx(result: ItemResult) -> int:
    assert result.event.batch_idx is not None
    return result.event.batch_idx


async def test_under_translate_an_item_of_another_shape_is_translated_and_answered_in_its_own(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """SPEC §17 ``translate: true``: an OpenAI chat item for an anthropic-bound model goes to
    /v1/messages as Anthropic's shape and its kept response is a chat completion naming the model it
    asked for; without the flag the same item fails ``cross-shape dispatch: `` and nothing is sent."""
    c = runner.catalog
    s = c.scenario(adapter="anthropic")
    runner.refresh()
    item = {
        "model": s.model.name,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    }
    batch = await runner.batch([item], key=s.relay_key, policy=s.policy)
    error = "cross-shape dispatch: item shape openai, binding adapter anthropic"
    assert_discarded(await runner.run(batch), error, "cross_shape")
    assert fake.stats()["requests"] == 0

    policy = translating(runner, s.policy)
    batch = await runner.batch([item], key=s.relay_key, policy=policy)
    result = await runner.run(batch)
    assert (result.state, result.status, result.error) == ("completed", 200, None)
    [sent] = fake.requests()
    assert sent["path"] == "/v1/messages"
    assert sent["body"]["system"] == "be brief" and sent["body"]["max_tokens"] == 4096
    assert [m["role"] for m in sent["body"]["messages"]] == ["user"]
    assert "hi" in orjson.dumps(sent["body"]["messages"]).decode()
    answer = await kept_body(runner, batch, result)
    assert answer["object"] == "chat.completion" and answer["model"] == s.model.name
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["usage"]["prompt_tokens"] > 0
    event = result.event
    assert (event.inbound_shape, event.adapter, event.status) == ("openai", "anthropic", 200)
    assert event.input_tokens > 0 and event.cost_nanos and event.cost_nanos > 0


async def test_under_translate_a_parameter_with_no_counterpart_fails_before_any_call(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """§7.3's "nothing is dropped silently" holds for a translated item: it fails naming the parameter."""
    c = runner.catalog
    s = c.scenario(adapter="anthropic")
    policy = translating(runner, s.policy)
    item = {"model": s.model.name, "messages": [{"role": "user", "content": "hi"}], "n": 2}
    batch = await runner.batch([item], key=s.relay_key, policy=policy)
    error = (
        "cross-shape dispatch: item shape openai, binding adapter anthropic: "
        "unsupported_parameter: n (adapter anthropic)"
    )
    assert_discarded(await runner.run(batch), error, "unsupported_parameter")
    assert fake.stats()["requests"] == 0


async def test_under_translate_an_upstream_error_is_still_upstream_returned(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    c = runner.catalog
    s = c.scenario(("fail-400",), adapter="anthropic")
    policy = translating(runner, s.policy)
    item = {"model": s.model.name, "messages": [{"role": "user", "content": "hi"}]}
    batch = await runner.batch([item], key=s.relay_key, policy=policy)
    assert_discarded(
        await runner.run(batch), "upstream returned 400: Invalid request.", "upstream_status", status=400
    )
    assert fake.requests()[-1]["path"] == "/v1/messages"


async def test_under_translate_a_responses_item_to_the_openai_host_is_translated_to_chat(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """§10.4's host-``openai`` exception gives way to ``translate: true``: the item is translated to
    chat and its result is a Responses object."""
    c = runner.catalog
    s = c.scenario(host_name="openai")
    policy = translating(runner, s.policy)
    item = {"model": s.model.name, "input": "hello there", "max_output_tokens": 16}
    batch = await runner.batch([item], shape="openai_responses", key=s.relay_key, policy=policy)
    result = await runner.run(batch)
    assert result.state == "completed", result.error
    [sent] = fake.requests()
    assert sent["path"] == "/v1/chat/completions" and "input" not in sent["body"]
    assert sent["body"]["max_completion_tokens"] == 16
    answer = await kept_body(runner, batch, result)
    assert answer["object"] == "response" and answer["model"] == s.model.name
    assert answer["status"] == "completed"


async def test_under_translate_an_item_falls_back_to_a_model_of_another_shape(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """SPEC §4 step 5 under ``translate: true``: as for a live request, a fallback bound with another
    adapter is translated; the result names the model that answered, in the item's shape. Without the
    flag the same fallback is skipped (a batch item only falls back to models of its own shape)."""
    c = runner.catalog
    broken = c.scenario(("fail-503",))
    fallback = c.scenario(adapter="anthropic")
    plain = c.build.policy(
        "falls-across",
        keys=(*broken.keys, *fallback.keys),
        fallbacks={broken.model.id: (fallback.model.name,)},
    )
    runner.refresh()
    item = chat(broken.model.name)
    batch = await runner.batch([item], policy=plain)
    result = await runner.run(batch)
    assert result.state == "discarded" and result.error is not None
    assert result.error.startswith("all keys of host")
    assert [r["path"] for r in fake.requests()] == ["/v1/chat/completions"]

    policy = translating(runner, plain)
    batch = await runner.batch([item], policy=policy)
    result = await runner.run(batch)
    assert result.state == "completed", result.error
    assert [r["path"] for r in fake.requests()][-2:] == ["/v1/chat/completions", "/v1/messages"]
    answer = await kept_body(runner, batch, result)
    assert answer["object"] == "chat.completion" and answer["model"] == fallback.model.name
    assert (result.event.model, result.event.requested_model, result.event.adapter) == (
        fallback.model.name,
        broken.model.name,
        "anthropic",
    )


# ---------------------------------------------------------------------------------------- credential, policy


async def test_the_credential_is_rechecked_when_the_item_runs(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """§10.4 ``credential no longer valid: `` + the §3 reason, for a change made after the submission."""
    c = runner.catalog
    changes: list[tuple[dict[str, Any], str]] = [
        ({"enabled": False}, "api key disabled"),
        ({"revoked_at": datetime.now(UTC)}, "api key revoked"),
        ({"expires_at": datetime(2020, 1, 1, tzinfo=UTC)}, "api key expired"),
    ]
    for fields, reason in changes:
        batch = await runner.batch([chat()])
        original = c.build.relay_keys[c.relay_key.id]
        c.build.change(c.relay_key, **fields)
        runner.refresh()
        error = f"credential no longer valid: {reason}"
        assert_attributed(assert_discarded(await runner.run(batch), error, "credential_invalid"), batch, 0)
        c.build.relay_keys[c.relay_key.id] = original
    for record in (c.account, c.project):
        batch = await runner.batch([chat()])
        c.build.change(record, enabled=False)
        runner.refresh()
        assert_discarded(
            await runner.run(batch), "credential no longer valid: api key disabled", "credential_invalid"
        )
        c.build.change(record, enabled=True)
    batch = await runner.batch([chat()])
    del c.build.relay_keys[c.relay_key.id]
    runner.refresh()
    assert_discarded(
        await runner.run(batch), "credential no longer valid: invalid api key", "credential_invalid"
    )
    assert fake.stats()["requests"] == 0


async def test_the_token_is_rechecked_when_the_item_runs(runner: RunnerBench, fake: FakeUpstream) -> None:
    c = runner.catalog
    expired = await runner.batch([chat()], token=c.token_claims(expires_in=-1))
    revoked = await runner.batch([chat()], token=c.token_claims(jti="jti-revoked"))
    c.build.revoked_jtis["jti-revoked"] = datetime.now(UTC)
    runner.refresh()
    assert_discarded(
        await runner.run(expired), "credential no longer valid: token expired", "credential_invalid"
    )
    assert_discarded(
        await runner.run(revoked), "credential no longer valid: token revoked", "credential_invalid"
    )
    for record, reason in ((c.project, "project unavailable"), (c.user, "token revoked")):
        batch = await runner.batch([chat()], token=c.token_claims())
        c.build.change(record, enabled=False)
        runner.refresh()
        assert_discarded(
            await runner.run(batch), f"credential no longer valid: {reason}", "credential_invalid"
        )
        c.build.change(record, enabled=True)
    assert fake.stats()["requests"] == 0


async def test_the_recorded_policy_must_still_exist_and_be_enabled(
    runner: RunnerBench, fake: FakeUpstream
) -> None:
    """§10.4 ``policy unavailable: ``; the event keeps the batch's recorded policy even when deleted."""
    c = runner.catalog
    doomed = c.build.policy("doomed", keys=(c.k1,))
    paused = c.build.policy("paused", keys=(c.k1,))
    deleted_batch = await runner.batch([chat()], policy=doomed)
    disabled_batch = await runner.batch([chat()], policy=paused)
    del c.build.policies[doomed.id]
    c.build.change(paused, enabled=False)
    runner.refresh()
    event = assert_discarded(
        await runner.run(deleted_batch),
        'policy unavailable: policy "doomed" was deleted',
        "policy_unavailable",
    )
    assert event.policy_id == doomed.id
    assert_discarded(
        await runner.run(disabled_batch),
        'policy unavailable: policy "paused" is disabled',
        "policy_unavailable",
    )
    assert fake.stats()["requests"] == 0


async def test_the_credential_is_checked_before_the_policy(runner: RunnerBench) -> None:
    c = runner.catalog
    paused = c.build.policy("paused", keys=(c.k1,))
    batch = await runner.batch([chat()], policy=paused)
    c.build.change(paused, enabled=False)
    c.build.change(c.relay_key, enabled=False)
    runner.refresh()
    assert_discarded(
        await runner.run(batch), "credential no longer valid: api key disabled", "credential_invalid"
    )


# ---------------------------------------------------------------------------------------- input


async def test_input_that_cannot_be_loaded(runner: RunnerBench, fake: FakeUpstream) -> None:
    """§10.4 ``load input: ``: a missing request file (named with this replica) or a body that is not a
    JSON object."""
    batch = await runner.batch([b"{not json", b"[1, 2]"])
    assert_discarded(
        await runner.run(batch, 0), "load input: the stored request is not valid JSON", "load_input"
    )
    assert_discarded(
        await runner.run(batch, 1), "load input: the stored request is not a JSON object", "load_input"
    )
    missing = replace(batch, total_items=3)
    error = (
        "load input: the request file of item 2 is not in RELAY_BATCH_PAYLOAD_DIR on replica replica-unit "
        "(is the directory shared by every replica?)"
    )
    assert_discarded(await runner.run(missing, 2), error, "load_input")
    assert fake.stats()["requests"] == 0


async def test_a_stopped_item_is_cancelled_or_expired_and_a_bug_is_internal(runner: RunnerBench) -> None:
    batch = await runner.batch([chat()])
    item = ClaimedItem(batch, 0)
    cancelled = runner.runner.cancelled(item)
    assert (cancelled.state, cancelled.error, cancelled.event.error_kind) == (
        "cancelled",
        "cancelled",
        "cancelled",
    )
    expired = runner.runner.cancelled(item, "expired: the batch ran past its window")
    assert (expired.state, expired.event.error_kind, expired.event.error_message) == (
        "cancelled",
        "expired",
        "expired: the batch ran past its window",
    )
    failed = runner.runner.failed(item, KeyError("x"))
    assert (failed.state, failed.error, failed.event.error_kind) == (
        "discarded",
        "internal error: KeyError",
        "internal",
    )
    for result in (cancelled, expired, failed):
        assert_attributed(result.event, batch, 0)
        assert result.event.cost_nanos is None
