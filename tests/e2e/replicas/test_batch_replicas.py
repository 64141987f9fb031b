"""Batches across replicas of one Postgres database (SPEC §10.6, §10.7), over HTTP against real
``relay serve`` processes and the real fake upstream.

Three replicas on one database (the module fixture ``three_relays``):

- ``a`` and ``b`` run 16 workers each and share one ``RELAY_BATCH_PAYLOAD_DIR`` (the supported layout);
- ``c`` runs no items (``RELAY_BATCH_WORKERS=0``) and has a directory of its own (the misconfiguration
  §10.7 warns about). Since ``c`` never runs an item, what it submits always runs on ``a`` or ``b``
  (whose directory lacks the request files), and what ``a`` or ``b`` complete is always read through
  ``c`` from a directory without the response files: both effects are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from tests.fixtures.databases import create_postgres_database
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper
from tests.fixtures.relay_server import RelayProcess
from tests.integration.batch_api.helpers import (
    assert_failed_event,
    chat_item,
    item_events,
    results,
    submit,
    wait_finished,
)

SHARED_WORKERS = ("replica-a", "replica-b")


@dataclass
class Replicas:
    a: Gateway
    b: Gateway
    c: Gateway  # no workers, its own payload directory


@pytest.fixture(scope="module")
def three_relays(
    tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream, live_reaper: Reaper
) -> Iterator[Replicas]:
    root = tmp_path_factory.mktemp("batch-replicas")
    database_url = create_postgres_database()
    shared = {"RELAY_BATCH_PAYLOAD_DIR": str(root / "shared-payloads")}
    processes = [
        RelayProcess(root / "a", database_url, {**shared, "RELAY_INSTANCE_ID": "replica-a"}),
        RelayProcess(root / "b", database_url, {**shared, "RELAY_INSTANCE_ID": "replica-b"}),
        RelayProcess(
            root / "c",
            database_url,
            {
                "RELAY_BATCH_PAYLOAD_DIR": str(root / "c-payloads"),
                "RELAY_INSTANCE_ID": "replica-c",
                "RELAY_BATCH_WORKERS": "0",
            },
        ),
    ]
    try:
        processes[0].start()
        first = Gateway(processes[0], fake_upstream, "postgres", None)
        first.apply_catalog()
        gateways = [first]
        with ThreadPoolExecutor(2) as pool:  # a migrated the database: the others start together
            list(pool.map(RelayProcess.start, processes[1:]))
        for process in processes[1:]:
            gw = first.sharing(process)
            gw.wait_until_known(first.key)
            gateways.append(gw)
        yield Replicas(*gateways)
    finally:
        live_reaper.stop(processes, database_url)


def test_shared_directory_every_item_completes_and_reads_alike(three_relays: Replicas) -> None:
    """§10.6/§10.7: two replicas with workers share the directory: every item of a batch larger than one
    replica's pool completes, exactly once (one event per item, one upstream call per item), and the
    results, with their responses, read identically through either replica."""
    a, b = three_relays.a, three_relays.b
    n = 40  # more than one replica's 16 workers, each item slow enough for both replicas to claim
    marker = f"shared-{a.relay.port}"
    requests = [chat_item(i, user=marker, fake={"latency_ms": 200}) for i in range(n)]
    batch_id = submit(a, "openai", requests)
    view = wait_finished(b, batch_id)
    assert view["counts"] == {"completed": n}
    through_a, through_b = results(a, batch_id), results(b, batch_id, jsonl=True)
    assert through_a == through_b
    assert [r["idx"] for r in through_a] == list(range(n))
    for r in through_a:
        assert r["state"] == "completed" and set(r) == {"idx", "state", "response"}, r
        assert r["response"]["choices"][0]["message"]["content"] == f"Echo: item {r['idx']}"
    events = item_events(a, batch_id, n)
    assert all(e["error_kind"] is None and e["cost_nanos"] > 0 for e in events.values())
    sent = [
        r
        for r in a.fake.requests(limit=500)
        if isinstance(r["body"], dict) and r["body"].get("user") == marker
    ]
    assert sorted(r["body"]["messages"][0]["content"] for r in sent) == sorted(f"item {i}" for i in range(n))


def test_separate_directory_items_fail_with_load_input(three_relays: Replicas) -> None:
    """§10.4/§10.7 ``load input: ``: submitted on a replica whose directory the workers do not see, every
    item fails on the replica that claimed it (named in the error), without calling the upstream."""
    a, c = three_relays.a, three_relays.c
    n = 4
    batch_id = submit(c, "openai", [chat_item(i) for i in range(n)])
    wait_finished(c, batch_id)
    through_c = results(c, batch_id)
    assert results(a, batch_id) == through_c
    events = item_events(c, batch_id, n)
    for r in through_c:
        assert r["state"] == "discarded" and set(r) == {"idx", "state", "error"}, r
        expected = {
            f"load input: the request file of item {r['idx']} is not in RELAY_BATCH_PAYLOAD_DIR on replica "
            f"{replica} (is the directory shared by every replica?)"
            for replica in SHARED_WORKERS
        }
        assert r["error"] in expected, r
        assert_failed_event(events[r["idx"]], r["error"], "load_input")


def test_separate_directory_result_comes_back_without_response(three_relays: Replicas) -> None:
    """§10.7: a result completed (and its response written) by the workers reads with its response
    through a replica sharing their directory, and without ``response`` (still ``completed``) through a
    replica that does not."""
    a, b, c = three_relays.a, three_relays.b, three_relays.c
    n = 3
    batch_id = submit(b, "openai", [chat_item(i) for i in range(n)])
    wait_finished(b, batch_id)
    with_response = results(b, batch_id)
    assert results(a, batch_id) == with_response
    assert [r["response"]["choices"][0]["message"]["content"] for r in with_response] == [
        f"Echo: item {i}" for i in range(n)
    ]
    assert results(c, batch_id) == [{"idx": i, "state": "completed"} for i in range(n)]
    assert results(c, batch_id, jsonl=True) == [{"idx": i, "state": "completed"} for i in range(n)]
    events = item_events(c, batch_id, n)
    assert all(e["error_kind"] is None and e["cost_nanos"] > 0 for e in events.values())
