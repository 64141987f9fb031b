"""Regenerate the screenshots of docs/dashboard.md: ``make screenshots`` (not part of ``make test``).

Starts a relay with demo-like data (``demo_data.py``: a fake upstream, SQLite, usage over 14 days,
batches of every API, a tripped host key, a budget, a webhook with deliveries, a member user, single
sign-on configured) and captures every page in Debian's Chromium (Playwright, as the browser tests;
``RELAY_TEST_CHROMIUM`` names another) at a fixed 1280-pixel-wide viewport, each image cut at
1 200 pixels high, into ``docs/images/dashboard/`` (``--out`` for another folder). Each page is checked
for what it must show before it is captured, so a broken page fails the run instead of being pictured.

    .venv/bin/python -m tests.e2e.dashboard.screenshots [--out docs/images/dashboard]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from relay.control.dashboard.edit_forms import TITLES
from tests.e2e.dashboard.conftest import CHROMIUM
from tests.e2e.dashboard.demo_data import (
    MEMBER_EMAIL,
    MEMBER_PASSWORD,
    SSO_ENV,
    Demo,
    running_batch,
    running_relay,
    seed,
)
from tests.e2e.dashboard.helpers import sign_in, sign_in_as
from tests.fixtures.live import CHAT_MODEL, Gateway
from tests.integration.webhooks.receiver import Receiver

ROOT = Path(__file__).resolve().parents[3]
VIEWPORT = {"width": 1280, "height": 800}
MAX_HEIGHT = 1200


class Camera:
    def __init__(self, page: Any, out: Path) -> None:
        self.page, self.out = page, out
        self.taken: list[str] = []

    def __call__(self, name: str, must_show: str = "") -> None:
        if must_show:
            self.page.wait_for_selector(f"main :text('{must_show}')")
        height = min(int(self.page.evaluate("document.documentElement.scrollHeight")), MAX_HEIGHT)
        clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": height}
        self.page.screenshot(path=str(self.out / f"{name}.png"), full_page=True, clip=clip)
        self.taken.append(name)


def edit_refs(gw: Gateway, demo: Demo) -> dict[str, str]:
    """The object each kind's edit form is pictured with (a demo object where there is one)."""
    preferred = {
        "teams": "platform",
        "projects": "search",
        "users": "dana",
        "models": CHAT_MODEL,
        "policies": gw.policy,
        "guardrails": demo.guardrail,
        "webhooks": demo.webhook,
    }
    refs = {}
    for plural in TITLES:
        if plural in preferred:
            refs[plural] = gw.object_id(plural, preferred[plural])
        else:
            refs[plural] = str(gw.relay.api("GET", f"/api/{plural}").json()["items"][0]["id"])
    return refs


def admin_pages(snap: Camera, gw: Gateway, demo: Demo) -> None:
    page = snap.page
    page.goto("/ui/signin")
    snap("signin", "Sign in with SSO")
    sign_in(page)
    snap("overview", "Requests per minute")
    running = running_batch(gw)
    try:
        page.goto("/ui/batches")
        snap("batches", running)
        page.goto("/ui/batches?api=openai")
        snap("batches-by-api", demo.openai_batch)
        page.goto(f"/ui/batches/{running}")
        page.wait_for_function(
            "() => { const b = document.querySelector('#batch-detail progress');"
            " return b && +b.value >= 10 && +b.value < +b.max; }"
        )
        snap("batch-running", "in progress")
    finally:
        gw.client.post(f"/v1/batches/{running}/cancel", headers=gw.auth(None))
    page.goto(f"/ui/batches/{demo.failed_batch}")
    snap("batch-failures", "completed with failures")
    page.goto(f"/ui/batches/{demo.openai_batch}")
    snap("batch-openai", "Download output file")
    page.goto(f"/ui/batches/{demo.message_batch}")
    snap("batch-message", "Message Batches")
    page.goto("/ui/usage?group_by=model")
    snap("usage", "Download CSV")
    page.goto("/ui/keys")
    snap("keys", "Relay keys")
    page.fill("input[name=principal]", gw.account)
    page.fill("input[name=name]", "ci-pipeline")
    page.click("button:text('Create key')")
    page.wait_for_selector("[data-testid=plaintext]")
    snap("key-created")
    page.goto("/ui/catalog")
    snap("catalog", "open")
    page.goto(f"/ui/webhooks/{demo.webhook}")
    snap("webhook-deliveries", "delivered")
    page.goto("/ui/edit")
    snap("edit", "Edit the catalog")
    for plural, ref in edit_refs(gw, demo).items():
        page.goto(f"/ui/edit/{plural}/{ref}")
        snap(f"edit-{plural}", "Save")
    policy = gw.object_id("policies", gw.policy)
    page.goto(f"/ui/edit/policies/{policy}")
    page.fill("textarea[name=cache]", '{"ttl": "forever"}')
    page.click("form.edit button:text('Save')")
    page.wait_for_selector("[role=alert]")
    snap("edit-policy-error")
    page.goto(f"/ui/edit/teams/{gw.object_id('teams', 'platform')}/delete")
    snap("edit-delete-confirm", "No, keep it")
    page.goto("/ui/audit")
    snap("audit", "verify")
    page.click("button:text('Sign out')")


def member_pages(snap: Camera, gw: Gateway) -> None:
    page = snap.page
    sign_in_as(page, MEMBER_EMAIL, MEMBER_PASSWORD)
    page.goto("/ui/me")
    page.fill("#key-name", "dana-laptop")
    page.click("button:text('Create key')")
    plaintext = page.locator("[data-testid=plaintext]").inner_text()
    for _ in range(3):
        gw.chat(key=plaintext)
    deadline = time.monotonic() + 30
    while True:  # the usage events are written off the response path
        page.goto("/ui/me")
        if page.locator(f"tr[data-model='{CHAT_MODEL}']").count() or time.monotonic() > deadline:
            break
        page.wait_for_timeout(250)
    snap("me", CHAT_MODEL)
    page.goto("/ui/")
    snap("overview-member", "Overview")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "dashboard")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    receiver = Receiver()
    try:
        with running_relay(env=SSO_ENV) as gw, sync_playwright() as playwright:
            demo = seed(gw, receiver)
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
            )
            try:
                context = browser.new_context(
                    base_url=gw.relay.control_url, viewport=VIEWPORT, device_scale_factor=1
                )
                context.set_default_timeout(30_000)
                snap = Camera(context.new_page(), args.out)
                admin_pages(snap, gw, demo)
                member_pages(snap, gw)
            finally:
                browser.close()
    finally:
        receiver.close()
    for name in snap.taken:
        path = args.out / f"{name}.png"
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"{shown}  {path.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
