"""The dashboard tells the truth in a real Chromium (SPEC §16): the overview's figures equal the usage
API's summary with more than 1 000 events in one minute, token figures from 10^4 to 10^9 written as
``10k`` … ``1B``, each finished batch's badge, a 50 000-item batch's items paged by a real click, and no
serious axe-core violation on those pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from relay.store import usage as usage_store
from tests.e2e.dashboard.conftest import shot
from tests.e2e.dashboard.helpers import audit, sign_in
from tests.fixtures.live import Gateway
from tests.integration.control.test_dashboard_truth import run_sql, seed_batch
from tests.integration.usage.helpers import make_event

CHART_VALUES = """title => [...document.querySelectorAll(`figure[data-chart="${title}"] td[data-value]`)]
    .map(td => [td.previousElementSibling.textContent, Number(td.dataset.value), td.textContent])"""


def seed_events(gw: Gateway, now: datetime) -> datetime:
    busy = (now - timedelta(minutes=20)).replace(second=0, microsecond=0)
    events = [make_event(ts=busy + timedelta(milliseconds=20 * i)) for i in range(2500)]
    # One event a minute after the busy one with 10^4 … 10^9 input tokens.
    events += [
        make_event(ts=busy + timedelta(minutes=1 + p), input_tokens=10 ** (4 + p), output_tokens=0)
        for p in range(6)
    ]

    async def work(conn: Any) -> None:
        await usage_store.insert_events(conn, events)

    run_sql(gw.relay, work)
    return busy


def test_the_overview_shows_the_whole_data_formatted_for_people(page: Any, dash_gw: Gateway) -> None:
    now = datetime.now(UTC)
    busy = seed_events(dash_gw, now)
    sign_in(page)
    page.goto("/ui/")
    shown = page.evaluate(CHART_VALUES, "Requests per minute, last hour")
    since = (now - timedelta(minutes=59)).replace(second=0, microsecond=0).isoformat().replace("+00:00", "Z")
    rows = dash_gw.relay.api("GET", f"/api/usage/summary?group_by=minute&from={since}").json()["rows"]
    expected = {row["group"][11:]: row["requests"] for row in rows}
    assert {label: value for label, value, _ in shown} == expected
    assert expected[busy.strftime("%H:%M")] == 2500  # more than the old 1 000-event sample
    tokens = {label: text for label, _, text in page.evaluate(CHART_VALUES, "Tokens per minute, last hour")}
    written = [tokens[(busy + timedelta(minutes=1 + p)).strftime("%H:%M")] for p in range(6)]
    assert written == ["10k", "100k", "1M", "10M", "100M", "1B"]
    assert "e+" not in page.locator("main").inner_text()
    shot(page, "overview-whole-data")
    audit(page, "/ui/")


def test_each_finished_batch_says_how_it_ended(page: Any, dash_gw: Gateway) -> None:
    outcomes = {
        seed_batch(dash_gw.relay, 2000, "completed", True, completed=2000): "completed",
        seed_batch(
            dash_gw.relay, 2000, "completed", True, completed=1, discarded=1999
        ): "completed with failures",
        seed_batch(dash_gw.relay, 2000, "cancelled", True, completed=500, cancelled=1500): "cancelled",
        seed_batch(dash_gw.relay, 2000, "completed", True, completed=1200, cancelled=800): "expired",
    }
    sign_in(page)
    for batch_id, label in outcomes.items():
        page.goto(f"/ui/batches/{batch_id}")
        assert page.locator("[data-testid=batch-state]").inner_text() == label
    failed = next(b for b, label in outcomes.items() if label == "completed with failures")
    page.goto(f"/ui/batches/{failed}")
    assert page.locator("[data-testid=failed-share]").inner_text() == "1,999 of 2,000 failed (99.95%)"
    bar = page.locator("[data-testid=outcome-bar]").first
    assert bar.get_attribute("aria-label") == "1 completed, 1,999 failed of 2,000"
    shot(page, "batch-failures")
    audit(page, f"/ui/batches/{failed}")
    page.goto("/ui/batches")
    for batch_id, label in outcomes.items():
        row = page.locator("#batch-rows tbody tr", has=page.locator(f"a:text-is('{batch_id}')"))
        assert row.locator("[data-testid=batch-state]").inner_text() == label


def test_a_fifty_thousand_item_batch_pages_its_items(page: Any, dash_gw: Gateway) -> None:
    batch_id = seed_batch(dash_gw.relay, 50_000, "completed", True, completed=30_000, discarded=20_000)
    sign_in(page)
    page.goto(f"/ui/batches/{batch_id}")
    rows = page.locator("[data-testid=items] tbody tr")
    assert rows.count() == 100
    assert rows.first.locator("td").first.inner_text() == "0"
    page.click("[data-testid=next-items]")
    page.wait_for_url("**after=99**")
    assert page.locator("[data-testid=items] tbody tr").first.locator("td").first.inner_text() == "100"
    page.select_option("select[name=state]", "discarded")
    page.fill("input[name=error]", "quota")
    page.click("button:text('Filter items')")
    page.wait_for_url("**state=discarded**")
    first = page.locator("[data-testid=items] tbody tr").first
    assert first.locator("td").first.inner_text() == "30000"
    assert "quota exceeded" in first.inner_text()
    shot(page, "batch-items-paged")
    audit(page, f"/ui/batches/{batch_id}?state=discarded&error=quota")
