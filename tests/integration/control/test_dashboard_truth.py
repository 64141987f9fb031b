"""The dashboard tells the truth (SPEC §16), on a real ``relay serve`` over SQLite and Postgres:
the overview's figures equal the usage API's summary on more than 1 000 events in one minute (no
sample), a batch's badge says how it ended (a 1 999-of-2 000-failed batch is not "completed"), a
50 000-item batch's items are a paged, filterable table, another's project is a 403 on the batch list,
and the minute/hour summary refuses an unbounded range naming ``from``."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from relay.domain.ids import mint_id
from relay.store import tables as t
from relay.store import usage as usage_store
from relay.store.engine import create_engine
from tests.fixtures.relay_server import ADMIN_TOKEN, RelayProcess
from tests.integration.usage.helpers import make_event

BIG = 50_000


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_sql(relay: RelayProcess, work: Any) -> None:
    async def go() -> None:
        engine = create_engine(relay.database_url, pool_size=1)
        try:
            async with engine.begin() as conn:
                await work(conn)
        finally:
            await engine.dispose()

    # In a thread of its own: a caller may already run an event loop (Playwright's sync API does).
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, go()).result()


def seed_batch(
    relay: RelayProcess, total: int, status: str, done: bool, key_id: str = "key_x", **counts: int
) -> str:
    """A batch row with its counters and items as the engine leaves them (items in idx order:
    completed, then discarded, cancelled, running, available)."""
    batch_id = mint_id("batch")
    now = datetime.now(UTC)
    states = [
        s
        for s in ("completed", "discarded", "cancelled", "running", "available")
        for _ in range(counts.get(s, 0))
    ]
    states += ["available"] * (total - len(states))
    errors = {
        "discarded": "upstream 429: quota exceeded for model x",
        "cancelled": "expired: batch expired at X",
    }
    items = [
        {
            "batch_id": batch_id,
            "idx": i,
            "state": s,
            "claimed_by": "r1" if s == "running" else None,
            "claimed_at": now if s == "running" else None,
            "finished_at": now if s in ("completed", "discarded", "cancelled") else None,
            "status": 200 if s == "completed" else (429 if s == "discarded" else None),
            "error": errors.get(s) if i % 2 == 0 or s != "discarded" else "upstream 500: boom",
            "custom_id": f"c{i}",
        }
        for i, s in enumerate(states)
    ]

    async def work(conn: Any) -> None:
        await conn.execute(
            t.batches.insert(),
            {
                "id": batch_id,
                "owner": "0" * 64,  # an unknown key: the runner re-checks it and finds none
                "key_hash": "0" * 64,
                "policy_id": "pol_x",
                "policy_name": "pol-x",
                "project_id": "prj_x",
                "team_id": "tm_x",
                "principal_kind": "serviceaccount",
                "principal_id": "sa_x",
                "credential_kind": "key",
                "credential_id": key_id,
                "inbound_shape": "openai",
                "status": "cancelled" if status == "cancelled" else "queued",
                "total_items": total,
                "created_at": now,
                "completed_at": now if done else None,
            },
        )
        await conn.execute(
            t.batch_counters.insert(),
            {"batch_id": batch_id, **{s: counts.get(s, 0) for s in ("completed", "discarded", "cancelled")}},
        )
        for start in range(0, len(items), 5000):
            await conn.execute(t.batch_items.insert(), items[start : start + 5000])

    run_sql(relay, work)
    return batch_id


@pytest.fixture
def admin(relay: RelayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=relay.control_url, timeout=60) as browser:
        signin(browser, admin_token=ADMIN_TOKEN)
        yield browser


def signin(browser: httpx.Client, **fields: str) -> None:
    form = browser.get("/ui/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    assert browser.post("/ui/signin", data={**fields, "csrf": csrf.group(1)}).status_code == 303


def chart_values(page: str, title: str) -> dict[str, str]:
    figure = page.split(f'data-chart="{title}"', 1)[1].split("</figure>", 1)[0]
    return dict(re.findall(r'<tr><td>([^<]+)</td><td data-value="([^"]+)">', figure))


def test_the_overview_equals_the_usage_summary_beyond_a_thousand_events_a_minute(
    relay: RelayProcess, admin: httpx.Client
) -> None:
    now = datetime.now(UTC)
    busy = (now - timedelta(minutes=5)).replace(second=0, microsecond=0)
    model = uniq("m")
    events = [
        make_event(ts=busy + timedelta(milliseconds=20 * i), model=model, cost_nanos=1_000)
        for i in range(2500)
    ]
    events += [
        make_event(ts=busy + timedelta(minutes=2, seconds=i), status=500, error_kind="upstream_status")
        for i in range(7)
    ]

    async def work(conn: Any) -> None:
        await usage_store.insert_events(conn, events)

    run_sql(relay, work)
    page = admin.get("/ui/")
    assert page.status_code == 200, page.text
    since = (now - timedelta(minutes=59)).replace(second=0, microsecond=0)
    summary = relay.api(
        "GET", f"/api/usage/summary?group_by=minute&from={since.isoformat().replace('+00:00', 'Z')}"
    )
    assert summary.status_code == 200, summary.text
    expected = {row["group"][11:]: float(row["requests"]) for row in summary.json()["rows"]}
    shown = {
        label: float(value)
        for label, value in chart_values(page.text, "Requests per minute, last hour").items()
    }
    assert shown[busy.strftime("%H:%M")] == 2500  # every event, not the newest 1 000
    assert shown == {k: v for k, v in expected.items() if v}
    errors = chart_values(page.text, "Errors per minute, last hour")
    assert float(errors[(busy + timedelta(minutes=2)).strftime("%H:%M")]) == 7
    assert "2.51k" in page.text  # the peak, written for people
    assert "e+0" not in page.text
    top = page.text.split('data-testid="top-models"', 1)[1].split("</tbody>", 1)[0]
    assert f"<td>{model}</td><td>2,500</td><td>0</td><td>$0.0025</td>" in top


def test_minute_summaries_need_a_bounded_range(relay: RelayProcess) -> None:
    unbounded = relay.api("GET", "/api/usage/summary?group_by=minute")
    assert unbounded.status_code == 400 and "from" in unbounded.text
    wide = relay.api(
        "GET", "/api/usage/summary?group_by=minute&from=2026-01-01T00:00:00Z&to=2026-01-03T00:00:00Z"
    )
    assert wide.status_code == 400 and "from" in wide.text
    hourly = relay.api(
        "GET", "/api/usage/summary?group_by=hour&from=2026-01-01T00:00:00Z&to=2026-01-03T00:00:00Z"
    )
    assert hourly.status_code == 200, hourly.text


@pytest.mark.parametrize(
    ("status", "done", "counts", "key", "label"),
    [
        ("completed", True, {"completed": 2000}, "completed", "completed"),
        ("completed", True, {"completed": 1, "discarded": 1999}, "failures", "completed with failures"),
        ("cancelled", True, {"completed": 500, "cancelled": 1500}, "cancelled", "cancelled"),
        ("completed", True, {"completed": 1200, "cancelled": 800}, "expired", "expired"),
        # Nothing available: the test's relay has no item of it to claim while the page is read.
        ("in_progress", False, {"completed": 10, "running": 2}, "in_progress", "in progress"),
    ],
)
def test_the_badge_says_how_each_batch_ended(
    relay: RelayProcess,
    admin: httpx.Client,
    status: str,
    done: bool,
    counts: dict[str, int],
    key: str,
    label: str,
) -> None:
    batch_id = seed_batch(relay, sum(counts.values()), status, done, **counts)
    for url in (f"/ui/batches/{batch_id}", "/ui/batches"):
        text = admin.get(url).text
        if url == "/ui/batches":
            text = text.split(f">{batch_id}</a>", 1)[1].split("</tr>", 1)[0]
        badge = re.search(r'data-testid="batch-state" data-outcome="([^"]+)">([^<]+)<', text)
        assert badge is not None and badge.groups() == (key, label), (url, text[:2000])
        bar = {s: int(n) for s, n in re.findall(r'data-state="(\w+)" data-items="(\d+)"', text)}
        assert bar == counts  # each share drawn, the failed one too
    if key == "failures":
        assert "1,999 of 2,000 failed (99.95%)" in text


def test_a_fifty_thousand_item_batch_is_a_paged_filterable_table(
    relay: RelayProcess, admin: httpx.Client
) -> None:
    batch_id = seed_batch(relay, BIG, "completed", True, completed=BIG - 20_000, discarded=20_000)
    page = admin.get(f"/ui/batches/{batch_id}")
    assert page.status_code == 200
    assert len(page.content) < 200_000, len(page.content)  # one page of items, never 50 000 elements
    rows = re.findall(r"<tr><td>(\d+)</td><td>c\d+</td>", page.text)
    assert rows == [str(i) for i in range(100)]
    following = re.search(r'href="([^"]+)" data-testid="next-items"', page.text)
    assert following is not None
    second = admin.get(html.unescape(following.group(1)))
    assert re.findall(r"<tr><td>(\d+)</td><td>c\d+</td>", second.text) == [str(i) for i in range(100, 200)]
    failed = admin.get(f"/ui/batches/{batch_id}", params={"state": "discarded", "error": "QUOTA"})
    idxs = [int(i) for i in re.findall(r"<tr><td>(\d+)</td><td>c\d+</td>", failed.text)]
    assert idxs == list(range(BIG - 20_000, BIG - 20_000 + 200, 2))  # the even ones carry the quota error
    assert "upstream 429: quota exceeded for model x" in failed.text
    last = admin.get(f"/ui/batches/{batch_id}", params={"after": str(BIG - 50)})
    assert len(re.findall(r"<tr><td>(\d+)</td><td>c\d+</td>", last.text)) == 49
    assert 'data-testid="next-items"' not in last.text
    bad = admin.get(f"/ui/batches/{batch_id}", params={"state": "lost"})
    assert bad.status_code == 400 and "state" in bad.text
    bad_after = admin.get(f"/ui/batches/{batch_id}", params={"after": "x"})
    assert bad_after.status_code == 400 and "after" in bad_after.text


def test_another_projects_batches_are_a_403_like_every_page(relay: RelayProcess) -> None:
    s = uniq("u")
    relay.create("teams", {"name": f"t-{s}"})
    relay.create("projects", {"name": f"mine-{s}", "team": f"t-{s}"})
    relay.create("projects", {"name": f"other-{s}", "team": f"t-{s}"})
    relay.create(
        "users",
        {
            "name": s,
            "email": f"{s}@example.com",
            "password": f"pw-{s}-long",
            "memberships": [{"project": f"mine-{s}"}],
        },
    )
    with httpx.Client(base_url=relay.control_url, timeout=60) as browser:
        signin(browser, email=f"{s}@example.com", password=f"pw-{s}-long")
        assert browser.get("/ui/batches", params={"project": f"mine-{s}"}).status_code == 200
        assert browser.get("/ui/batches", params={"project": f"other-{s}"}).status_code == 403
        assert browser.get("/ui/usage", params={"project": f"other-{s}"}).status_code == 403


def test_a_user_without_a_project_lands_on_their_own_page(relay: RelayProcess) -> None:
    """Signing in leads to the overview; a user who belongs to no project yet is sent on to ``/ui/me``
    (their keys, tokens and usage: empty) instead of a 403; the usage pages still refuse, and the batch
    list is theirs (none)."""
    s = uniq("lone")
    relay.create("users", {"name": s, "email": f"{s}@example.com", "password": f"pw-{s}-long"})
    with httpx.Client(base_url=relay.control_url, timeout=60, follow_redirects=True) as browser:
        form = browser.get("/ui/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        landed = browser.post(
            "/ui/signin",
            data={"email": f"{s}@example.com", "password": f"pw-{s}-long", "csrf": csrf.group(1)},
        )
        assert landed.status_code == 200, landed.text[:500]
        assert landed.url.path == "/ui/me"
        assert f"{s}@example.com" in landed.text
        refused = browser.get("/ui/usage")
        assert refused.status_code == 403
        assert "not a member of any project" in refused.text
        listed = browser.get("/ui/batches")
        assert listed.status_code == 200
        assert "/ui/batches/" not in listed.text


def test_owners_and_teams_are_shown_by_name(relay: RelayProcess, admin: httpx.Client) -> None:
    s = uniq("n")
    relay.create("teams", {"name": f"t-{s}"})
    relay.create("projects", {"name": f"p-{s}", "team": f"t-{s}"})
    relay.create("service-accounts", {"name": f"sa-{s}", "project": f"p-{s}"})
    made = relay.api(
        "POST", "/api/keys", {"principal_kind": "serviceaccount", "principal": f"sa-{s}", "name": f"key-{s}"}
    )
    assert made.status_code == 201, made.text
    key, plaintext = made.json()["key"], made.json()["plaintext"]
    batch_id = seed_batch(relay, 3, "completed", True, key_id=key["id"], completed=3)
    row = admin.get("/ui/batches").text.split(f">{batch_id}</a>", 1)[1].split("</tr>", 1)[0]
    assert f"key {key['name']}" in row
    detail = admin.get(f"/ui/batches/{batch_id}").text
    assert f"key {key['name']}" in detail and plaintext not in detail
