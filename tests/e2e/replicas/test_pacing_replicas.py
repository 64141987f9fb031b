"""SPEC §17 across replicas, over HTTP: three ``relay serve`` processes on one Postgres database and one
Redis hold a policy's batch share exactly (a paced batch beside a live client, both spread over the
three) and its ``max_concurrency`` across all of them. What reached the fake upstream is checked per
epoch-aligned window with ``tests.fixtures.windows`` (an admission at a window's end may arrive in the
next), and in flight from each request's arrival to its answer (``ts`` → ``answered``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, metric_value, replicas_on_redis
from tests.fixtures.windows import over_allowance
from tests.integration.batch_api.helpers import chat_item, results, status, submit, wait_finished

WINDOW_S = 2
LIMIT = 20
SHARE = 10  # floor(20 × (1 − 0.5))
LIVE_WINDOWS = 3
BATCH_ITEMS = 80  # eight windows of share at least: still running when the live client is done


@pytest.fixture(scope="module")
def three_replicas(
    tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream, live_reaper: Reaper
) -> Iterator[list[Gateway]]:
    # One worker each: a replica runs one item at a time, so two items in flight at once are two replicas,
    # and a replica refused a lease was refused for leases the others held.
    env = {
        "RELAY_BATCH_WORKERS": "1",
        "RELAY_BATCH_PAYLOAD_DIR": str(tmp_path_factory.mktemp("paced-payloads")),  # shared (§10.7)
    }
    with replicas_on_redis("abc", tmp_path_factory, fake_upstream, live_reaper, env) as replicas:
        yield replicas


@dataclass
class Paced:
    model: str
    key: str  # a relay key governed by the policy
    upstream_key: str  # the value of the policy's one host key, as the fake upstream sees it
    policy_id: str


def paced_policy(replicas: list[Gateway], batch: dict[str, Any], rules: list[dict[str, Any]]) -> Paced:
    """A fresh policy with the ``batch`` block and ``rules``, and a relay key of it minted after the block
    was set: a replica that knows the key has a snapshot with the block."""
    first = replicas[0]
    s = first.scenario(rules=rules)
    assert first.patch("policies", s.policy, {"batch": batch})["batch"].items() >= batch.items()
    _key_id, key = first.mint_key(s.policy)
    for replica in replicas[1:]:
        replica.wait_until_known(key)
    return Paced(s.model, key, s.value(0), first.object_id("policies", s.policy))


def total_metric(replicas: list[Gateway], name: str, **labels: str) -> float:
    return sum(metric_value(replica.metrics(), name, **labels) for replica in replicas)


def items_started(replicas: list[Gateway]) -> list[float]:
    """Batch items each replica has started for the module project (every batch here is its)."""
    project = replicas[0].object_id("projects", replicas[0].project)
    return [metric_value(r.metrics(), "relay_batch_items_started_total", project=project) for r in replicas]


def assert_run_by_several_replicas(replicas: list[Gateway], before: list[float], items: int) -> None:
    """Every item was started once, and not all on one replica (else nothing was shared)."""
    started = [after - earlier for after, earlier in zip(items_started(replicas), before, strict=True)]
    assert sum(started) == items and sum(1 for n in started if n) >= 2, started


def into_window(offset_s: float, *, skip: int = 0) -> None:
    """Sleep to ``offset_s`` after the start of the next epoch-aligned window, ``skip`` windows further
    (the live client keeps to a per-window budget; nothing is asserted on time)."""
    time.sleep(WINDOW_S - time.time() % WINDOW_S + skip * WINDOW_S + offset_s)


def most_in_flight(spans: list[tuple[float, float]]) -> int:
    """The most requests in flight at one moment; one answered before another arrived never overlaps it
    (at the same instant an answer counts before an arrival)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    return max(itertools.accumulate(step for _, step in edges), default=0)


def test_three_replicas_hold_the_batch_share_and_live_keeps_the_rest(
    three_replicas: list[Gateway], fake: FakeUpstream
) -> None:
    rules = [{"meter": "requests", "limit": LIMIT, "window": f"{WINDOW_S}s"}]
    paced = paced_policy(three_replicas, {"pacing": "wait", "live_reserve": 0.5}, rules)
    items = [chat_item(i, model=paced.model) for i in range(BATCH_ITEMS)]
    started_before = items_started(three_replicas)
    batch_id = submit(three_replicas[0], "openai", items, key=paced.key)

    live_statuses = []
    replicas = itertools.cycle(three_replicas)
    for _ in range(LIVE_WINDOWS):
        # Mid-window, once the replicas' held items took the window's batch share: live finds the rest.
        # Every other window: a burst slowed past its window's end (a busy machine) leaves its tail in
        # a window the next burst does not use, so no window ever holds more than one burst.
        into_window(0.6, skip=1 if live_statuses else 0)
        for _ in range(LIMIT - SHARE):
            live_statuses.append(next(replicas).chat(paced.model, key=paced.key).status_code)
    assert live_statuses == [200] * LIVE_WINDOWS * (LIMIT - SHARE)
    assert status(three_replicas[0], batch_id, key=paced.key)["CompletedAt"] is None  # it ran beside live

    view = wait_finished(three_replicas[1], batch_id, key=paced.key, timeout=90.0)
    assert view["counts"] == {"completed": BATCH_ITEMS}
    assert [r.get("error") for r in results(three_replicas[2], batch_id, key=paced.key)] == [
        None
    ] * BATCH_ITEMS

    sent = [r for r in fake.requests(limit=500) if r["key"] == paced.upstream_key]
    assert len(sent) == BATCH_ITEMS + LIVE_WINDOWS * (LIMIT - SHARE)
    assert over_allowance([r["ts"] for r in sent], WINDOW_S, LIMIT) == []
    batch_sent = [r["ts"] for r in sent if "item " in str(r["body"])]
    assert len(batch_sent) == BATCH_ITEMS
    assert over_allowance(batch_sent, WINDOW_S, SHARE) == []
    waits = total_metric(
        three_replicas, "relay_batch_pacing_waits_total", policy=paced.policy_id, meter="requests"
    )
    assert waits >= 1  # the batch was paced: items found the share spent and waited
    assert_run_by_several_replicas(three_replicas, started_before, BATCH_ITEMS)


# More items than two replicas claim ahead (at most eight per worker slot each), so the third replica
# holds items too and its worker meets the two leases taken by the others.
CONCURRENCY_ITEMS = 30


def test_max_concurrency_holds_across_three_replicas(
    three_replicas: list[Gateway], fake: FakeUpstream
) -> None:
    paced = paced_policy(three_replicas, {"pacing": "wait", "max_concurrency": 2}, [])
    items = [chat_item(i, model=paced.model, fake={"latency_ms": 300}) for i in range(CONCURRENCY_ITEMS)]
    started_before = items_started(three_replicas)
    batch_id = submit(three_replicas[0], "openai", items, key=paced.key)
    view = wait_finished(three_replicas[1], batch_id, key=paced.key, timeout=60.0)
    first = results(three_replicas[0], batch_id, key=paced.key)[:2]
    assert view["counts"] == {"completed": CONCURRENCY_ITEMS}, first

    sent = [r for r in fake.requests(limit=500) if r["key"] == paced.upstream_key]
    assert len(sent) == CONCURRENCY_ITEMS and all(r["answered"] is not None for r in sent)
    assert most_in_flight([(r["ts"], r["answered"]) for r in sent]) == 2  # never more, and reached
    waits = total_metric(
        three_replicas, "relay_batch_pacing_waits_total", policy=paced.policy_id, meter="max_concurrency"
    )
    assert waits >= 1  # a replica's only worker found the two leases taken by the others
    assert_run_by_several_replicas(three_replicas, started_before, CONCURRENCY_ITEMS)
