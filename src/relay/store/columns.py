"""The metadata and column helpers every table module of the store shares (one naming convention, the
types that differ per dialect), so ``tables`` and ``batch_tables`` both build on them without importing
each other.
"""

from __future__ import annotations

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
