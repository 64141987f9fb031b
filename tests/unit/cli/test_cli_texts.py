"""What the demo and the batch CLI say, as pure functions: where the demo listens (truthfully, for each
kind of bind), the batch's derived state and its one-line summary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from relay.cli.batch import derived_state, exit_code, summary
from relay.cli.demo import banner, catalog_line
from relay.cli.serve import listening_on
from relay.config import load_settings


@pytest.mark.parametrize(
    ("bind", "says"),
    [
        ("127.0.0.1", "listening on     127.0.0.1 only: this machine (relay demo --bind 0.0.0.0 opens it"),
        (
            "0.0.0.0",
            "every interface (0.0.0.0): the control plane and /metrics are reachable from the network",
        ),
    ],
)
def test_the_demo_says_where_it_listens(bind: str, says: str) -> None:
    settings = load_settings({"RELAY_BIND": bind, "RELAY_PORT": "18080", "RELAY_CONTROL_PORT": "18081"})
    runtime: Any = SimpleNamespace(secrets=SimpleNamespace(admin_token_path=Path("relay-data/admin.token")))
    text = banner(settings, runtime, "http://127.0.0.1:9009", "19 objects created")
    assert says in text
    assert "export RELAY_URL=http://127.0.0.1:18080 RELAY_CONTROL_URL=http://127.0.0.1:18081" in text


def test_the_serve_log_says_a_wildcard_bind_is_every_interface() -> None:
    assert listening_on("0.0.0.0", 8080) == "0.0.0.0:8080 (every interface; here: http://127.0.0.1:8080)"
    assert listening_on("127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert listening_on("::", 8080) == "[::]:8080 (every interface; here: http://[::1]:8080)"


def test_catalog_line() -> None:
    fresh = [{"kind": "Team", "name": "demo", "action": "create"}]
    assert catalog_line(fresh, 1) == "1 objects created"
    later = [
        {"kind": "Team", "name": "demo", "action": "update", "changes": {"display_name": {}}},
        {"kind": "Model", "name": "m", "action": "create"},
        {"kind": "Host", "name": "h", "action": "unchanged"},
    ]
    line = catalog_line(later, 1)
    assert line.startswith("2 objects already there, kept as they are; 1 missing created")
    assert line.endswith("changed since, not reverted: Team demo (display_name)")


def view(status: str = "queued", completed_at: str | None = None, **counts: int) -> dict[str, Any]:
    return {"ID": "b_1", "Status": status, "CompletedAt": completed_at, "counts": counts}


def test_derived_state_and_summary() -> None:
    assert derived_state(view(available=3)) == "waiting"
    assert derived_state(view(available=2, running=1)) == "running"
    assert derived_state(view(available=2, completed=1)) == "running"
    assert derived_state(view(completed_at="t", completed=3)) == "finished"
    assert derived_state(view("cancelled", None, running=1, cancelled=2)) == "cancelled"
    assert summary(view(completed_at="t", completed=3)) == "b_1 finished: 3 completed"
    assert summary(view(completed_at="t", completed=1, discarded=5)) == (
        "b_1 finished: 1 completed, 5 failed; see the failures with: relay batch results b_1 --failed"
    )
    assert summary(view("cancelled", "t", completed=528, cancelled=4472)) == (
        "b_1 cancelled: 528 completed, 4472 cancelled"
    )
    assert exit_code({"completed": 3}) == 0
    assert exit_code({"completed": 1, "discarded": 5}) == 2 == exit_code({"cancelled": 1})
