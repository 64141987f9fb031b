"""Model fallbacks through ``relay serve`` (SPEC §4 step 5, §8, §12): every trigger
(``upstream_unavailable`` — including every key answering 429 —, ``no_healthy_keys``, ``no_keys``,
``no_binding``) moves the request to the next model of the policy's list before any byte reaches the
caller; an upstream 400 never does; grants, disabled and other-shape models are skipped; only the
requested model's list is followed and each model is tried once; exhausted → the primary's error;
``X-Relay-Fallback-From``; usage events name ``model`` and ``requested_model``; the metric counts
(from, to, reason); bad maps are refused whole; batch items fall back within their shape."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import PRICING, Gateway, metric_value, uniq
from tests.integration.batch_api.helpers import results, submit, wait_finished
from tests.integration.live.helpers import assert_openai_error


@dataclass
class Models:
    policy: str
    key: str
    names: dict[str, str]  # role -> model name
    key_values: dict[str, str]  # role -> its host key's value


def build(
    gw: Gateway,
    roles: dict[str, str],
    fallbacks: dict[str, list[str]],
    *,
    adapters: dict[str, str] | None = None,
    grants: list[str] | None = None,
    disabled: tuple[str, ...] = (),
    unbound_pool: tuple[str, ...] = (),
    disabled_keys: tuple[str, ...] = (),
    extra_keys: dict[str, int] | None = None,
) -> Models:
    """One host, key and model per role (``roles``: role → the key value's prefix, e.g. ``ok`` or
    ``fail-500``), a policy over all keys with ``fallbacks`` written with roles, and a relay key.
    ``extra_keys``: role → how many more keys (same prefix) its host has in the pool."""
    adapters = adapters or {}
    names = {role: uniq(role) for role in roles}
    values = {role: uniq(prefix) for role, prefix in roles.items()}
    docs: list[dict[str, Any]] = []
    pool = []
    for role in roles:
        host, key = uniq("h"), uniq("hk")
        adapter = adapters.get(role, "openai")
        docs += [
            {"kind": "Host", "name": host, "spec": {"base_url": gw.fake.base_url}},
            {
                "kind": "HostKey",
                "name": key,
                "spec": {"host": host, "value": values[role], "enabled": role not in disabled_keys},
            },
            {
                "kind": "Model",
                "name": names[role],
                "spec": {
                    "provider": "anthropic" if adapter == "anthropic" else "openai",
                    "aliases": [names[role] + "-alias"],
                    "enabled": role not in disabled,
                },
            },
            {
                "kind": "Binding",
                "name": uniq("b"),
                "spec": {"model": names[role], "host": host, "adapter": adapter, "pricing": PRICING},
            },
        ]
        if role not in unbound_pool:
            pool.append(key)
        for _ in range((extra_keys or {}).get(role, 0)):
            extra = uniq("hk")
            docs.append(
                {"kind": "HostKey", "name": extra, "spec": {"host": host, "value": uniq(roles[role])}}
            )
            pool.append(extra)
    policy = uniq("p")
    docs.append(
        {
            "kind": "Policy",
            "name": policy,
            "spec": {
                "models": grants if grants is not None else ["*"],
                "host_keys": pool,
                "fallbacks": {names[k]: [names.get(x, x) for x in v] for k, v in fallbacks.items()},
            },
        }
    )
    gw.control_write("POST", "/api/apply", {"documents": docs}, 200)
    _, key = gw.mint_key(policy)
    return Models(policy, key, names, values)


def event_of(gw: Gateway, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        events = gw.relay.api("GET", "/api/usage/events?limit=200").json()["events"]
        found = [e for e in events if e["request_id"] == request_id]
        if found or time.monotonic() > deadline:
            assert found, f"no usage event for {request_id}"
            return dict(found[0])
        time.sleep(0.1)


def assert_fell_back(
    gw: Gateway, m: Models, response: Any, reason: str, before: float, to: str = "backup"
) -> None:
    assert response.status_code == 200, response.text
    assert response.headers["x-relay-fallback-from"] == m.names["primary"]
    event = event_of(gw, response.headers["x-relay-request-id"])
    assert (event["model"], event["requested_model"]) == (m.names[to], m.names["primary"])
    labels = {"from_model": m.names["primary"], "to_model": m.names[to], "reason": reason}
    assert metric_value(gw.metrics(), "relay_fallbacks_total", **labels) == before + 1


def test_upstream_unavailable_falls_back_and_is_recorded(gateway: Gateway, fake: FakeUpstream) -> None:
    m = build(gateway, {"primary": "fail-500", "backup": "ok"}, {"primary": ["backup"]})
    response = gateway.chat(m.names["primary"], key=m.key)
    assert_fell_back(gateway, m, response, "upstream_unavailable", 0)
    assert fake.stats()["by_key"] == {m.key_values["primary"]: 1, m.key_values["backup"]: 1}


def test_a_429_after_failover_falls_back(gateway: Gateway, fake: FakeUpstream) -> None:
    m = build(gateway, {"primary": "fail-429", "backup": "ok"}, {"primary": ["backup"]})
    assert_fell_back(gateway, m, gateway.chat(m.names["primary"], key=m.key), "upstream_unavailable", 0)


def test_no_healthy_keys_falls_back(gateway: Gateway) -> None:
    m = build(gateway, {"primary": "fail-401", "backup": "ok"}, {"primary": ["backup"]})
    first = gateway.chat(m.names["primary"], key=m.key)  # 401 opens the primary's only key
    assert_fell_back(gateway, m, first, "upstream_unavailable", 0)
    second = gateway.chat(m.names["primary"], key=m.key)
    assert_fell_back(gateway, m, second, "no_healthy_keys", 0)


def test_no_keys_falls_back(gateway: Gateway, fake: FakeUpstream) -> None:
    m = build(gateway, {"primary": "ok", "backup": "ok"}, {"primary": ["backup"]}, disabled_keys=("primary",))
    assert_fell_back(gateway, m, gateway.chat(m.names["primary"], key=m.key), "no_keys", 0)
    assert m.key_values["primary"] not in fake.stats()["by_key"]


def test_no_binding_falls_back_and_a_stream_says_so_too(gateway: Gateway) -> None:
    m = build(gateway, {"primary": "ok", "backup": "ok"}, {"primary": ["backup"]}, unbound_pool=("primary",))
    assert_fell_back(gateway, m, gateway.chat(m.names["primary"], key=m.key), "no_binding", 0)
    streamed = gateway.stream(
        "/v1/chat/completions",
        {"model": m.names["primary"], "messages": [{"role": "user", "content": "hi"}], "stream": True},
        key=m.key,
    )
    assert streamed.status == 200 and streamed.headers["x-relay-fallback-from"] == m.names["primary"]
    assert streamed.events and streamed.events[-1].data == "[DONE]"


def test_an_upstream_400_never_falls_back(gateway: Gateway, fake: FakeUpstream) -> None:
    m = build(gateway, {"primary": "fail-400", "backup": "ok"}, {"primary": ["backup"]})
    response = gateway.chat(m.names["primary"], key=m.key)
    assert response.status_code == 400 and "x-relay-fallback-from" not in response.headers
    assert m.key_values["backup"] not in fake.stats()["by_key"]
    # nor does a Relay refusal that is not a trigger (here: the requested model is not granted)
    m2 = build(gateway, {"primary": "ok", "backup": "ok"}, {"primary": ["backup"]}, grants=["nothing"])
    assert_openai_error(gateway.chat(m2.names["primary"], key=m2.key), 403, "model_not_allowed")


def test_ungranted_disabled_and_other_shape_fallbacks_are_skipped(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    roles = {"primary": "fail-500", "ungranted": "ok", "off": "ok", "claude": "ok", "backup": "ok"}
    names_granted = ["primary", "off", "claude", "backup"]
    m = build(
        gateway,
        roles,
        {"primary": ["ungranted", "off", "claude", "backup"]},
        adapters={"claude": "anthropic"},
        disabled=("off",),
        grants=[],  # filled below: grants name models, which build() names randomly
    )
    gateway.patch("policies", m.policy, {"models": [m.names[r] for r in names_granted]})
    answering = "claude"  # translated (SPEC §7.3): a cross-shape fallback is served like a primary
    response = gateway.chat(m.names["primary"], key=m.key)
    assert_fell_back(gateway, m, response, "upstream_unavailable", 0, to=answering)
    called = fake.stats()["by_key"]
    assert set(called) == {m.key_values["primary"], m.key_values[answering]}, called


def test_only_the_requested_list_is_followed_each_model_once_then_the_primary_error(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    m = build(
        gateway,
        {"primary": "fail-500", "backup": "fail-503", "third": "ok"},
        # backup's own list (→ third) is not followed; backup → primary would be a loop: tried once
        {"primary": ["backup"], "backup": ["third", "primary"]},
    )
    response = gateway.chat(m.names["primary"], key=m.key)
    error = assert_openai_error(response, 502, "upstream_unavailable")
    assert error["message"].endswith("last status 500"), error  # the primary's error, not backup's 503
    assert "x-relay-fallback-from" not in response.headers
    assert fake.stats()["by_key"] == {m.key_values["primary"]: 1, m.key_values["backup"]: 1}
    event = event_of(gateway, response.headers["x-relay-request-id"])
    assert event["model"] == event["requested_model"] == m.names["primary"]


def test_bad_fallback_maps_are_refused_whole(gateway: Gateway) -> None:
    a = gateway.new_model("live-openai")
    b = gateway.new_model("live-openai")
    cases = [
        ({a: ["nope-" + uniq("x")]}, f"fallbacks.{a}: model "),
        ({"nope-" + uniq("x"): [a]}, "fallbacks.nope-"),
        ({a: [a]}, "a model cannot fall back to itself"),
        ({a: [b, b]}, "only once"),
        ({a: [b + "@live-openai"]}, "must name a model"),
    ]
    for fallbacks, message in cases:
        name = uniq("p")
        response = gateway.relay.api(
            "POST", "/api/policies", {"name": name, "models": ["*"], "fallbacks": fallbacks}
        )
        assert response.status_code == 400, response.text
        assert message in response.json()["error"]["message"], response.text
        assert gateway.relay.api("GET", f"/api/policies/{name}").status_code == 404
    # self under an alias, through PATCH: refused, the policy keeps what it had
    alias = uniq("alias")
    gateway.patch("models", a, {"aliases": [alias]})
    policy = gateway.new_policy()
    response = gateway.relay.api("PATCH", f"/api/policies/{policy['name']}", {"fallbacks": {a: [b, alias]}})
    assert response.status_code == 400 and "itself" in response.json()["error"]["message"], response.text
    assert gateway.get("policies", policy["name"])["fallbacks"] == {}
    # a mutual pair is allowed (each request follows only its own model's list)
    assert gateway.patch("policies", policy["name"], {"fallbacks": {a: [b], b: [a]}})["fallbacks"] == {
        a: [b],
        b: [a],
    }


def test_batch_items_fall_back_within_their_shape(gateway: Gateway) -> None:
    m = build(
        gateway,
        {"primary": "fail-500", "claude": "ok", "backup": "ok", "lonely": "fail-500"},
        {"primary": ["claude", "backup"], "lonely": ["claude"]},
        adapters={"claude": "anthropic"},
    )
    items = [
        {"model": m.names["primary"], "messages": [{"role": "user", "content": "item 0"}]},
        {"model": m.names["lonely"], "messages": [{"role": "user", "content": "item 1"}]},
    ]
    batch = submit(gateway, "openai", items, key=m.key)
    wait_finished(gateway, batch, m.key, timeout=60)
    rows = {r["idx"]: r for r in results(gateway, batch, m.key)}
    assert rows[0]["state"] == "completed", rows
    assert rows[1]["state"] == "discarded" and rows[1]["error"].startswith("all keys of host "), rows
    events = gateway.relay.api("GET", f"/api/usage/events?batch_id={batch}").json()["events"]
    by_idx = {e["batch_idx"]: e for e in events}
    assert (by_idx[0]["model"], by_idx[0]["requested_model"]) == (m.names["backup"], m.names["primary"])
    assert by_idx[1]["model"] == by_idx[1]["requested_model"] == m.names["lonely"]


def test_cross_shape_fallback_with_the_official_sdks(gateway: Gateway, fake: FakeUpstream) -> None:
    """SPEC §4 step 5 with §7.3: an OpenAI-shaped request whose primary (an ``openai`` binding) is
    down falls back to an ``anthropic``-bound model; the answer is translated into the OpenAI shape,
    whole and streamed, names the model that answered and carries ``X-Relay-Fallback-From``; and the
    other way round for the Anthropic SDK."""
    import anthropic
    import openai

    m = build(
        gateway,
        {"primary": "fail-503", "claude": "ok"},
        {"primary": ["claude"]},
        adapters={"claude": "anthropic"},
    )
    client = openai.OpenAI(base_url=f"{gateway.url}/openai/v1", api_key=m.key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=m.names["primary"], messages=[{"role": "user", "content": "hello there"}]
    )
    assert raw.headers["x-relay-fallback-from"] == m.names["primary"]
    answer = raw.parse()
    assert answer.choices[0].message.content == "Echo: hello there"
    assert answer.choices[0].finish_reason == "stop" and answer.model == m.names["claude"]
    sent = fake.requests(limit=1)[-1]
    assert sent["path"] == "/v1/messages" and sent["body"]["max_tokens"] == 4096  # translated
    event = event_of(gateway, raw.headers["x-relay-request-id"])
    assert (event["model"], event["requested_model"]) == (m.names["claude"], m.names["primary"])
    assert (event["inbound_shape"], event["adapter"]) == ("openai", "anthropic")

    stream = client.chat.completions.create(
        model=m.names["primary"],
        messages=[{"role": "user", "content": "hello there"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello there"
    assert {c.model for c in chunks} == {m.names["claude"]}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3

    # The other direction: an Anthropic-shaped request whose primary is down, answered by an openai model.
    back = build(
        gateway,
        {"primary": "fail-503", "gpt": "ok"},
        {"primary": ["gpt"]},
        adapters={"primary": "anthropic", "gpt": "openai"},
    )
    claude = anthropic.Anthropic(base_url=f"{gateway.url}/anthropic", api_key=back.key, max_retries=0)
    raw_message = claude.messages.with_raw_response.create(
        model=back.names["primary"], max_tokens=50, messages=[{"role": "user", "content": "hello there"}]
    )
    assert raw_message.headers["x-relay-fallback-from"] == back.names["primary"]
    message = raw_message.parse()
    assert message.content[0].text == "Echo: hello there" and message.model == back.names["gpt"]
    assert message.stop_reason == "end_turn"
    assert fake.requests(limit=1)[-1]["path"] == "/v1/chat/completions"


def test_a_primary_that_used_all_its_failover_attempts_still_falls_back(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    """Failover is capped per plan (SPEC §6: up to min(3, pool size) keys of the chosen host), not per
    request: a primary whose three keys all fail still hands the request to its fallback, whose key is
    then tried."""
    m = build(
        gateway,
        {"primary": "fail-500", "backup": "ok"},
        {"primary": ["backup"]},
        extra_keys={"primary": 2},
    )
    response = gateway.chat(m.names["primary"], key=m.key)
    assert_fell_back(gateway, m, response, "upstream_unavailable", 0)
    assert fake.stats()["by_key"].get(m.key_values["backup"]) == 1
    event = event_of(gateway, response.headers["x-relay-request-id"])
    assert event["attempts"] == 4  # three keys of the primary, then the fallback's one
