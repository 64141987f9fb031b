"""The dashboard (SPEC §16 "work in a current Chromium and Firefox") in a real headless Firefox:
Debian's ``firefox-esr`` driven over WebDriver BiDi by ``tests.fixtures.bidi`` (Playwright drives only
its own Firefox builds; see that module). Against the same ``relay serve`` fixture as the Chromium
tests: sign in by keyboard, every page with no console error, no failed request and no serious axe-core
violation, a screenshot of each (``test-artifacts/dashboard/firefox-*.png``), and a batch cancelled
with a real click. Under ``CI=true`` a missing Firefox fails instead of skipping.
"""

from __future__ import annotations

from tests.e2e.dashboard.conftest import ARTIFACTS
from tests.e2e.dashboard.helpers import AXE, AXE_RUN, message_batch, openai_batch
from tests.fixtures.bidi import Firefox
from tests.fixtures.live import Gateway, uniq
from tests.fixtures.relay_server import ADMIN_TOKEN
from tests.integration.batch_api.helpers import chat_item, submit, wait_finished


def open_page(ff: Firefox, path: str) -> str:
    """Go to ``path`` on the control port; the page's ``h1``."""
    ff.goto(path)
    return str(ff.wait_for("document.querySelector('h1') && document.querySelector('h1').textContent"))


def sign_in_by_keyboard(ff: Firefox) -> None:
    open_page(ff, "/ui/signin")
    for _ in range(10):
        ff.press("Tab")
        if ff.evaluate("document.activeElement && document.activeElement.id") == "admin_token":
            break
    else:
        raise AssertionError("Tab never reached the admin token field")
    ff.type(ADMIN_TOKEN)
    ff.press("Enter")
    ff.wait_for("location.pathname === '/ui/' && document.querySelector('h1').textContent === 'Overview'")


def test_firefox_signs_in_by_keyboard_and_every_page_is_clean(ff: Firefox, dash_gw: Gateway) -> None:
    relay = submit(dash_gw, "openai", [chat_item(0), chat_item(1, model="no-such-model")])
    openai = openai_batch(dash_gw, [chat_item(0)])
    anthropic = message_batch(dash_gw, [{}])
    webhook = dash_gw.create(
        "webhooks", {"name": uniq("wh"), "url": "https://hooks.example.com/ff", "enabled": False}
    )
    wait_finished(dash_gw, relay)
    sign_in_by_keyboard(ff)
    [cookie] = [c for c in ff.cookies() if c["name"] == "relay_ui"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "strict" and cookie["path"] == "/ui"
    assert ADMIN_TOKEN not in cookie["value"]["value"]
    axe = AXE.read_text()
    pages = {  # path: (its h1, the screenshot's name)
        "/ui/": ("Overview", "overview"),
        "/ui/batches": ("Batches", "batches"),
        f"/ui/batches/{relay}": (f"Batch {relay}", "batch-relay"),
        f"/ui/batches/{openai}": (f"Batch {openai}", "batch-openai"),
        f"/ui/batches/{anthropic}": (f"Batch {anthropic}", "batch-anthropic"),
        "/ui/usage": ("Usage", "usage"),
        "/ui/keys": ("Relay keys", "keys"),
        "/ui/catalog": ("Catalog and health", "catalog"),
        f"/ui/webhooks/{webhook['name']}": (f"Webhook {webhook['name']}", "webhook"),
    }
    for path, (title, name) in pages.items():
        assert open_page(ff, path) == title
        ff.run_script(axe)
        bad = ff.evaluate(AXE_RUN)
        assert not bad, f"{path} in Firefox:\n" + "\n".join(bad)
        ff.screenshot(ARTIFACTS / f"firefox-{name}.png")
        assert not ff.problems(), path  # checked page by page, to name the one that broke
    assert webhook["secret"] not in ff.evaluate("document.documentElement.outerHTML")


def test_firefox_updates_a_running_batch_live_and_cancels_it(ff: Firefox, dash_gw: Gateway) -> None:
    batch_id = submit(dash_gw, "openai", [chat_item(i, fake={"latency_ms": 500}) for i in range(40)])
    sign_in_by_keyboard(ff)
    open_page(ff, f"/ui/batches/{batch_id}")
    first = ff.evaluate(
        "(window.unreloaded = true) && +document.querySelector('#batch-detail progress').value"
    )
    # relay.js re-reads the fragment every 1.5 s: the bar moves on the page itself, with no reload.
    ff.wait_for(f"+document.querySelector('#batch-detail progress').value > {first}", "the bar to advance")
    assert ff.evaluate("window.unreloaded === true")
    ff.click("#batch-detail button.danger")
    ff.wait_for("!!document.querySelector('form.confirm')", "the confirm page")
    ff.click("form.confirm button")
    ff.wait_for("document.querySelector('[data-testid=batch-state]').textContent === 'cancelled'")
    assert ff.evaluate("document.querySelector('#batch-detail button.danger')") is None
    view = dash_gw.client.get(f"/v1/batches/{batch_id}", headers=dash_gw.auth(None)).json()
    assert view["Status"] == "cancelled" and view["counts"].get("cancelled", 0) > 0
    ff.screenshot(ARTIFACTS / "firefox-batch-cancelled.png")


def test_firefox_watch_catches_errors(ff: Firefox) -> None:
    """The check every Firefox test ends with can fail: a console error, a 404 and a script the CSP
    blocks are each reported (then cleared, so this test itself passes)."""
    open_page(ff, "/ui/signin")
    ff.evaluate("console.error('boom')")
    ff.evaluate("fetch('/ui/static/missing.js').then(() => 1)")
    ff.evaluate(
        "(() => { const s = document.createElement('script'); s.textContent = 'window.x = 1';"
        " document.body.appendChild(s); })()"
    )
    ff.drain(0.5)
    text = "\n".join(ff.problems())
    assert "boom" in text and "HTTP 404" in text and "Content-Security-Policy" in text, text
    assert ff.evaluate("window.x") is None  # the inline script did not run
    ff.events.clear()
