"""``POST /api/reload`` (SPEC §2: the snapshot is rebuilt when the catalog revision moves; the endpoint
forces it) over HTTP against a real ``relay serve`` per backend.

A change written straight into the database moves no revision and announces nothing, so the running
snapshot keeps serving what it had; the reload is what makes the replica serve the change, before it
answers. What this does not test: other replicas picking the reload up (``e2e/replicas``)."""

from __future__ import annotations

from sqlalchemy import update

from relay.store import tables as t
from tests.fixtures.live import Gateway


def test_reload_applies_a_change_written_behind_the_control_planes_back(gateway: Gateway) -> None:
    s = gateway.scenario()
    assert gateway.chat(s.model, key=s.key).status_code == 200
    before = gateway.relay.api("GET", "/api/snapshot").json()["revision"]

    gateway.sql(update(t.relay_keys).where(t.relay_keys.c.id == s.key_id).values(enabled=False))
    assert gateway.chat(s.model, key=s.key).status_code == 200  # the snapshot has not seen the write
    assert gateway.relay.api("GET", "/api/snapshot").json()["revision"] == before

    response = gateway.relay.api("POST", "/api/reload")
    assert response.status_code == 200, response.text
    revision = response.json()["revision"]
    assert revision > before
    assert gateway.relay.api("GET", "/api/snapshot").json()["revision"] == revision
    refused = gateway.chat(s.model, key=s.key)
    assert refused.status_code == 401, refused.text


def test_reload_needs_the_admin_token(gateway: Gateway) -> None:
    response = gateway.relay.inference.post(gateway.relay.control_url + "/api/reload")
    assert response.status_code == 401, response.text
