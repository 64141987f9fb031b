"""What the dashboard's browser tests share: signing in, the axe-core audit, and batches of the §14
and §15 APIs made the way their clients make them (the official SDKs pointed at the relay)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.dashboard.conftest import shot
from tests.fixtures.live import Gateway, uniq
from tests.fixtures.relay_server import ADMIN_TOKEN
from tests.integration.message_batches.helpers import request as message_request
from tests.integration.message_batches.helpers import sdk as anthropic_sdk
from tests.integration.openai_batches.helpers import create, line
from tests.integration.openai_batches.helpers import sdk as openai_sdk

AXE = Path(__import__("axe_playwright_python").__file__).with_name("axe.min.js")
AXE_RUN = (
    "axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations"
    ".filter((v) => v.impact === 'serious' || v.impact === 'critical')"
    ".map((v) => `${v.id} (${v.impact}): ${v.help} — `"
    " + JSON.stringify(v.nodes.slice(0, 3).map((n) => n.target))))"
)


def sign_in(page: Any) -> None:
    page.goto("/ui/signin")
    page.fill("#admin_token", ADMIN_TOKEN)
    page.click("text=Sign in as admin")
    page.wait_for_selector("h1:text('Overview')")


def new_member(gw: Gateway) -> tuple[str, str]:
    """A user who is a member of the module's project only: (email, password)."""
    email, password = f"{uniq('u')}@example.com", "correct horse battery"
    member = {"name": uniq("user"), "email": email, "password": password}
    gw.create("users", {**member, "memberships": [{"project": gw.project}]})
    return email, password


def sign_in_as(page: Any, email: str, password: str) -> None:
    page.goto("/ui/signin")
    page.fill("#email", email)
    page.fill("#password", password)
    page.press("#password", "Enter")
    page.wait_for_selector("h1:text('Overview')")


def audit(page: Any, url: str) -> None:
    """Open ``url``: no serious or critical axe-core violation, and a screenshot of it."""
    page.goto(url)
    page.evaluate(AXE.read_text())
    bad = page.evaluate(AXE_RUN)
    assert not bad, f"{url}:\n" + "\n".join(bad)
    shot(page, "page-" + (url.strip("/").replace("/", "-") or "overview"))


def openai_batch(gw: Gateway, bodies: list[dict[str, Any]]) -> str:
    """A §14 batch of chat completions, ``custom_id`` ``c0``, ``c1`` …; its id (``batch_…``)."""
    lines = [line(f"c{i}", "/v1/chat/completions", body) for i, body in enumerate(bodies)]
    return str(create(openai_sdk(gw), lines).id)


def message_batch(gw: Gateway, extras: list[dict[str, Any]]) -> str:
    """A §15 Message Batch, ``custom_id`` ``m0``, ``m1`` …, each request's params plus ``extras[i]``;
    its id (``msgbatch_…``)."""
    requests = [message_request(f"m{i}", i, **extra) for i, extra in enumerate(extras)]
    return str(anthropic_sdk(gw).messages.batches.create(requests=requests).id)  # type: ignore[arg-type]
