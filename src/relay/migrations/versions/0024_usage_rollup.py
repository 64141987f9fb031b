"""The usage rollup: ``usage_rollup``, per-minute and per-hour sums of the usage events, filled from
every event.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06

Frozen copy of ``usage_rollup`` in ``relay/store/rollup_tables.py`` (why these dimensions: that
module). One row per UTC minute (``width`` 1) and one per UTC hour (``width`` 60), ``minute`` their
start in whole minutes since 1970-01-01 (floored), per combination of source,
project, team, policy, principal, credential, model, host, status and outcome (0 answered, 1 error,
2 cancelled batch item), holding the event count, token sums, the priced events' cost sum and how
many were priced. The upgrade fills it from every existing event, one ``INSERT … SELECT … GROUP BY``
per width
(the same classification as ``relay.store.usage.is_error``/``is_cancelled``); from then on the usage
writers and the retention sweep keep it exact in their own transactions. The downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = (
    "width",
    "minute",
    "source",
    "project_id",
    "team_id",
    "policy_id",
    "principal_id",
    "credential_id",
    "model",
    "host",
    "status",
    "outcome",
)
SUMS = ("requests", "input_tokens", "output_tokens", "cached_input_tokens", "cost_nanos", "priced")
OUTCOME = (
    "CASE WHEN error_kind = 'cancelled' THEN 2"
    " WHEN status < 200 OR status >= 300 OR error_kind IS NOT NULL THEN 1 ELSE 0 END"
)
START = {
    # The minute's (hour's) start is a whole number of seconds: dividing its epoch by 60 is exact (and
    # floored before 1970 too).
    "postgresql": "CAST(EXTRACT(EPOCH FROM date_trunc('{unit}', ts AT TIME ZONE 'UTC')) / 60 AS BIGINT)",
    # SQLite stores these timestamps as UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'.
    "sqlite": "CAST(strftime('%s', {prefix}) AS INTEGER) / 60",
}
UNITS = {1: ("minute", "substr(ts, 1, 16)"), 60: ("hour", "substr(ts, 1, 14) || '00'")}


def upgrade() -> None:
    op.create_table(
        "usage_rollup",
        sa.Column("width", sa.SmallInteger(), nullable=False),
        sa.Column("minute", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("policy_id", sa.String(length=40), nullable=False),
        sa.Column("principal_id", sa.String(length=40), nullable=False),
        sa.Column("credential_id", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("host", sa.String(length=63), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.SmallInteger(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in SUMS),
        sa.PrimaryKeyConstraint(*KEY, name=op.f("pk_usage_rollup")),
    )
    op.create_index(
        "ix_usage_rollup_project_id", "usage_rollup", ["project_id", "width", "minute"], unique=False
    )
    dialect = op.get_bind().dialect.name
    dimensions = ", ".join(KEY[2:-1])
    for width, (unit, prefix) in UNITS.items():
        start = START[dialect].replace("{unit}", unit).replace("{prefix}", prefix)
        op.execute(
            f"INSERT INTO usage_rollup ({', '.join(KEY)}, {', '.join(SUMS)})"
            f" SELECT {width}, {start}, {dimensions}, {OUTCOME},"
            " COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cached_input_tokens),"
            " COALESCE(SUM(cost_nanos), 0), COUNT(cost_nanos)"
            f" FROM usage_events GROUP BY {start}, {dimensions}, {OUTCOME}"
        )


def downgrade() -> None:
    op.drop_index("ix_usage_rollup_project_id", table_name="usage_rollup")
    op.drop_table("usage_rollup")
