"""SPEC §4 routing of a live request over HTTP: model and alias, grants, bindings, pool keys,
``model@host``, cross-shape refusals, and routing that follows catalog edits made under traffic.

The fake upstream records the upstream key and body of every request, so where a request went and
which keys were tried in which order is visible. Key values follow the fake's naming convention
(``fail-500-…`` always answers 500, …; see docs/fake-upstream.md). Breakers, counters and limits are
per host key or policy, so each test builds its own host, keys, model and policy (random names) and
nothing leaks between the tests sharing the package's process (one ``relay serve`` per backend:
SQLite with hot state in process memory; Postgres with hot state in Redis).
"""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_ALIAS,
    CHAT_MODEL,
    CHAT_UPSTREAM,
    EMBED_MODEL,
    HOST_ANTHROPIC,
    HOST_OPENAI,
    MESSAGES_MODEL,
    RESPONSES_MODEL,
    Gateway,
)
from tests.integration.live.helpers import (
    MAIN_KEYS,
    assert_anthropic_error,
    assert_openai_error,
    keys_called,
    last_upstream,
    messages,
)

# --- §4.1 the model --------------------------------------------------------------------------------


def test_disabled_model_is_403(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario()
    assert gateway.chat(s.model, key=s.key).status_code == 200
    gateway.patch("models", s.model, {"enabled": False})
    error = assert_openai_error(gateway.chat(s.model, key=s.key), 403, "model_disabled", "permission_error")
    assert s.model in error["message"]
    gateway.patch("models", s.model, {"enabled": True})
    assert gateway.chat(s.model, key=s.key).status_code == 200
    assert fake.stats()["requests"] == 2


def test_alias_resolves_to_the_model_and_its_upstream_name(gateway: Gateway, fake: FakeUpstream) -> None:
    for requested in (CHAT_ALIAS, f"{CHAT_ALIAS}@{HOST_OPENAI}", f"  {CHAT_MODEL}  "):
        response = gateway.chat(requested)
        assert response.status_code == 200, (requested, response.text)
        assert last_upstream(fake)["body"]["model"] == CHAT_UPSTREAM


# --- §4.2 the grant -------------------------------------------------------------------------------


def test_model_not_granted_is_403(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(models=[EMBED_MODEL])
    error = assert_openai_error(
        gateway.chat(s.model, key=s.key), 403, "model_not_allowed", "permission_error"
    )
    assert error["message"] == f'policy "{s.policy}" does not allow model "{s.model}"'
    # an unknown model is still "not found", whatever the grants
    assert_openai_error(gateway.chat("no-such-model", key=s.key), 404, "model_not_found")
    # an empty grant list grants nothing
    gateway.patch("policies", s.policy, {"models": []})
    assert_openai_error(gateway.chat(s.model, key=s.key), 403, "model_not_allowed")
    assert fake.stats()["requests"] == 0


@pytest.mark.parametrize(
    ("grants", "allowed", "refused"),
    [
        ([CHAT_ALIAS], CHAT_MODEL, EMBED_MODEL),  # a grant may name the model by alias
        (["anthropic/*"], MESSAGES_MODEL, CHAT_MODEL),  # every model of a provider
        ([f"{CHAT_MODEL}@{HOST_OPENAI}"], CHAT_MODEL, EMBED_MODEL),  # one binding
    ],
)
def test_grant_forms(
    gateway: Gateway, fake: FakeUpstream, grants: list[str], allowed: str, refused: str
) -> None:
    policy = gateway.new_policy(models=grants, host_keys=list(MAIN_KEYS.values()))
    _, key = gateway.mint_key(policy["name"])

    def call(model: str) -> httpx.Response:
        return messages(gateway, model, key) if model == MESSAGES_MODEL else gateway.chat(model, key=key)

    assert call(allowed).status_code == 200
    assert_openai_error(gateway.chat(refused, key=key), 403, "model_not_allowed")


def test_host_grant_allows_the_models_on_that_host(gateway: Gateway, fake: FakeUpstream) -> None:
    policy = gateway.new_policy(models=[f"@{HOST_ANTHROPIC}"], host_keys=list(MAIN_KEYS.values()))
    _, key = gateway.mint_key(policy["name"])
    assert messages(gateway, MESSAGES_MODEL, key).status_code == 200
    listed = gateway.client.get("/v1/models", headers=gateway.auth(key)).json()["data"]
    assert [m["id"] for m in listed] == [MESSAGES_MODEL]


@pytest.mark.parametrize("grant", [f"@{HOST_ANTHROPIC}", f"{CHAT_MODEL}@{HOST_ANTHROPIC}"])
def test_host_scoped_grant_does_not_allow_the_model_elsewhere(gateway: Gateway, grant: str) -> None:
    # CHAT_MODEL has one binding, on HOST_OPENAI; the policy's pool has keys on both hosts.
    policy = gateway.new_policy(models=[grant], host_keys=list(MAIN_KEYS.values()))
    _, key = gateway.mint_key(policy["name"])
    listed = gateway.client.get("/v1/models", headers=gateway.auth(key)).json()["data"]
    assert CHAT_MODEL not in [m["id"] for m in listed]
    assert_openai_error(gateway.chat(CHAT_MODEL, key=key), 403, "model_not_allowed")


# --- §4.3 the binding and the pool ------------------------------------------------------------------


def test_no_binding_on_a_host_with_pool_keys_is_503(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario()  # grants *, but its pool only has keys on its own host
    error = assert_openai_error(gateway.chat(CHAT_MODEL, key=s.key), 503, "no_binding", "api_error")
    assert CHAT_MODEL in error["message"]
    # the scenario's own model: its only binding disabled, then its host disabled
    gateway.patch("bindings", s.binding, {"enabled": False})
    assert_openai_error(gateway.chat(s.model, key=s.key), 503, "no_binding")
    gateway.patch("bindings", s.binding, {"enabled": True})
    assert gateway.chat(s.model, key=s.key).status_code == 200
    gateway.patch("hosts", s.host, {"enabled": False})
    assert_openai_error(gateway.chat(s.model, key=s.key), 503, "no_binding")
    assert_anthropic_error(messages(gateway, MESSAGES_MODEL, s.key), 503, "overloaded_error")
    assert fake.stats()["requests"] == 1


def test_pool_keys_all_disabled_is_503_no_keys(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["ok", "ok"])
    gateway.patch("host-keys", s.host_keys[0]["name"], {"enabled": False})
    assert gateway.chat(s.model, key=s.key).status_code == 200
    assert last_upstream(fake)["key"] == s.value(1)
    gateway.patch("host-keys", s.host_keys[1]["name"], {"enabled": False})
    error = assert_openai_error(gateway.chat(s.model, key=s.key), 503, "no_keys", "api_error")
    assert s.host in error["message"]
    assert fake.stats()["requests"] == 1


def test_first_binding_wins_and_model_at_host_pins(gateway: Gateway, fake: FakeUpstream) -> None:
    host_a, host_b = gateway.new_host("pin-a"), gateway.new_host("pin-b")
    key_a = gateway.new_host_key(host_a["name"], "key-a")
    key_b = gateway.new_host_key(host_b["name"], "key-b")
    model = gateway.new_model(host_a["name"], upstream_name="up-on-a")  # the first binding
    gateway.bind(model, host_b["name"], upstream_name="up-on-b")
    # Pool order puts B's key first: the binding order, not the pool order, picks the host.
    policy = gateway.new_policy(host_keys=[key_b["name"], key_a["name"]])
    _, key = gateway.mint_key(policy["name"])

    def routed(requested: str) -> tuple[str, str]:
        response = gateway.chat(requested, key=key)
        assert response.status_code == 200, response.text
        received = last_upstream(fake)
        return received["key"], received["body"]["model"]

    assert routed(model) == (key_a["value"], "up-on-a")
    assert routed(f"{model}@{host_b['name']}") == (key_b["value"], "up-on-b")
    assert routed(f"{model}@{host_a['name']}") == (key_a["value"], "up-on-a")
    # A policy without keys on A: the first binding whose host has pool keys is B's.
    only_b = gateway.new_policy(host_keys=[key_b["name"]])
    _, key_only_b = gateway.mint_key(only_b["name"])
    assert gateway.chat(model, key=key_only_b).status_code == 200
    assert last_upstream(fake)["key"] == key_b["value"]
    # Pinned to A with no key of A in the pool: no binding to use.
    assert_openai_error(gateway.chat(f"{model}@{host_a['name']}", key=key_only_b), 503, "no_binding")


def test_model_at_host_grant_allows_only_that_binding(gateway: Gateway, fake: FakeUpstream) -> None:
    host_a, host_b = gateway.new_host("ga"), gateway.new_host("gb")
    key_a = gateway.new_host_key(host_a["name"], "key-a")
    key_b = gateway.new_host_key(host_b["name"], "key-b")
    model = gateway.new_model(host_a["name"])
    gateway.bind(model, host_b["name"])
    policy = gateway.new_policy(
        models=[f"{model}@{host_b['name']}"], host_keys=[key_a["name"], key_b["name"]]
    )
    _, key = gateway.mint_key(policy["name"])
    # Unpinned, the first binding (A) is not granted: the request goes to B.
    assert gateway.chat(model, key=key).status_code == 200
    assert last_upstream(fake)["key"] == key_b["value"]
    assert gateway.chat(f"{model}@{host_b['name']}", key=key).status_code == 200
    assert last_upstream(fake)["key"] == key_b["value"]
    assert_openai_error(gateway.chat(f"{model}@{host_a['name']}", key=key), 403, "model_not_allowed")
    assert_openai_error(gateway.chat(CHAT_MODEL, key=key), 403, "model_not_allowed")
    assert keys_called(fake) == [key_b["value"], key_b["value"]]


@pytest.mark.parametrize(
    ("path", "model", "anthropic_shaped", "code"),
    [
        ("/v1/embeddings", MESSAGES_MODEL, False, "unsupported_binding"),
        ("/openai/v1/embeddings", RESPONSES_MODEL, False, "unsupported_binding"),
        ("/openai/v1/chat/completions", MESSAGES_MODEL, False, "unsupported_parameter"),
        ("/anthropic/v1/messages", CHAT_MODEL, True, "unsupported_parameter"),
    ],
)
def test_cross_shape_request_is_refused_before_the_upstream(
    gateway: Gateway, fake: FakeUpstream, path: str, model: str, anthropic_shaped: bool, code: str
) -> None:
    """SPEC §7.3: embeddings are never translated; a translated request with a field that has no
    counterpart (here ``input`` on a chat or messages body) is refused before any upstream call."""
    body = {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    response = gateway.post(path, body)
    if anthropic_shaped:
        error = assert_anthropic_error(response, 400, "invalid_request_error")
        assert error["message"] == "unsupported_parameter: input (adapter openai)"
    else:
        assert_openai_error(response, 400, code, "invalid_request_error")
    assert fake.stats()["requests"] == 0


# --- catalog edits under live traffic -------------------------------------------------------------------


def test_catalog_writes_succeed_during_live_traffic(gateway: Gateway) -> None:
    """Routing follows catalog edits made while requests flow (the tests above edit models, bindings,
    hosts and keys between calls); an edit must not fail because the usage writer is busy.

    Regression: on SQLite a control-plane write that reads before it writes (a PATCH, a POST with
    references) ran in a deferred transaction and answered 500 "database is locked" whenever the usage
    writer committed in between (SQLite refuses that lock upgrade at once, whatever busy_timeout says).
    """
    stop = threading.Event()

    def traffic() -> None:
        body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "background"}]}
        with httpx.Client(base_url=gateway.url, headers=gateway.auth(None), timeout=30) as client:
            while not stop.is_set():
                client.post("/v1/chat/completions", json=body)

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    outcomes: list[int | str] = []
    try:
        for _ in range(15):
            try:
                response = gateway.relay.api("PATCH", f"/api/hosts/{HOST_OPENAI}", {"enabled": True})
                outcomes.append(response.status_code)
            except httpx.TransportError as exc:
                outcomes.append(type(exc).__name__)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert outcomes == [200] * 15, outcomes
