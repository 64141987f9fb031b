"""Bytes on disk per batch item, for both payload stores (SPEC §10.7; sizing in docs/deployment.md §5).

It submits ``--items`` chat-sized items (request bodies of about ``--request-bytes``) through Relay's own
payload stores and batch store, completes every item with a response body of about
``--response-bytes`` (as the worker pool does: the file store appends and flushes, the database store
writes the body in the completing transaction), then measures what stayed:

- ``files``: the blocks the batch's directory takes on disk (``st_blocks``, so filesystem rounding is
  in), plus what the batch's rows add to the database;
- ``database``: what the database grew by (SQLite: the file after a WAL checkpoint; Postgres:
  ``pg_total_relation_size`` of the tables, indexes and TOAST included, after ``VACUUM``).

Then it deletes the batch with the one ``BatchDeleter`` (SPEC §17) and measures again: the batch
directories left (none) and how much smaller the database got. A SQLite file does not shrink on
delete (its free pages are reused by what is written next); Postgres gives back what ``VACUUM`` can
truncate, the rest is reused. The usage events stay (retention keeps them), so the database keeps
roughly their share of the growth.

Usage: ``python bench/payload_volume.py [--items 5000] [--postgres postgresql://…/admin_db]``; with
``--postgres`` it also runs on a fresh database created through that admin connection (and dropped).
Nothing here asserts: it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from relay.batches.deleter import BatchDeleter  # noqa: E402
from relay.domain.ids import mint_id  # noqa: E402
from relay.payloads.base import PayloadStores  # noqa: E402
from relay.payloads.database import DatabaseStore  # noqa: E402
from relay.payloads.files import FileStore  # noqa: E402
from relay.store.batch_queue import BatchStore, FinalItem  # noqa: E402
from relay.store.engine import create_engine  # noqa: E402
from relay.store.migrate import upgrade_to_head  # noqa: E402
from relay.telemetry.metrics import RetentionMetrics  # noqa: E402
from relay.usage.event import UsageEvent  # noqa: E402

GROUP = 500  # items claimed, started and completed together
TABLES = ("batches", "batch_items", "payload_chunks", "usage_events")


def request_body(i: int, size: int) -> bytes:
    words = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[: max(size - 120, 1)]
    return b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"%d %s"}]}' % (i, words.encode())


def response_body(i: int, size: int) -> bytes:
    words = ("consectetur adipiscing elit " * (size // 28 + 1))[: max(size - 200, 1)]
    return (
        b'{"id":"chatcmpl-%d","object":"chat.completion","choices":[{"index":0,"message":{"role":'
        b'"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":200,'
        b'"completion_tokens":300,"total_tokens":500}}' % (i, words.encode())
    )


def event(batch_id: str, idx: int) -> UsageEvent:
    return UsageEvent(
        id=mint_id("ue"),
        ts=datetime.now(UTC),
        request_id=f"req_{uuid.uuid4().hex}",
        source="batch",
        status=200,
        inbound_shape="openai",
        latency_ms=1,
        policy_id="pol_bench",
        project_id="prj_bench",
        team_id="tm_bench",
        principal_kind="serviceaccount",
        principal_id="sa_bench",
        credential_kind="key",
        credential_id="rk_bench",
        batch_id=batch_id,
        batch_idx=idx,
    )


def batch_row(batch_id: str, store: str) -> dict[str, Any]:
    return {
        "id": batch_id,
        "created_at": datetime.now(UTC),
        "owner": "ab" * 32,
        "key_hash": "ab" * 32,
        "token_claims": None,
        "policy_id": "pol_bench",
        "policy_name": "bench",
        "project_id": "prj_bench",
        "team_id": "tm_bench",
        "principal_kind": "serviceaccount",
        "principal_id": "sa_bench",
        "credential_kind": "key",
        "credential_id": "rk_bench",
        "inbound_shape": "openai",
        "payload_store": store,
    }


def blocks(path: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in [*names, "."]:
            total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
    return total


async def database_bytes(engine: Any, sqlite_file: Path | None) -> int:
    if sqlite_file is not None:
        async with engine.connect() as conn:
            await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        return await asyncio.to_thread(os.path.getsize, sqlite_file)
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in TABLES:
            await conn.execute(text(f"VACUUM {table}"))
        sizes = [
            (await conn.execute(text(f"SELECT pg_total_relation_size('{table}')"))).scalar_one()
            for table in TABLES
        ]
    return int(sum(sizes))


async def submit_and_complete(
    engine: Any, stores: PayloadStores, batches: BatchStore, items: int, req: int, resp: int
) -> str:
    batch_id = mint_id("b")
    store = stores.current
    await store.write_requests(batch_id, (request_body(i, req) for i in range(items)))
    await batches.insert_batch(batch_row(batch_id, store.name), items)
    while claimed := await batches.claim("bench", GROUP):
        keys = [(c.batch_id, c.idx) for c in claimed]
        await batches.start("bench", keys)
        kept = {c.idx: store.keep_response(batch_id, c.idx, response_body(c.idx, resp)) for c in claimed}
        await store.flush()
        finals = [
            FinalItem(batch_id, idx, "completed", 200, None, event(batch_id, idx), kept[idx].ref)
            for idx in kept
        ]

        async def save(conn: Any, done: list[FinalItem], kept: dict[int, Any] = kept) -> None:
            await store.save_responses(conn, [(f.batch_id, f.idx, kept[f.idx]) for f in done])

        await batches.finalize_many("bench", finals, save)
    return batch_id


async def measure(url: str, store_name: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    engine = create_engine(url)
    sqlite_file = Path(make_url(url).database or "") if url.startswith("sqlite") else None
    try:
        await upgrade_to_head(engine)
        payload_dir = workdir / f"payloads-{store_name}"
        stores = PayloadStores(FileStore(payload_dir), DatabaseStore(engine), store_name)
        batches = BatchStore(engine)
        # A first batch warms the database files up (their first pages), so growth is the bodies'.
        warm = await submit_and_complete(engine, stores, batches, 50, args.request_bytes, args.response_bytes)
        db_before = await database_bytes(engine, sqlite_file)
        batch_id = await submit_and_complete(
            engine, stores, batches, args.items, args.request_bytes, args.response_bytes
        )
        db_after = await database_bytes(engine, sqlite_file)
        disk = blocks(payload_dir / batch_id) if (payload_dir / batch_id).exists() else 0
        deleter = BatchDeleter(engine, stores, RetentionMetrics(CollectorRegistry()))
        started = time.perf_counter()
        await deleter.delete(batch_id)
        delete_s = time.perf_counter() - started
        await deleter.delete(warm)
        db_deleted = await database_bytes(engine, sqlite_file)
        left = sum(1 for p in payload_dir.iterdir() if p.name.startswith("b_")) if payload_dir.exists() else 0
        stores.close()
        return {
            "store": store_name,
            "database": "sqlite" if sqlite_file else "postgres",
            "per_item": (db_after - db_before + disk) / args.items,
            "db_per_item": (db_after - db_before) / args.items,
            "files_per_item": disk / args.items,
            "raw_per_item": (args.request_bytes + args.response_bytes),
            "after_delete_files": left,
            "after_delete_db_smaller": db_after - db_deleted,
            "deleted_per_s": args.items / delete_s,
        }
    finally:
        await engine.dispose()


async def run_postgres(
    admin: str, store_name: str, workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    name = f"relay_bench_{uuid.uuid4().hex[:10]}"
    admin_engine = create_engine(admin)
    try:
        async with admin_engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(admin).set(database=name).render_as_string(hide_password=False)
        try:
            return await measure(url, store_name, workdir, args)
        finally:
            async with admin_engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    finally:
        await admin_engine.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=5_000)
    parser.add_argument("--request-bytes", type=int, default=1_000)
    parser.add_argument("--response-bytes", type=int, default=1_500)
    parser.add_argument("--postgres", help="admin URL of a Postgres server (a database is created)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="relay-payload-volume-") as tmp:
        workdir = Path(tmp)
        for store_name in ("files", "database"):
            rows.append(await measure(f"sqlite:///{workdir / f'{store_name}.db'}", store_name, workdir, args))
            if args.postgres:
                rows.append(await run_postgres(args.postgres, store_name, workdir, args))
    print(f"{args.items} items, bodies ≈ {args.request_bytes} B request + {args.response_bytes} B response")
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min)")
    print(
        "store     database  bytes/item  (database  files)  raw bodies"
        "  after delete: batch dirs, db smaller by  deleted items/s"
    )
    for r in rows:
        print(
            f"{r['store']:<9} {r['database']:<9} {r['per_item']:>10.0f}  ({r['db_per_item']:>8.0f} "
            f"{r['files_per_item']:>6.0f})  {r['raw_per_item']:>10}  {r['after_delete_files']:>10}, "
            f"{r['after_delete_db_smaller'] / args.items:>6.0f} B/item  {r['deleted_per_s']:>8.0f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
