"""The final-state counters of batches (``batch_counters``): :class:`FinalTally` gathers how many items a
transaction made ``completed``, ``discarded`` or ``cancelled`` per batch and adds them to the batch's
row in that same transaction, so the status view (SPEC §10.2: constant cost) reads one row instead of
counting a million items.

Why a tally, not a trigger. The queue's statements already know which items they finalised (their
``RETURNING`` or the rows they locked), and a trigger would fire per row: one bump per statement and
batch is the cheap way.

Invariants. Every transaction that makes an item final calls :meth:`FinalTally.write` (or, the
finalize on Postgres, writes :meth:`FinalTally.rows` in its completion check) after ``lock_batches``
for the same batches (finalize, cancel, expiry, rescue, a stop's put back): the
counter row is then only ever written by a holder of the batch's advisory lock on Postgres (SQLite's
``BEGIN IMMEDIATE`` serialises every writer), so two finishers never wait for each other's row in
two orders. Deleting a batch (retention) removes its row with it (foreign key, ``ON DELETE CASCADE``)
and never counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batches import FINAL_STATES
from relay.store import tables as t
from relay.store.driver import driver_connection

C = t.batch_counters
_COUNTED = ("completed", "discarded", "cancelled")


class FinalTally:
    """Items made final by one transaction, per batch and state, written with :meth:`write`."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, Counter[str]] = {}

    def add(self, batch_id: str, state: str, n: int = 1) -> None:
        if state not in FINAL_STATES:
            raise ValueError(f"{state!r} is not a final item state")
        if n:
            self._counts.setdefault(batch_id, Counter())[state] += n

    def add_all(self, items: Iterable[tuple[str, str]]) -> None:
        """Each ``(batch_id, state)`` once."""
        for batch_id, state in items:
            self.add(batch_id, state)

    async def write(self, conn: AsyncConnection) -> None:
        """Add the tally to the batches' counters in ``conn``'s transaction: one upsert per batch, in
        batch id order (on SQLite one statement for them all, on the driver itself)."""
        if conn.dialect.name == "sqlite":
            await self._write_sqlite(conn)
            return
        insert = pg_insert
        for batch_id in sorted(self._counts):
            counts = self._counts[batch_id]
            values = {state: counts.get(state, 0) for state in _COUNTED}
            statement = insert(C).values(batch_id=batch_id, **values)
            await conn.execute(
                statement.on_conflict_do_update(
                    index_elements=[C.c.batch_id],
                    set_={state: C.c[state] + statement.excluded[state] for state in _COUNTED},
                )
            )
        self._counts.clear()

    def rows(self) -> list[tuple[str, int, int, int]]:
        """The tally as ``(batch_id, completed, discarded, cancelled)`` rows in batch id order, emptied:
        for a statement that writes them itself (the finalize's completion check on Postgres,
        ``relay.store.batch_queue._txn.count_and_complete_on_driver``)."""
        out = [(b, c["completed"], c["discarded"], c["cancelled"]) for b, c in sorted(self._counts.items())]
        self._counts.clear()
        return out

    async def _write_sqlite(self, conn: AsyncConnection) -> None:
        """SQLite: every batch's upsert in one statement, its text on the driver (one hop to aiosqlite's
        thread instead of four per batch, each waiting for the GIL while the event loop is busy). SQLite
        has one writer at a time, so the row order of one statement cannot deadlock."""
        if not self._counts:
            return
        raw = await driver_connection(conn)
        batch_ids = sorted(self._counts)
        for start in range(0, len(batch_ids), _SQLITE_UPSERT_ROWS):
            chunk = batch_ids[start : start + _SQLITE_UPSERT_ROWS]
            params: list[object] = []
            for batch_id in chunk:
                counts = self._counts[batch_id]
                params += (batch_id, *(counts.get(state, 0) for state in _COUNTED))
            await raw.execute_fetchall(
                _SQLITE_UPSERT.format(rows=", ".join(["(?, ?, ?, ?)"] * len(chunk))), params
            )
        self._counts.clear()


_SQLITE_UPSERT = (
    "INSERT INTO batch_counters (batch_id, completed, discarded, cancelled) VALUES {rows}"
    " ON CONFLICT (batch_id) DO UPDATE SET completed = completed + excluded.completed,"
    " discarded = discarded + excluded.discarded, cancelled = cancelled + excluded.cancelled"
)
_SQLITE_UPSERT_ROWS = 1000  # batches per statement: 4 parameters each, far below SQLite's 32 766
