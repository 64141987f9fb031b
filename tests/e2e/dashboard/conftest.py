"""The dashboard in a real Chromium (Debian's ``chromium``, driven headless by Playwright; no browser is
downloaded). One ``relay serve`` (SQLite, the live catalog on the fake upstream, 2 batch workers so a
batch of slow items takes a few seconds to watch) and one browser serve the whole module; each test has
its own browser context (cookies), and fails if any page logged a console error or a request failed.

Under ``CI=true`` a missing ``/usr/bin/chromium`` fails the tests instead of skipping them (``.ci/run``
installs it). Screenshots go to ``test-artifacts/dashboard/`` (gitignored).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.bidi import FIREFOX, Firefox
from tests.fixtures.databases import missing_service
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, start_gateway

CHROMIUM = os.environ.get("RELAY_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "dashboard"


@pytest.fixture(scope="module")
def dash_gw(
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    workdir: Path = tmp_path_factory.mktemp("dashboard")
    # A miniature webhook retry schedule (5 s → 5 ms …): a failed delivery's retry lands within a test.
    env = {"RELAY_BATCH_WORKERS": "2", "RELAY_BATCH_HEARTBEAT_S": "1", "RELAY_WEBHOOK_RETRY_SCALE": "0.001"}
    yield from start_gateway("sqlite", workdir, fake_upstream, live_reaper, env)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        missing_service("Chromium", FileNotFoundError(f"{CHROMIUM} is missing (apt-get install chromium)"))
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


class PageWatch:
    """What went wrong on the pages of one context: console errors, page errors, failed requests."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def attach(self, page: Any) -> None:
        page.on(
            "console",
            lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", self._failed)
        page.on("response", self._response)

    def _failed(self, request: Any) -> None:
        failure = request.failure or ""
        if failure == "net::ERR_ABORTED":
            # Cancelled by the browser because the page navigated on (a form's redirect, a download)
            # before it finished: nothing failed. Every other failure counts, and so does any answer
            # of 400 or more (below), and a resource the CSP blocks (a console error).
            return
        self.problems.append(f"request failed: {request.method} {request.url} {failure}")

    def _response(self, response: Any) -> None:
        if response.status >= 400 and not getattr(response, "_expected", False):
            self.problems.append(f"HTTP {response.status}: {response.request.method} {response.url}")


@pytest.fixture
def page_watch() -> PageWatch:
    return PageWatch()


@pytest.fixture
def page(
    browser: Any, dash_gw: Gateway, page_watch: PageWatch, request: pytest.FixtureRequest
) -> Iterator[Any]:
    context = browser.new_context(base_url=dash_gw.relay.control_url, accept_downloads=True)
    context.set_default_timeout(30_000)
    tab = context.new_page()
    page_watch.attach(tab)
    try:
        yield tab
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}-last.png"), full_page=True)
        except Exception:
            pass
        context.close()
    allowed = getattr(request.node, "expected_problems", ())
    unexpected = [p for p in page_watch.problems if not any(a in p for a in allowed)]
    assert not unexpected, "pages had errors:\n" + "\n".join(unexpected)


def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# -- Firefox (tests.fixtures.bidi): shared by test_firefox.py and test_firefox_edit.py -----------------


@pytest.fixture(scope="module")
def firefox() -> Iterator[Firefox]:
    if not Path(FIREFOX).exists():
        missing_service("Firefox", FileNotFoundError(f"{FIREFOX} is missing (apt-get install firefox-esr)"))
    browser = Firefox()
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def ff(firefox: Firefox, dash_gw: Gateway, request: pytest.FixtureRequest) -> Iterator[Firefox]:
    """The module's Firefox, signed out and with a clean record; the test fails if any page it opened
    logged an error or had a request fail."""
    firefox.base_url = dash_gw.relay.control_url
    firefox.goto("about:blank")
    firefox.delete_cookies()
    firefox.drain()
    firefox.events.clear()
    try:
        yield firefox
    finally:
        try:
            firefox.screenshot(ARTIFACTS / f"firefox-{request.node.name}-last.png")
        except Exception:
            pass
    allowed = getattr(request.node, "expected_problems", ())
    unexpected = [p for p in firefox.problems() if not any(a in p for a in allowed)]
    firefox.events.clear()
    assert not unexpected, "pages had errors in Firefox:\n" + "\n".join(unexpected)
