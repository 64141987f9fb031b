"""The metadata and column helpers every table module of the store shares (one naming convention, the
types that differ per dialect), so ``tables`` and ``batch_tables`` both build on them without importing
each other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    ForeignKey,
    MetaData,
    String,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

ID = String(40)
NAME = String(63)
# jsonb on Postgres: comparable and indexable; plain JSON text on SQLite.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on both dialects (SQLite stores no offset and returns naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        # SQLite compares stored text: every value must be UTC, whatever zone the caller used.
        if value is not None and value.tzinfo is not None:
            return value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


_PROBES = (
    datetime(2026, 12, 7, 4, 42, 10, 300157, UTC),
    datetime(1999, 1, 2, 3, 4, 5, 0, UTC),  # no microseconds: still six digits
    datetime(2026, 6, 30, 23, 59, 59, 999999).astimezone(UTC),
    datetime(2026, 6, 30, 23, 59, 59),  # naive: written as it is
)
_BIND_STEPS: dict[tuple[str, str], Callable[[datetime | None], Any]] = {}


def utc_bind_step(dialect: Dialect) -> Callable[[datetime | None], Any]:
    """How a ``UTCDateTime`` is written by a statement whose text goes to the driver itself (the text
    the other statements compare, on SQLite). SQLAlchemy's own step, except on SQLite where it
    %-formats a dict of ten fields (3.6 µs per value): there the same text comes from one
    ``isoformat`` call (0.5 µs), used only when the two agree on probe values, so a SQLAlchemy that
    stores timestamps otherwise keeps its own step. One per dialect, built once."""
    step = _BIND_STEPS.get((dialect.name, dialect.driver))
    if step is None:
        step = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
        assert step is not None
        if dialect.name == "sqlite" and all(step(p) == _sqlite_utc_text(p) for p in _PROBES):
            step = _sqlite_utc_text
        _BIND_STEPS[(dialect.name, dialect.driver)] = step
    return step


def _sqlite_utc_text(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ", "microseconds")


def _ts(name: str, nullable: bool = False) -> Column:
    return Column(name, UTCDateTime(), nullable=nullable)


def _where(predicate: str) -> dict[str, Any]:
    """A partial index's predicate on both dialects."""
    return {"sqlite_where": text(predicate), "postgresql_where": text(predicate)}


def _common() -> list[Column]:
    """Columns every catalog object has (SPEC §2)."""
    return [
        Column("id", ID, primary_key=True),
        Column("name", NAME, nullable=False, unique=True),
        _ts("created_at"),
        _ts("updated_at"),
    ]


def _ref(column: str, table: str, *, nullable: bool, ondelete: str = "RESTRICT") -> Column:
    return Column(column, ID, ForeignKey(f"{table}.id", ondelete=ondelete), nullable=nullable, index=True)
