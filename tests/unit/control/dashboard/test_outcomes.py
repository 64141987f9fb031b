"""A batch's state says how it ended (SPEC §16): completed, completed with failures (the failed share
visible), cancelled, expired, in progress — a 1 999-of-2 000-failed batch is never a green "completed"."""

from __future__ import annotations

from typing import Any

import pytest

from relay.control.dashboard.outcomes import BAR_WIDTH, outcome, segments, summary


def batch(state: str, total: int, **counts: int) -> dict[str, Any]:
    return {"state": state, "total_items": total, "counts": counts}


@pytest.mark.parametrize(
    ("b", "key", "label", "detail"),
    [
        (batch("completed", 2000, completed=2000), "completed", "completed", ""),
        (
            batch("completed", 2000, completed=1, discarded=1999),
            "failures",
            "completed with failures",
            "1,999 of 2,000 failed (99.95%)",
        ),
        (
            batch("completed", 2000, completed=1999, discarded=1),
            "failures",
            "completed with failures",
            "1 of 2,000 failed (0.05%)",
        ),
        (batch("cancelled", 10, completed=3, cancelled=7), "cancelled", "cancelled", ""),
        (batch("completed", 10, completed=4, cancelled=6), "expired", "expired", ""),
        (
            batch("completed", 10, completed=4, discarded=1, cancelled=5),
            "expired",
            "expired",
            "1 of 10 failed (10%)",
        ),
        (batch("in_progress", 10, completed=2, running=1, available=7), "in_progress", "in progress", ""),
    ],
)
def test_each_outcome(b: dict[str, Any], key: str, label: str, detail: str) -> None:
    found = outcome(b)
    assert (found.key, found.label, found.detail) == (key, label, detail)


def test_the_failed_share_is_visible_in_the_bar() -> None:
    parts = segments(batch("completed", 2000, completed=1, discarded=1999))
    assert [(p.state, p.items) for p in parts] == [("completed", 1), ("discarded", 1999)]
    assert parts[1].width == pytest.approx(BAR_WIDTH * 1999 / 2000)
    assert parts[0].width >= 1  # one item of 2 000 still shows
    assert (
        summary(batch("completed", 2000, completed=1, discarded=1999)) == "1 completed, 1,999 failed of 2,000"
    )
