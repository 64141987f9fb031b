"""Request bodies spooled to a temporary file (``relay.http.spool``): small ones stay bytes, large ones
come back whole from a file that goes away when closed, and an oversized or cut body leaves nothing."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest

from relay.errors import PayloadTooLarge
from relay.http.spool import SpooledBody, spool_body
from relay.http.wire import ClientDisconnected


def receiver(chunks: list[bytes], *, disconnect: bool = False) -> Any:
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1 or disconnect}
        for i, c in enumerate(chunks)
    ]
    if disconnect:
        messages.append({"type": "http.disconnect"})

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    return receive


SCOPE: dict[str, Any] = {"headers": []}


async def test_a_small_body_stays_in_memory() -> None:
    body = await spool_body(receiver([b"ab", b"cd"]), SCOPE, 100, in_memory=10)
    assert body == b"abcd"


async def test_a_large_body_is_read_back_whole_from_a_file_that_goes_away() -> None:
    chunks = [os.urandom(300_000) for _ in range(10)]
    body = await spool_body(receiver(chunks), SCOPE, 10 << 20, in_memory=1 << 20)
    assert isinstance(body, SpooledBody) and body.size == 3_000_000
    whole = b"".join(chunks)
    with body.open() as reader:
        assert reader.read() == whole
    with body.open() as reader:  # every reader starts at the first byte
        assert reader.read(5) == whole[:5]
    assert body.sha256(b"route\0") == hashlib.sha256(b"route\0" + whole).hexdigest()
    fd = body._file.fileno()
    assert os.readlink(f"/proc/self/fd/{fd}").endswith("(deleted)")  # never named on disk
    body.close()


async def test_over_the_limit_is_413_naming_the_setting() -> None:
    with pytest.raises(PayloadTooLarge, match="RELAY_BATCH_MAX_BYTES"):
        await spool_body(
            receiver([b"x" * 600_000] * 4),
            SCOPE,
            2_000_000,
            in_memory=1 << 19,
            setting="RELAY_BATCH_MAX_BYTES",
        )
    with pytest.raises(PayloadTooLarge):
        await spool_body(receiver([b"x"]), {"headers": [(b"content-length", b"999")]}, 100)


async def test_a_disconnect_mid_body_raises() -> None:
    with pytest.raises(ClientDisconnected):
        await spool_body(receiver([b"x" * 700_000] * 3, disconnect=True), SCOPE, 10 << 20, in_memory=1 << 19)
