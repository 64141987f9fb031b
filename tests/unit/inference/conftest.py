"""``InferenceApp`` and ``LiveHandler`` in-process: the app ``boot`` builds, called through
``httpx.ASGITransport`` (no socket to Relay), over a hand-built catalog, the real request core on
in-memory state and the session's real fake upstream.

``plane`` is a :class:`LivePlane` per test: ``client`` speaks to the app, ``catalog`` is its catalog
(change records, then :meth:`LivePlane.refresh`), :meth:`LivePlane.events` the usage events the real
``UsageWriter`` wrote to a migrated SQLite database (one per module, emptied per test).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.inference.app import InferenceApp
from relay.inference.live import LiveHandler
from relay.inference.recording import LiveRecorder
from relay.snapshot import Snapshot
from relay.store import tables as t
from relay.usage.writer import UsageWriter
from tests.fixtures.databases import emptied_engine, migrate_database
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.planes import CHAT_MODEL, PlaneCatalog, RequestCore, plane_catalog, request_core


@dataclass
class LivePlane:
    catalog: PlaneCatalog
    core: RequestCore
    writer: UsageWriter
    engine: AsyncEngine
    current: Snapshot
    client: httpx.AsyncClient = field(init=False)

    def app(self) -> InferenceApp:
        """The inference app as ``boot`` builds it, serving :attr:`current`."""
        live = LiveHandler(
            snapshot=self.snapshot,
            pipeline=self.core.pipeline,
            recorder=LiveRecorder(self.writer, self.core.metrics),
        )
        return InferenceApp(
            live=live,
            snapshot=self.snapshot,
            database_ok=self._database_ok,
            max_request_bytes=1 << 20,
            metrics=self.core.metrics,
        )

    def snapshot(self) -> Snapshot:
        return self.current

    @staticmethod
    async def _database_ok() -> bool:
        return True

    def refresh(self) -> None:
        """Serve the catalog's records as they are now (a reload after a control-plane change)."""
        self.current = self.catalog.snapshot()

    async def post(
        self, path: str, body: dict[str, Any], key: str | None = None, **headers: str
    ) -> httpx.Response:
        auth = {"authorization": f"Bearer {key or self.catalog.key}"}
        return await self.client.post(path, json=body, headers={**auth, **headers})

    async def events(self) -> list[dict[str, Any]]:
        """Every usage event recorded so far, oldest first (the writer is flushed and stopped: call once,
        after the requests)."""
        await self.writer.start()
        await self.writer.stop()
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(t.usage_events).order_by(t.usage_events.c.ts))).mappings()
            return [dict(row) for row in rows]


@pytest.fixture(scope="module")
def usage_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('inference') / 'relay.db'}"
    asyncio.run(migrate_database(url))
    return url


@pytest.fixture
async def plane(fake: FakeUpstream, usage_database: str) -> AsyncIterator[LivePlane]:
    catalog = plane_catalog(fake.base_url)
    async with (
        emptied_engine(usage_database, (t.payloads, t.usage_events, t.usage_rollup)) as engine,
        request_core() as core,
    ):
        writer = UsageWriter(engine, core.registry, flush_interval_s=0.01)
        plane = LivePlane(catalog, core, writer, engine, catalog.snapshot())
        transport = httpx.ASGITransport(app=plane.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as plane.client:
            yield plane


CHAT_PATH = "/v1/chat/completions"
MESSAGES_PATH = "/anthropic/v1/messages"


def chat(model: str = CHAT_MODEL, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello there"}], **fields}


def message(model: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "hello there"}],
        **fields,
    }


def openai_error(response: httpx.Response, status: int, code: str, kind: str | None = None) -> dict[str, Any]:
    """Relay's own error in the OpenAI shape (``{"error": {"type", "code", "message"}}``)."""
    assert response.status_code == status, response.text
    assert response.headers["x-relay-request-id"]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "code", "message"}, body
    assert body["error"]["code"] == code and body["error"]["message"], body
    if kind is not None:
        assert body["error"]["type"] == kind, body
    return dict(body["error"])


def anthropic_error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """Relay's own error in the Anthropic shape (``{"type": "error", "error": {"type", "message"}}``)."""
    assert response.status_code == status, response.text
    assert response.headers["x-relay-request-id"]
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == kind, body
    return dict(body["error"])
