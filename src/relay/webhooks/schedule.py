"""When a failed webhook attempt is tried again (SPEC §10.10): ≈ 5 s, 30 s, 2 min, 10 min, 30 min, then
hourly, for 24 h from the event; after that the event is failed.

``scale`` (``RELAY_WEBHOOK_RETRY_SCALE``, default 1) multiplies every delay and the 24 h window alike, so
tests (and impatient staging setups) run the real schedule in miniature. Pure: no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

DELAYS_S: tuple[float, ...] = (5.0, 30.0, 120.0, 600.0, 1800.0)
THEN_EVERY_S = 3600.0
WINDOW_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.scale <= 1:
            raise ValueError("scale must be in (0, 1]")

    @property
    def window_s(self) -> float:
        return WINDOW_S * self.scale

    def delay_after(self, attempt: int) -> float:
        """Seconds from the end of failed attempt ``attempt`` (1-based) to the next one."""
        if attempt < 1:
            raise ValueError("attempts count from 1")
        base = DELAYS_S[attempt - 1] if attempt <= len(DELAYS_S) else THEN_EVERY_S
        return base * self.scale

    def retry_in(self, attempt: int, age_s: float) -> float | None:
        """The delay before the next attempt, or None when it would fall past the window (failed)."""
        delay = self.delay_after(attempt)
        return delay if age_s + delay <= self.window_s else None
