"""The dashboard's batches of the §14 and §15 APIs and its webhooks (SPEC §16 with §10.10, §14, §15),
in a real headless Chromium against a real ``relay serve``.

A batch made through the OpenAI Batches or Message Batches API (with the official SDKs) is listed with
its API and filtered by it; its page shows item states and failures by cause, downloads the results in
that API's own shape (the §14 output and error files, the §15 results JSONL) and cancels. Webhooks are
listed with their latest delivery, and a webhook's page shows its attempts as the deliveries API does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.e2e.dashboard.conftest import shot
from tests.e2e.dashboard.helpers import audit, message_batch, new_member, openai_batch, sign_in, sign_in_as
from tests.fixtures.live import Gateway, uniq
from tests.integration.batch_api.helpers import chat_item, submit, wait_finished
from tests.integration.message_batches.helpers import sdk as anthropic_sdk
from tests.integration.message_batches.helpers import wait_ended as wait_message_batch
from tests.integration.openai_batches.helpers import sdk as openai_sdk
from tests.integration.openai_batches.helpers import wait_ended as wait_openai_batch
from tests.integration.webhooks.receiver import Receiver


def item_states(page: Any) -> list[str]:
    """``["<idx> <state>", …]`` of the batch page's item table (its first page)."""
    return list(
        page.locator("[data-testid=items] tbody tr").evaluate_all(
            "rows => rows.map(r => r.cells[0].innerText + ' ' + r.cells[2].innerText)"
        )
    )


def download(page: Any, selector: str) -> list[dict[str, Any]]:
    with page.expect_download() as got:
        page.click(selector)
    return [json.loads(text) for text in Path(got.value.path()).read_text().splitlines()]


def wait_text(page: Any, selector: str, text: str, timeout: float = 30.0) -> None:
    """Until the live-updated ``selector`` shows ``text`` (the page polls; no reload)."""
    deadline = time.monotonic() + timeout
    while text not in page.locator(selector).inner_text():
        assert time.monotonic() < deadline, f"{selector} never showed {text!r}"
        time.sleep(0.1)


def test_batches_of_every_api_are_listed_and_filtered_by_api(page: Any, dash_gw: Gateway) -> None:
    relay = submit(dash_gw, "openai", [chat_item(0)])
    openai = openai_batch(dash_gw, [chat_item(0)])
    anthropic = message_batch(dash_gw, [{}])
    assert openai.startswith("batch_") and anthropic.startswith("msgbatch_")
    sign_in(page)
    page.goto("/ui/batches")
    rows = page.locator("#batch-rows tbody tr")
    for batch_id, api in ((relay, "relay"), (openai, "openai"), (anthropic, "anthropic")):
        row = rows.filter(has=page.locator(f"a:text-is('{batch_id}')"))
        assert row.locator("td").nth(1).inner_text() == api
    options = page.locator("select[name=api] option").all_inner_texts()
    assert options == ["any", "relay", "openai", "anthropic"]
    for api, shown, hidden in (("openai", openai, anthropic), ("anthropic", anthropic, openai)):
        page.select_option("select[name=api]", api)
        page.click("button:text('Filter')")
        page.wait_for_url(f"**/ui/batches?*api={api}*")
        text = page.locator("#batch-rows").inner_text()
        assert shown in text and hidden not in text and relay not in text
        assert {t for t in page.locator("#batch-rows tbody td:nth-child(2)").all_inner_texts()} == {api}
    shot(page, "batches-by-api")


def test_an_openai_batch_page_downloads_its_output_and_error_files(page: Any, dash_gw: Gateway) -> None:
    batch_id = openai_batch(dash_gw, [chat_item(0), chat_item(1, model="no-such-model"), chat_item(2)])
    ended = wait_openai_batch(openai_sdk(dash_gw), batch_id)
    assert ended.output_file_id and ended.error_file_id
    sign_in(page)
    page.goto(f"/ui/batches/{batch_id}")
    detail = page.locator("#batch-detail")
    assert "openai" in detail.inner_text() and "completed 2" in detail.inner_text()
    assert item_states(page) == ["0 completed", "1 discarded", "2 completed"]
    failures = page.locator("#batch-detail [data-testid=failures] tbody tr")
    assert failures.count() == 1 and "1" in failures.locator("td").nth(1).inner_text()
    assert ended.output_file_id in page.locator("[data-testid=results-link]").inner_text()
    output = download(page, "[data-testid=results-link]")
    assert sorted(o["custom_id"] for o in output) == ["c0", "c2"]  # the §14 output file itself
    assert all(o["response"]["status_code"] == 200 for o in output)
    expected = openai_sdk(dash_gw).files.content(ended.output_file_id).text.splitlines()
    assert [json.loads(t) for t in expected] == output  # byte for byte what the owner downloads
    errors = download(page, "[data-testid=errors-link]")
    assert [e["custom_id"] for e in errors] == ["c1"] and errors[0]["error"]
    shot(page, "batch-openai")
    audit(page, f"/ui/batches/{batch_id}")


def test_a_message_batch_page_downloads_its_results_and_cancels(page: Any, dash_gw: Gateway) -> None:
    done = message_batch(dash_gw, [{}, {"model": "no-such-model"}])
    wait_message_batch(anthropic_sdk(dash_gw), done, 2)
    sign_in(page)
    page.goto(f"/ui/batches/{done}")
    assert item_states(page) == ["0 completed", "1 discarded"]
    assert "Message Batches" in page.locator("[data-testid=results-link]").inner_text()
    results = {r["custom_id"]: r["result"] for r in download(page, "[data-testid=results-link]")}
    assert results["m0"]["type"] == "succeeded" and results["m0"]["message"]["type"] == "message"
    assert results["m1"]["type"] == "errored"
    audit(page, f"/ui/batches/{done}")

    slow = message_batch(dash_gw, [{"fake": {"latency_ms": 500}} for _ in range(30)])
    page.goto(f"/ui/batches/{slow}")
    assert page.locator("[data-testid=results-link]").count() == 0  # none before it ends (§15)
    assert "once the batch has ended" in page.locator("#batch-detail").inner_text()
    page.click("button:text('Cancel batch')")
    page.click("button:text('Yes, cancel batch')")  # the confirm step
    page.wait_for_selector("[data-testid=batch-state]:text('cancelled')")
    ended = wait_message_batch(anthropic_sdk(dash_gw), slow, 30)
    assert ended.request_counts.canceled > 0  # the owner's API sees the dashboard's cancel
    wait_text(page, "#batch-detail", "Download results")
    canceled = [r for r in download(page, "[data-testid=results-link]") if r["result"]["type"] == "canceled"]
    assert len(canceled) == ended.request_counts.canceled
    shot(page, "batch-anthropic-cancelled")


def test_webhooks_and_their_deliveries(page: Any, dash_gw: Gateway, receiver: Receiver) -> None:
    path = receiver.path(statuses=[500, 200])  # the first attempt fails, the retry is delivered
    name = uniq("wh")
    hook = dash_gw.create("webhooks", {"name": name, "url": receiver.url(path), "project": dash_gw.project})
    quiet = dash_gw.create(
        "webhooks", {"name": uniq("wh"), "url": receiver.url(receiver.path()), "enabled": False}
    )
    batch_id = submit(dash_gw, "openai", [chat_item(0)])
    wait_finished(dash_gw, batch_id)
    assert len(receiver.wait(path, 2)) == 2
    deadline = time.monotonic() + 15
    while True:  # the answer is recorded once the attempt is done
        api = dash_gw.relay.control.get(f"/api/webhooks/{name}/deliveries").json()["items"]
        if (len(api) == 2 and api[0]["status_code"] == 200) or time.monotonic() > deadline:
            break
        time.sleep(0.1)

    sign_in(page)
    page.goto("/ui/catalog")
    assert page.title() == "Catalog and health · Relay"  # the webhooks table is not in the <title>
    assert page.locator(f"tr[data-webhook='{name}']").count() == 1
    row = page.locator(f"tr[data-webhook='{name}']")
    text = row.inner_text()
    assert receiver.url(path) in text and dash_gw.project in text and "batch.completed" in text
    assert "delivered" in row.locator("[data-testid=latest-delivery]").inner_text()
    other = page.locator(f"tr[data-webhook='{quiet['name']}']").inner_text()
    assert "none yet" in other and "every project" in other
    assert hook["secret"] not in page.content() and quiet["secret"] not in page.content()
    shot(page, "catalog-webhooks")

    row.locator(f"a:text-is('{name}')").click()
    page.wait_for_selector(f"h1:has-text('{name}')")
    rows = page.locator("#deliveries tbody tr")
    assert rows.count() == len(api) == 2
    for shown, answered in zip(rows.all(), api, strict=True):  # as GET …/deliveries answers, in order
        assert shown.get_attribute("data-event") == answered["event_id"]
        assert shown.locator("[data-testid=status-code]").inner_text() == str(answered["status_code"])
    assert rows.nth(0).locator("[data-testid=outcome]").inner_text() == "delivered"
    assert rows.nth(1).locator("[data-testid=outcome]").inner_text() == "retrying"
    assert api[1]["next_attempt_at"] in rows.nth(1).inner_text()
    assert hook["secret"] not in page.content()
    shot(page, "webhook-deliveries")
    audit(page, f"/ui/webhooks/{name}")
    audit(page, "/ui/catalog")


def test_webhook_pages_refuse_what_the_api_refuses(page: Any, dash_gw: Gateway, request: Any) -> None:
    email, password = new_member(dash_gw)
    name = uniq("wh")
    dash_gw.create("webhooks", {"name": name, "url": "https://hooks.example.com/x", "enabled": False})
    request.node.expected_problems = ["403", "404"]
    sign_in(page)
    missing = page.goto("/ui/webhooks/no-such-webhook")
    assert missing.status == 404 and "not found" in page.locator("main").inner_text().lower()
    page.click("button:text('Sign out')")
    sign_in_as(page, email, password)
    assert page.goto(f"/ui/webhooks/{name}").status == 403  # /api/webhooks is the admin's only
    assert name not in page.content()
