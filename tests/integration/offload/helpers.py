"""What the end-to-end offload tests share (SPEC §22): a relay per backend polling every 0.2 s, a
scenario whose bindings offload (and twins that do not, for the gateway-run comparison), waits on the
admin API's view of a batch, and shape comparison that ignores ids and timestamps."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tests.fixtures.live import CHAT_UPSTREAM, MESSAGES_UPSTREAM, PRICING, Gateway, uniq

OFFLOAD_ENV = {"RELAY_OFFLOAD_POLL_S": "0.2"}
DISCOUNT = 0.5
VOLATILE = {"id", "created", "created_at", "request_id", "batch_id", "custom_id_of", "system_fingerprint"}


@dataclass(frozen=True)
class Offload:
    """Per adapter: a model whose binding offloads (``native``, ``min_items`` 2) and a twin model on
    the same host and upstream model that Relay runs; a relay key under a policy granting both."""

    chat: str
    chat_twin: str
    messages: str
    messages_twin: str
    key: str
    policy: str


def offload_scenario(gw: Gateway, rules: list[dict[str, Any]] | None = None) -> Offload:
    hosts = {"openai": uniq("ho"), "anthropic": uniq("ha")}
    keys = {adapter: uniq("hk") for adapter in hosts}
    names = {
        "chat": uniq("oc"),
        "chat_twin": uniq("gc"),
        "messages": uniq("om"),
        "messages_twin": uniq("gm"),
    }
    policy = uniq("p")
    docs: list[dict[str, Any]] = []
    for adapter, host in hosts.items():
        docs.append({"kind": "Host", "name": host, "spec": {"base_url": gw.fake.base_url}})
        docs.append({"kind": "HostKey", "name": keys[adapter], "spec": {"host": host, "value": uniq("v")}})
    for role, name in names.items():
        adapter = "anthropic" if role.startswith("messages") else "openai"
        spec: dict[str, Any] = {
            "model": name,
            "host": hosts[adapter],
            "adapter": adapter,
            "upstream_name": MESSAGES_UPSTREAM if adapter == "anthropic" else CHAT_UPSTREAM,
            "pricing": PRICING,
        }
        if not role.endswith("twin"):
            spec["batch_offload"] = {"mode": "native", "min_items": 2, "discount": DISCOUNT}
        docs.append({"kind": "Model", "name": name, "spec": {"provider": adapter}})
        docs.append({"kind": "Binding", "name": uniq("b"), "spec": spec})
    docs.append(
        {
            "kind": "Policy",
            "name": policy,
            "spec": {"models": ["*"], "host_keys": list(keys.values()), "rate_limit": {"rules": rules or []}},
        }
    )
    gw.control_write("POST", "/api/apply", {"documents": docs}, 200)
    _, plaintext = gw.mint_key(policy)
    return Offload(key=plaintext, policy=policy, **names)


def admin_batch(gw: Gateway, batch_id: str) -> dict[str, Any]:
    response = gw.relay.api("GET", f"/api/batches/{batch_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_offload(gw: Gateway, batch_id: str, *, sent: bool = True, timeout: float = 20.0) -> dict[str, Any]:
    """The admin view once the batch is offloaded (and, with ``sent``, has its provider batch id)."""
    deadline = time.monotonic() + timeout
    while True:
        view = admin_batch(gw, batch_id)
        offload = view.get("offload")
        if offload is not None and (not sent or offload.get("provider_batch_id")):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} was not offloaded: {view}")
        time.sleep(0.05)


def shape(value: Any) -> Any:
    """``value`` with ids, timestamps (``created``, every ``*_at``) and request ids left out: what two
    runs of one input share. A timestamp that is set on one side must be set on the other."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items()) if k not in VOLATILE and not k.endswith("_at")}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return value
