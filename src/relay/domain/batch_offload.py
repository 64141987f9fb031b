"""A binding's ``batch_offload`` block (SPEC §22): whether a batch routed wholly to this binding may run
on the provider's own batch API instead of Relay's workers, from how many items, at what share of the
normal price.

Why a value of its own: the control plane validates it once when the catalog is written (a discount
outside 0–1, a ``min_items`` below 1 or an unknown mode is refused naming ``batch_offload.<field>``),
the snapshot carries it on each ``Binding``, and batch submission decides from it without parsing
anything — three layers that must agree on one meaning and one set of defaults. No I/O.

Absent (NULL on the binding row) means ``mode: never``: Relay runs every item itself (SPEC §10.6).

Invariants: ``min_items ≥ 1``; ``0 ≤ discount ≤ 1`` (the share of the binding's pricing charged per
offloaded item, so 0.5 is half price).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

OffloadMode = Literal["never", "native"]

#: The defaults SPEC §22 gives: offload nothing; when offloading, from 100 items, at half price.
DEFAULT_MIN_ITEMS = 100
DEFAULT_DISCOUNT = 0.5
#: Refuses nonsense, not tuning: no provider batch holds more than this many requests.
MAX_MIN_ITEMS = 1_000_000


class BatchOffload(BaseModel):
    """``{"mode": "never" | "native", "min_items": n, "discount": 0.0–1.0}``; every field optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: OffloadMode = "never"
    min_items: StrictInt = Field(default=DEFAULT_MIN_ITEMS, ge=1, le=MAX_MIN_ITEMS)
    discount: float = Field(default=DEFAULT_DISCOUNT, ge=0.0, le=1.0, allow_inf_nan=False)

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> BatchOffload:
        """The block a binding row stores (``bindings.batch_offload``: NULL or the validated object)."""
        return cls.model_validate(value) if value else NEVER

    @property
    def native(self) -> bool:
        return self.mode == "native"

    def offloads(self, items: int) -> bool:
        """Whether a batch of ``items`` items routed wholly to this binding goes to the provider."""
        return self.native and items >= self.min_items


#: The default (``mode: never``), shared so bindings without the block allocate nothing.
NEVER = BatchOffload()
