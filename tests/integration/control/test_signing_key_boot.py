"""Replicas booting together on a new database create exactly one token signing key between them, and
none fails (on SQLite the second's read-to-write upgrade used to fail at once with "database is
locked"). Several engines on one database, as separate processes would be."""

from __future__ import annotations

import asyncio
import os

from sqlalchemy import func, select

from relay.control.services.tokens import load_signer
from relay.crypto.sealing import SecretBox
from relay.store import tables as t
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head


async def test_replicas_booting_together_share_one_signing_key(database_url: str) -> None:
    box = SecretBox(os.urandom(32))
    engines = [create_engine(database_url) for _ in range(4)]
    try:
        await upgrade_to_head(engines[0])
        signers = await asyncio.gather(*(load_signer(engine, box) for engine in engines))
        assert len({signer.key_id for signer in signers}) == 1
        async with engines[0].connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(t.signing_keys))).scalar_one() == 1
    finally:
        for engine in engines:
            await engine.dispose()
