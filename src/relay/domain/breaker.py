"""A host's breaker tuning (SPEC §6, host field ``breaker``) as a value, with its bounds and defaults.

Why a value of its own: the control plane validates it (``HostSpec.breaker``), the snapshot carries it
on each ``Host``, and the shared state applies it inside one atomic step — three layers that must agree
on one meaning and one set of defaults. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The untuned breaker's backoff cap, seconds (SPEC §6: 1, 2, 4 … 60 s).
DEFAULT_MAX_OPEN_S = 60
#: Bounds a host may set. The upper ones only refuse nonsense: a threshold past a thousand failures or
#: a window or opening longer than a day is a typo, not a tuning.
MAX_THRESHOLD = 1000
MAX_WINDOW_S = 86_400
MAX_OPEN_S = 86_400


@dataclass(frozen=True, slots=True)
class BreakerTuning:
    """A 5xx or connection error opens a key only when it is the ``threshold``-th such failure of that
    key within ``window_s`` seconds (counted across replicas with Redis); the backoff ladder stops at
    ``max_open_s``. 401/403 and long 429s still open at once. The defaults are the untuned breaker:
    the first failure opens the key, for 1, 2, 4 … 60 s."""

    threshold: int = 1
    window_s: float = 10.0
    max_open_s: float = float(DEFAULT_MAX_OPEN_S)

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> BreakerTuning:
        """The tuning a host row stores (``hosts.breaker``: NULL or the validated object; a field left
        out takes its default)."""
        if not value:
            return DEFAULT_TUNING
        return cls(
            int(value.get("threshold", 1)),
            float(value.get("window_s", 10.0)),
            float(value.get("max_open_s", DEFAULT_MAX_OPEN_S)),
        )


#: The untuned breaker, shared so hosts without a ``breaker`` field allocate nothing.
DEFAULT_TUNING = BreakerTuning()
