"""``results_url`` with ``RELAY_PUBLIC_URL`` set (SPEC §15): that URL + the ``/anthropic`` results path,
whatever path or Host the request used; the results themselves stay reachable on the relay. One SQLite
relay of its own: the setting is read at start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, start_gateway
from tests.integration.message_batches.conftest import MB_ENV
from tests.integration.message_batches.helpers import PATH, jsonl, raw, request, sdk, wait_ended

PUBLIC_URL = "https://relay.example.com/gateway"


@pytest.fixture(scope="module")
def public_gateway(
    tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream, live_reaper: Reaper
) -> Iterator[Gateway]:
    workdir = tmp_path_factory.mktemp("mb-public-url")
    yield from start_gateway(
        "sqlite", workdir, fake_upstream, live_reaper, {**MB_ENV, "RELAY_PUBLIC_URL": PUBLIC_URL + "/"}
    )


def test_results_url_is_built_from_relay_public_url(public_gateway: Gateway) -> None:
    gw = public_gateway
    client = sdk(gw)
    created = client.messages.batches.create(requests=[request("one")])  # type: ignore[list-item]
    ended = wait_ended(client, created.id, 1)
    expected = f"{PUBLIC_URL}/anthropic/v1/messages/batches/{created.id}/results"
    assert ended.results_url == expected
    via_alias = raw(
        gw, "GET", f"/v1/messages/batches/{created.id}", headers={"x-api-key": gw.key, "host": "x"}
    )
    assert via_alias.json()["results_url"] == expected
    (line,) = jsonl(raw(gw, "GET", f"{PATH}/{created.id}/results"))
    assert line["custom_id"] == "one" and line["result"]["type"] == "succeeded"
