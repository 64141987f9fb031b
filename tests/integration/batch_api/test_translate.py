"""``translate: true`` on a policy's ``batch`` block (SPEC §17), over HTTP against real ``relay serve``
processes and the fake upstream, on SQLite and Postgres: a batch item whose shape differs from its
binding's adapter fails ``cross-shape dispatch: `` under the defaults (§10.4) and, once the policy
says ``translate: true`` (a control-API PATCH the running relay picks up), is translated like a live
request (§7.3), its result kept in the item's own shape."""

from __future__ import annotations

from tests.fixtures.live import Gateway
from tests.integration.batch_api.helpers import chat_item, results, submit, wait_events, wait_finished


def test_a_chat_item_for_an_anthropic_model_completes_only_under_translate(gateway: Gateway) -> None:
    s = gateway.scenario(adapter="anthropic")
    items = [chat_item(i, model=s.model, max_tokens=32) for i in range(3)]

    refused = submit(gateway, "openai", items, key=s.key)
    wait_finished(gateway, refused, key=s.key)
    error = "cross-shape dispatch: item shape openai, binding adapter anthropic"
    assert [(r["state"], r.get("error")) for r in results(gateway, refused, key=s.key)] == [
        ("discarded", error)
    ] * 3

    patched = gateway.patch("policies", s.policy, {"batch": {"translate": True}})
    assert patched["batch"]["translate"] is True
    translated = submit(gateway, "openai", items, key=s.key)
    view = wait_finished(gateway, translated, key=s.key)
    assert view["counts"] == {"completed": 3}
    for result in results(gateway, translated, key=s.key):
        answer = result["response"]
        assert answer["object"] == "chat.completion" and answer["model"] == s.model
        assert answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["choices"][0]["message"]["content"]
        assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] > 0
    events = wait_events(gateway, translated, 3)
    assert {(e["inbound_shape"], e["adapter"], e["status"]) for e in events} == {("openai", "anthropic", 200)}
    assert all(e["cost_nanos"] for e in events)

    # Back to the defaults: the rule of §10.4 again.
    gateway.patch("policies", s.policy, {"batch": None})
    again = submit(gateway, "openai", items[:1], key=s.key)
    wait_finished(gateway, again, key=s.key)
    assert [r.get("error") for r in results(gateway, again, key=s.key)] == [error]


def test_an_anthropic_item_for_an_openai_model_is_answered_as_a_message(gateway: Gateway) -> None:
    s = gateway.scenario()
    gateway.patch("policies", s.policy, {"batch": {"translate": True}})
    item = {"model": s.model, "max_tokens": 32, "messages": [{"role": "user", "content": "hello"}]}
    batch_id = submit(gateway, "anthropic", [item], key=s.key)
    wait_finished(gateway, batch_id, key=s.key)
    [result] = results(gateway, batch_id, key=s.key)
    assert result["state"] == "completed", result
    answer = result["response"]
    assert answer["type"] == "message" and answer["role"] == "assistant" and answer["model"] == s.model
    assert answer["content"][0]["type"] == "text" and answer["usage"]["input_tokens"] > 0
