"""A policy's ``batch`` block (SPEC §17): how batch items under the policy meet its limits.

Why a block of its own. §10.4's rule — an item that meets a spent limit fails — stays the default
(``pacing: "fail"``); a policy may instead pace its batches (``"wait"``), keep a share of every limit
for live traffic (``live_reserve``), cap how many of its batch items run at once across replicas
(``max_concurrency``) and let cross-shape items be translated like live requests (``translate``).

What it deliberately does not know: counters, workers, the database. It is a value: validated once
when the catalog is written, read by the limiter and the batch engine from the snapshot.

Invariant: :meth:`BatchPolicy.share` is exact — ``max(1, floor(limit × (1 − live_reserve)))``
computed in decimal arithmetic, so ``10 × (1 − 0.9)`` is 1, never 0.99… floored to 0.
"""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

Pacing = Literal["fail", "wait"]


class BatchPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pacing: Pacing = "fail"
    live_reserve: StrictFloat = Field(default=0.0, ge=0.0, le=0.9, allow_inf_nan=False)
    max_concurrency: StrictInt | None = Field(default=None, ge=1)
    translate: StrictBool = False

    @property
    def is_default(self) -> bool:
        return self == DEFAULT_BATCH_POLICY

    def share(self, limit: int) -> int:
        """A rule's limit as batch items see it (SPEC §17 "the batch share")."""
        if not self.live_reserve:
            return limit
        kept = Decimal(limit) * (1 - Decimal(str(self.live_reserve)))
        return max(1, int(kept.to_integral_value(rounding=ROUND_FLOOR)))


DEFAULT_BATCH_POLICY = BatchPolicy()
