"""The admin batch API and the dashboard show a batch's provider offload (SPEC §22): the provider's
batch id and state for an offloaded batch, the refusal's reason for one sent back to Relay's
workers, nothing for a gateway-run batch — on SQLite and Postgres. The offload columns are written
by the store functions the poller uses (``relay.store.offload_batches``)."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import httpx
from sqlalchemy import update

from relay.store import offload_batches as offload
from relay.store import tables as t
from relay.store.engine import create_engine
from tests.fixtures.live import Gateway
from tests.fixtures.relay_server import ADMIN_TOKEN
from tests.integration.batch_api.helpers import chat_item, submit, wait_finished


async def mark(database_url: str, offloaded: str, refused: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            # Finished batches are not marked by the poller's statements: reopen them for the marks.
            await conn.execute(
                update(t.batches).where(t.batches.c.id.in_([offloaded, refused])).values(completed_at=None)
            )
            now = datetime.now(UTC)
            await offload.mark_offloaded(
                conn,
                offloaded,
                binding_id="bnd_x",
                provider_batch_id="batch_abc123",
                state="in_progress",
                now=now,
            )
            await offload.mark_offloaded(
                conn, refused, binding_id="bnd_x", provider_batch_id=None, state="submitting", now=now
            )
            await offload.run_on_gateway(conn, refused, "upstream returned 400: quota exhausted")
            await conn.execute(
                update(t.batches).where(t.batches.c.id.in_([offloaded, refused])).values(completed_at=now)
            )
    finally:
        await engine.dispose()


def test_admin_api_and_dashboard_show_the_provider_batch(gateway: Gateway) -> None:
    offloaded, refused, plain = (submit(gateway, "openai", [chat_item(0)]) for _ in range(3))
    for batch_id in (offloaded, refused, plain):
        wait_finished(gateway, batch_id)
    asyncio.run(mark(gateway.relay.database_url, offloaded, refused))

    def detail(batch_id: str) -> dict[str, object]:
        response = gateway.relay.control.get(f"/api/batches/{batch_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    shown = detail(offloaded)
    assert shown["offloaded"] is True
    assert shown["offload"] == {
        "binding_id": "bnd_x",
        "provider_batch_id": "batch_abc123",
        "provider_state": "in_progress",
        "reason": None,
    }
    back = detail(refused)
    assert back["offloaded"] is False
    assert back["offload"] == {
        "binding_id": "bnd_x",
        "provider_batch_id": None,
        "provider_state": None,
        "reason": "upstream returned 400: quota exhausted",
    }
    assert detail(plain)["offloaded"] is False and detail(plain)["offload"] is None
    listed = {
        i["id"]: i for i in gateway.relay.control.get("/api/batches", params={"limit": 1000}).json()["items"]
    }
    assert listed[offloaded]["offload"]["provider_batch_id"] == "batch_abc123"

    with httpx.Client(base_url=gateway.relay.control_url, timeout=30) as browser:
        form = browser.get("/ui/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        browser.post("/ui/signin", data={"admin_token": ADMIN_TOKEN, "csrf": csrf.group(1)})
        pages = {b: browser.get(f"/ui/batches/{b}").text for b in (offloaded, refused, plain)}
    cell = re.compile(r'<dd data-testid="offload">([^<]*)</dd>')
    assert cell.findall(pages[offloaded]) == ["batch_abc123 (in_progress) on binding bnd_x"]
    assert cell.findall(pages[refused]) == ["runs on Relay: upstream returned 400: quota exhausted"]
    assert cell.findall(pages[plain]) == []
