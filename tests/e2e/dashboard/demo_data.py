"""A running relay with demo-like data for the dashboard's screenshots (``screenshots.py``) and its page
benchmark (``bench/dashboard_pages.py``): not used by the tests.

:func:`running_relay` starts the fake upstream and one ``relay serve`` on SQLite (or Postgres) with the
tests' live catalog; :func:`seed` then fills it as a platform team's relay looks after a while — a
few thousand usage events over the last hour and 14 days across three projects and three models
(with errors), finished batches of every API (one with failures), a tripped host key, a budget with
spend, a guardrail, a webhook with a failed then delivered attempt, and a member user. Everything is
made through the control and inference APIs, except the usage events and the large batches, which are
written straight into the database (as ``tests/e2e/dashboard/test_browser_truth.py`` does) because
making them through the API would take minutes.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from relay.store import usage as usage_store
from tests.e2e.dashboard.helpers import message_batch, openai_batch
from tests.fixtures.fake_upstream import start_fake_upstream, stop_process
from tests.fixtures.live import CHAT_MODEL, MESSAGES_MODEL, Gateway, Reaper, start_gateway
from tests.integration.batch_api.helpers import chat_item, submit, wait_finished
from tests.integration.control.test_dashboard_truth import run_sql, seed_batch
from tests.integration.message_batches.helpers import sdk as anthropic_sdk
from tests.integration.message_batches.helpers import wait_ended as wait_message_batch
from tests.integration.openai_batches.helpers import sdk as openai_sdk
from tests.integration.openai_batches.helpers import wait_ended as wait_openai_batch
from tests.integration.usage.helpers import make_event
from tests.integration.webhooks.helpers import wait_deliveries
from tests.integration.webhooks.receiver import Receiver

MEMBER_EMAIL, MEMBER_PASSWORD = "dana@example.com", "correct horse battery"
# Single sign-on configured (discovery is lazy: the sign-in page offers SSO without reaching the issuer).
SSO_ENV = {
    "RELAY_OIDC_ISSUER": "https://sso.example.com",
    "RELAY_OIDC_CLIENT_ID": "relay",
    "RELAY_OIDC_CLIENT_SECRET": "demo-client-secret",
}


@dataclass
class Demo:
    """What :func:`seed` made, by what the pages need."""

    gw: Gateway
    projects: list[str] = field(default_factory=list)
    failed_batch: str = ""
    openai_batch: str = ""
    message_batch: str = ""
    webhook: str = ""
    guardrail: str = ""
    events: int = 0  # usage events written


@contextmanager
def running_relay(backend: str = "sqlite", env: dict[str, str] | None = None) -> Iterator[Gateway]:
    """A fake upstream and a relay with the live catalog (2 batch workers) until the block ends."""
    fake = start_fake_upstream()
    reaper = Reaper()
    settings = {
        "RELAY_BATCH_WORKERS": "2",
        "RELAY_BATCH_HEARTBEAT_S": "1",
        "RELAY_WEBHOOK_RETRY_SCALE": "0.001",
    }
    try:
        with tempfile.TemporaryDirectory(prefix="relay-dash-") as workdir:
            gateway = start_gateway(backend, Path(workdir), fake, reaper, {**settings, **(env or {})})
            try:
                yield next(gateway)
            finally:
                gateway.close()
                reaper.join()
    finally:
        if fake.process is not None:
            stop_process(fake.process)


def seed(gw: Gateway, receiver: Receiver | None = None, per_minute: int = 60) -> Demo:
    demo = Demo(gw)
    team = "platform"
    gw.create("teams", {"name": team, "display_name": "Platform"})
    for name in ("search", "support-bot"):
        gw.create("projects", {"name": name, "team": team, "default_policy": gw.policy})
    demo.projects = [gw.project, "search", "support-bot"]
    gw.create(
        "users",
        {
            "name": "dana",
            "email": MEMBER_EMAIL,
            "password": MEMBER_PASSWORD,
            "memberships": [{"project": gw.project}],
        },
    )
    demo.guardrail = gw.create(
        "guardrails",
        {"name": "no-secrets", "stage": "input", "action": "block", "regex": ["sk-[A-Za-z0-9]{20,}"]},
    )["name"]
    demo.events = seed_usage(gw, [gw.object_id("projects", p) for p in demo.projects], per_minute)

    scenario = gw.scenario(["fail-401"])  # a host key the upstream refuses: its breaker opens
    gw.chat(scenario.model, key=scenario.key)
    budget = gw.scenario(rules=[{"meter": "cost_usd", "limit": 5, "window": "1d"}])
    gw.chat(budget.model, key=budget.key)

    if receiver is not None:
        path = receiver.path(statuses=[500, 200])  # the first attempt fails, the retry is delivered
        demo.webhook = gw.create(
            "webhooks", {"name": "batch-alerts", "url": receiver.url(path), "project": gw.project}
        )["name"]
    items = [chat_item(i) if i % 7 else chat_item(i, model="no-such-model") for i in range(40)]
    demo.failed_batch = submit(gw, "openai", items)
    wait_finished(gw, demo.failed_batch)
    demo.openai_batch = openai_batch(gw, [chat_item(0), chat_item(1, model="no-such-model"), chat_item(2)])
    demo.message_batch = message_batch(gw, [{}, {}, {"model": "no-such-model"}])
    wait_openai_batch(openai_sdk(gw), demo.openai_batch)
    wait_message_batch(anthropic_sdk(gw), demo.message_batch, 3)
    if receiver is not None:
        wait_deliveries(gw, demo.webhook, 2)
    return demo


def seed_usage(gw: Gateway, project_ids: list[str], per_minute: int = 60) -> int:
    """Usage events over the last hour (about ``per_minute`` a minute, in waves) and the 14 days
    before, across ``project_ids`` and three models, a few percent of them errors; how many."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    models = [CHAT_MODEL, MESSAGES_MODEL, "live-embed"]
    events = []
    n = 0
    for minute in range(60):
        start = now - timedelta(minutes=59 - minute)
        count = int(per_minute * (1 + 0.6 * math.sin(minute / 6)))
        for i in range(count):
            events.append(_event(n, start + timedelta(seconds=60 * i / max(count, 1)), models, project_ids))
            n += 1
    for day in range(1, 15):
        for i in range(150 + 40 * (day % 5)):
            events.append(_event(n, now - timedelta(days=day, minutes=7 * i), models, project_ids))
            n += 1

    async def work(conn: Any) -> None:
        for start in range(0, len(events), 5000):
            await usage_store.insert_events(conn, events[start : start + 5000])

    run_sql(gw.relay, work)
    return len(events)


def _event(n: int, ts: datetime, models: list[str], project_ids: list[str]) -> Any:
    failed = n % 37 == 0
    return make_event(
        ts=ts,
        model=models[n % len(models)],
        project_id=project_ids[n % len(project_ids)],
        status=429 if failed else 200,
        error_kind="rate_limited" if failed else None,
        input_tokens=200 + (n * 37) % 1800,
        output_tokens=50 + (n * 11) % 400,
        cost_nanos=(200 + (n * 37) % 1800) * 150 + (50 + (n * 11) % 400) * 600,
        latency_ms=120 + (n * 13) % 900,
    )


def big_batches(gw: Gateway) -> tuple[str, str]:
    """A finished 100-item and a 50 000-item batch (written into the database): their ids."""
    small = seed_batch(gw.relay, 100, "completed", True, completed=93, discarded=7)
    large = seed_batch(gw.relay, 50_000, "completed", True, completed=48_500, discarded=1_500)
    return small, large


def running_batch(gw: Gateway, items: int = 120, latency_ms: int = 400) -> str:
    """A batch of slow items, running for ``items × latency_ms / 2`` ms on the 2 workers."""
    return submit(gw, "openai", [chat_item(i, fake={"latency_ms": latency_ms}) for i in range(items)])
