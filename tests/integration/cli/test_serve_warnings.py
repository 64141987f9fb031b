"""What ``relay serve`` warns about at boot (SPEC §1): Postgres without ``RELAY_REDIS_URL`` runs, but
says that rate limits, breakers and key selection are then per replica. Real processes on a fresh
Postgres database; the warning is read from the relay's JSON log."""

from __future__ import annotations

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
