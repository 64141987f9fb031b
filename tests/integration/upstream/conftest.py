"""Every upstream-client test runs on both event loops: asyncio's (in-process tests) and uvloop's
(``relay serve``), whose transports differ (uvloop's is no ``asyncio.Transport`` subclass)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

import pytest
import uvloop

from relay.upstream import Upstream

from .raw_server import RawServer


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
async def server() -> AsyncIterator[RawServer]:
    raw = RawServer()
    listener = await asyncio.start_server(raw.serve, "127.0.0.1", 0)
    raw.url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    try:
        yield raw
    finally:
        listener.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    client = Upstream(timeout_s=1.0, connect_timeout_s=1.0)
    await client.start()
    try:
        yield client
    finally:
        await client.close()
