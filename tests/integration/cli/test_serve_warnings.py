"""What ``relay serve`` writes at boot: its warnings (SPEC §1: Postgres without ``RELAY_REDIS_URL``
runs, but says that rate limits, breakers and key selection are then per replica; read from the JSON
log of real processes on a fresh Postgres database) and its console lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fixtures.live import live_redis_url

REDIS_WARNING = "RELAY_REDIS_URL is unset with Postgres"


def redis_warnings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if REDIS_WARNING in str(r.get("message", ""))]


def test_postgres_without_redis_warns_at_boot(postgres_url: str, relay_factory: Any) -> None:
    relay = relay_factory(postgres_url)
    warned = redis_warnings(relay.log_records())
    assert [r["level"] for r in warned] == ["warning"], relay.logs()
    assert "per replica" in warned[0]["message"]


def test_postgres_with_redis_does_not_warn(postgres_url: str, relay_factory: Any) -> None:
    relay = relay_factory(postgres_url, {"RELAY_REDIS_URL": live_redis_url()})
    assert relay.log_records(), relay.logs()  # it did log (the boot lines), just not this warning
    assert redis_warnings(relay.log_records()) == [], relay.logs()


def test_console_lines_carry_no_color_message_and_uvicorn_lines_once(
    tmp_path: Path, relay_factory: Any
) -> None:
    """SPEC §18's console format from a real ``relay serve`` (the JSON format: ``test_on_call.py``):
    uvicorn's lines lose their ``color_message`` and ANSI escapes, and a line of the two servers'
    shared lifecycle (inference and control run in one process) is written once, not once per server."""
    relay = relay_factory(f"sqlite:///{tmp_path / 'relay.db'}", {"RELAY_LOG_FORMAT": "console"})
    relay.stop()  # the shutdown lines too
    text = relay.logs()
    assert text.strip(), "the relay wrote nothing"
    assert "\x1b" not in text and "color_message" not in text, text
    for line in ("Started server process", "Shutting down", "Finished server process"):
        assert text.count(line) == 1, text
    assert relay.log_records() == [], text  # console lines, not JSON ones
