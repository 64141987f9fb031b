"""The usage rollup's table (SPEC §8 summaries, §16 overview): ``usage_rollup``, one row per UTC minute,
and one per UTC hour, and combination of the dimensions the usage summaries group and filter by. Part
of ``relay.store.tables``' metadata (the Alembic target).

Why two widths. Per minute alone, 14 days of traffic spread over many projects × models is nearly as
many rows as events (1 million events over 14 days with 150 active combinations: 990 000 rows); per
hour it is a few tens of thousands whatever the traffic. Summaries read hour rows for the whole hours
of their range, minute rows for the whole minutes around them, events for the partial minutes at the
edges; a per-minute grouping reads minute rows only.

Why these dimensions. Every ``group_by`` of the summary (source, model, project, team, policy, host,
credential; day, hour and minute from the bucket) and every filter except ``batch_id`` (status,
status class and ``error`` from ``status`` and ``outcome``; ``principal_id``, the self page's filter)
can be answered from these rows. ``batch_id`` is left out on purpose: one key per batch would multiply
the rows by the batches of each minute, and a batch's summary reads its events by the batch index
anyway. ``outcome`` is what the summary counts apart: 0 an answer, 1 an error (``usage.is_error``),
2 a cancelled batch item (``usage.is_cancelled``). Team, policy and principal follow from the
credential almost always, so they add columns, not rows.

Invariants. ``width`` is 1 (a minute row) or 60 (an hour row); ``minute`` is the row's start in whole
minutes since 1970-01-01T00:00Z (floored, so negative before 1970; a multiple of 60 for an hour row).
Every event is in exactly one row of each width. Each row holds the exact sums of the events it
covers: the usage writers add to it and the retention sweep subtracts from it in the transactions that
insert and delete those events (``relay.store.usage_rollup``), and a row whose ``requests`` reaches 0
is deleted. ``cost_nanos`` sums the priced events only; ``priced`` counts them (0: the summary's cost
is NULL).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, PrimaryKeyConstraint, SmallInteger, String, Table

from relay.store.columns import ID, metadata

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

usage_rollup = Table(
    "usage_rollup",
    metadata,
    Column("width", SmallInteger, nullable=False),
    Column("minute", BigInteger, nullable=False),
    Column("source", String(8), nullable=False),
    Column("project_id", ID, nullable=False),
    Column("team_id", ID, nullable=False),
    Column("policy_id", ID, nullable=False),
    Column("principal_id", ID, nullable=False),
    Column("credential_id", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("host", String(63), nullable=False),
    Column("status", Integer, nullable=False),
    Column("outcome", SmallInteger, nullable=False),
    *(Column(name, BigInteger, nullable=False) for name in SUMS),
    PrimaryKeyConstraint(*KEY),
    # A project's user reads the overview scoped to that project.
    Index("ix_usage_rollup_project_id", "project_id", "width", "minute"),
)
