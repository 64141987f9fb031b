"""Objects and waits shared by the webhook tests."""

from __future__ import annotations

import time
from typing import Any

from tests.fixtures.live import Gateway, uniq


def own_project(gw: Gateway) -> tuple[str, str]:
    """A fresh project (under the module's team and ``*`` policy) with a service account and a relay
    key: (project name, key plaintext). Batches submitted with the key belong to this project only."""
    project = gw.create("projects", {"name": uniq("prj"), "team": "live-team", "default_policy": gw.policy})
    account = gw.create("service-accounts", {"name": uniq("sa"), "project": project["name"]})
    body = {"principal_kind": "serviceaccount", "principal": account["name"]}
    key = gw.control_write("POST", "/api/keys", body, 201).json()["plaintext"]
    gw.wait_until_known(key)
    return str(project["name"]), str(key)


def new_webhook(gw: Gateway, url: str, **spec: Any) -> dict[str, Any]:
    return gw.create("webhooks", {"name": uniq("wh"), "url": url, **spec})


def deliveries(gw: Gateway, webhook: str, **params: Any) -> list[dict[str, Any]]:
    response = gw.relay.control.get(f"/api/webhooks/{webhook}/deliveries", params=params)
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"items"}
    return list(response.json()["items"])


def wait_deliveries(
    gw: Gateway, webhook: str, count: int, timeout: float = 15.0, **params: Any
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        got = deliveries(gw, webhook, **params)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.1)
