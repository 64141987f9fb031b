"""The dashboard's truth in a real headless Firefox ESR (``tests.fixtures.bidi``), as
``test_browser_truth.py`` proves it in Chromium: the overview's per-minute figures equal the usage
API's summary with 2 500 events in one minute, token figures 10^4 … 10^9 written ``10k`` … ``1B``,
each finished batch's badge, and a 50 000-item batch's items paged by a real click; and every editor
list page with no console error, no failed request and no serious axe-core violation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from relay.control.dashboard.edit_forms import TITLES
from tests.e2e.dashboard.test_browser_truth import CHART_VALUES, seed_events
from tests.e2e.dashboard.test_firefox import open_page, sign_in_by_keyboard
from tests.e2e.dashboard.test_firefox_edit import clean, text
from tests.fixtures.bidi import Firefox
from tests.fixtures.live import Gateway
from tests.integration.control.test_dashboard_truth import seed_batch


def chart(ff: Firefox, title: str) -> list[list[object]]:
    return list(ff.evaluate(f"({CHART_VALUES})({json.dumps(title)})"))


def test_firefox_overview_equals_the_summary_in_figures_for_people(ff: Firefox, dash_gw: Gateway) -> None:
    now = datetime.now(UTC)
    busy = seed_events(dash_gw, now)
    sign_in_by_keyboard(ff)
    shown = chart(ff, "Requests per minute, last hour")
    since = (now - timedelta(minutes=59)).replace(second=0, microsecond=0).isoformat().replace("+00:00", "Z")
    rows = dash_gw.relay.api("GET", f"/api/usage/summary?group_by=minute&from={since}").json()["rows"]
    assert {str(label): value for label, value, _ in shown} == {r["group"][11:]: r["requests"] for r in rows}
    assert {r["group"][11:]: r["requests"] for r in rows}[busy.strftime("%H:%M")] == 2500
    tokens = {str(label): txt for label, _, txt in chart(ff, "Tokens per minute, last hour")}
    written = [tokens[(busy + timedelta(minutes=1 + p)).strftime("%H:%M")] for p in range(6)]
    assert written == ["10k", "100k", "1M", "10M", "100M", "1B"]
    assert "e+" not in text(ff, "main")
    clean(ff, "/ui/")


def test_firefox_badges_and_a_fifty_thousand_item_table(ff: Firefox, dash_gw: Gateway) -> None:
    outcomes = {
        seed_batch(dash_gw.relay, 200, "completed", True, completed=200): "completed",
        seed_batch(
            dash_gw.relay, 200, "completed", True, completed=1, discarded=199
        ): "completed with failures",
        seed_batch(dash_gw.relay, 200, "cancelled", True, completed=50, cancelled=150): "cancelled",
        seed_batch(dash_gw.relay, 200, "completed", True, completed=120, cancelled=80): "expired",
    }
    big = seed_batch(dash_gw.relay, 50_000, "completed", True, completed=30_000, discarded=20_000)
    sign_in_by_keyboard(ff)
    for batch_id, label in outcomes.items():
        open_page(ff, f"/ui/batches/{batch_id}")
        assert text(ff, "[data-testid=batch-state]") == label, batch_id
    open_page(ff, f"/ui/batches/{big}")
    rows = "document.querySelectorAll('[data-testid=items] tbody tr')"
    assert ff.evaluate(f"{rows}.length") == 100
    assert ff.evaluate(f"{rows}[0].cells[0].textContent") == "0"
    ff.click("[data-testid=next-items]")
    ff.wait_for("location.search.includes('after=99')", "the next page of items")
    ff.wait_for(f"{rows}.length === 100 && {rows}[0].cells[0].textContent === '100'", "items from 100")
    ff.evaluate("document.querySelector('select[name=state]').value = 'discarded'")
    ff.evaluate("document.querySelector('input[name=error]').value = 'quota'")
    ff.click("form[aria-label='Filter items'] button")
    ff.wait_for("location.search.includes('state=discarded')", "the filtered items")
    assert ff.evaluate(f"{rows}[0].cells[0].textContent") == "30000"
    assert "quota exceeded" in str(ff.evaluate(f"{rows}[0].textContent"))
    clean(ff, f"/ui/batches/{big}")


def test_firefox_every_editor_list_is_clean(ff: Firefox, dash_gw: Gateway) -> None:
    sign_in_by_keyboard(ff)
    assert open_page(ff, "/ui/edit") == "Edit the catalog"
    clean(ff, "/ui/edit")
    for plural, (_, title) in TITLES.items():
        assert open_page(ff, f"/ui/edit/{plural}") == title
        clean(ff, f"/ui/edit/{plural}")
        assert not ff.problems(), plural
