"""Settings (SPEC §1): defaults, validation naming the variable, masking, and the CLI's behaviour."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from relay.config import ConfigError, load_settings
from tests.fixtures.relay_server import RELAY_BIN

GOOD_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def test_defaults_match_the_spec() -> None:
    s = load_settings({})
    assert (s.port, s.control_port, s.bind) == (8080, 8081, "0.0.0.0")
    assert s.database_url == "sqlite:///relay-data/relay.db" and s.is_embedded
    assert s.redis_url is None and s.migrate_on_boot is True
    assert (s.log_level, s.log_format) == ("info", "console")
    assert s.max_request_bytes == 32 * 1024 * 1024 and s.upstream_timeout_s == 300
    assert (s.batch_workers, s.batch_max_items, s.batch_max_bytes) == (16, 50_000, 200 * 1024 * 1024)
    assert (s.batch_item_timeout_s, s.batch_rescue_after_s, s.shutdown_grace_s) == (300, 900, 30)
    assert s.batch_payload_dir == "relay-batch-payloads" and s.batch_payload_group_readable is False
    assert s.instance_id  # <hostname>-<pid>


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("1", True), ("false", False), ("0", False)])
def test_payload_group_readable_is_a_boolean(raw: str, value: bool) -> None:
    assert load_settings({"RELAY_BATCH_PAYLOAD_GROUP_READABLE": raw}).batch_payload_group_readable is value


def test_control_port_off_and_case_insensitive_enums() -> None:
    s = load_settings({"RELAY_CONTROL_PORT": "off", "RELAY_LOG_FORMAT": "JSON", "RELAY_LOG_LEVEL": "DEBUG"})
    assert s.control_port is None and s.log_format == "json" and s.log_level == "debug"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"RELAY_PORT": "eighty"}, "RELAY_PORT"),
        ({"RELAY_PORT": "70000"}, "RELAY_PORT"),
        ({"RELAY_CONTROL_PORT": "0"}, "RELAY_CONTROL_PORT"),
        ({"RELAY_CONTROL_PORT": "8080"}, "RELAY_CONTROL_PORT"),
        ({"RELAY_DATABASE_URL": "mysql://x/y"}, "RELAY_DATABASE_URL"),
        ({"RELAY_DATABASE_URL": "::not a url::"}, "RELAY_DATABASE_URL"),
        ({"RELAY_DATABASE_URL": "postgresql://u@h/db"}, "RELAY_MASTER_KEY"),
        ({"RELAY_MASTER_KEY": "c2hvcnQ="}, "RELAY_MASTER_KEY"),
        ({"RELAY_MASTER_KEY": "!!!not base64!!!"}, "RELAY_MASTER_KEY"),
        ({"RELAY_REDIS_URL": "http://x"}, "RELAY_REDIS_URL"),
        ({"RELAY_LOG_FORMAT": "xml"}, "RELAY_LOG_FORMAT"),
        ({"RELAY_LOG_LEVEL": "loud"}, "RELAY_LOG_LEVEL"),
        ({"RELAY_BATCH_WORKERS": "-1"}, "RELAY_BATCH_WORKERS"),
        ({"RELAY_BATCH_ITEM_TIMEOUT_S": "1000"}, "RELAY_BATCH_RESCUE_AFTER_S"),
        ({"RELAY_MIGRATE_ON_BOOT": "maybe"}, "RELAY_MIGRATE_ON_BOOT"),
        ({"RELAY_BATCH_PAYLOAD_GROUP_READABLE": "group"}, "RELAY_BATCH_PAYLOAD_GROUP_READABLE"),
        ({"RELAY_ADMIN_TOKEN": "short"}, "RELAY_ADMIN_TOKEN"),
        ({"RELAY_UPSTREAM_TIMEOUT_S": "0"}, "RELAY_UPSTREAM_TIMEOUT_S"),
        ({"RELAY_BATCH_MAX_ITEMS": "1000001"}, "RELAY_BATCH_MAX_ITEMS"),
        ({"RELAY_BATCH_MAX_ITEMS": "0"}, "RELAY_BATCH_MAX_ITEMS"),
        ({"RELAY_BATCH_MAX_ITEMS": "-5"}, "RELAY_BATCH_MAX_ITEMS"),
        ({"RELAY_BATCH_MAX_ITEMS": "1e6"}, "RELAY_BATCH_MAX_ITEMS"),
        ({"RELAY_BATCH_MAX_ITEMS": "12.5"}, "RELAY_BATCH_MAX_ITEMS"),
        ({"RELAY_BATCH_MAX_ITEMS": "many"}, "RELAY_BATCH_MAX_ITEMS"),
    ],
)
def test_bad_values_name_the_variable_in_one_line(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    message = str(info.value)
    assert message.startswith(variable + ":"), message
    assert "\n" not in message


def test_batch_max_items_goes_up_to_a_million() -> None:
    assert load_settings({"RELAY_BATCH_MAX_ITEMS": "1000000"}).batch_max_items == 1_000_000
    assert load_settings({"RELAY_BATCH_MAX_ITEMS": "1"}).batch_max_items == 1


def test_postgres_with_master_key_is_accepted_and_masked() -> None:
    s = load_settings(
        {
            "RELAY_DATABASE_URL": "postgresql://relay:hunter2@db:5432/relay",
            "RELAY_MASTER_KEY": GOOD_KEY,
            "RELAY_REDIS_URL": "redis://:redispw@cache:6379/0",
            "RELAY_ADMIN_TOKEN": "admin-token-0123456789",
        }
    )
    masked = s.masked()
    text = repr(masked)
    for secret in ("hunter2", "redispw", GOOD_KEY, "admin-token-0123456789"):
        assert secret not in text
    assert masked["RELAY_DATABASE_URL"].startswith("postgresql://relay:")
    assert masked["RELAY_MASTER_KEY"] == "********"


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY_BIN, *args],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_relay_config_prints_masked_settings(tmp_path: Path) -> None:
    result = _run(
        ["config"],
        {"RELAY_DATABASE_URL": "postgresql://u:topsecret@h/db", "RELAY_MASTER_KEY": GOOD_KEY},
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "RELAY_PORT=8080" in result.stdout and "RELAY_DATABASE_URL=postgresql://u:***@h/db" in result.stdout
    )
    assert "topsecret" not in result.stdout and GOOD_KEY not in result.stdout


def test_bad_value_stops_serve_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    result = _run(["serve"], {"RELAY_PORT": "eighty"}, tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "RELAY_PORT" in lines[0]
    assert not (tmp_path / "relay-data").exists()


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("postgres://u@h:5432/db", "postgresql://u@h:5432/db"),
        ("POSTGRES://u@h/db", "postgresql://u@h/db"),
        ("postgres+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgresql://u@h/postgres", "postgresql://u@h/postgres"),
    ],
)
def test_postgres_urls_of_managed_consoles_are_accepted(given: str, taken: str) -> None:
    """``postgres://`` (Heroku, Render, Supabase, …): SQLAlchemy no longer knows the alias."""
    s = load_settings({"RELAY_DATABASE_URL": given, "RELAY_MASTER_KEY": GOOD_KEY})
    assert s.database_url == taken and s.is_postgres


def test_the_response_cache_bounds_default_to_64_mib_and_1_mib_and_are_validated() -> None:
    """SPEC §19: RELAY_CACHE_MAX_BYTES (64 MiB) and RELAY_CACHE_MAX_ENTRY_BYTES (1 MiB); a wrong value
    stops the start naming the variable."""
    from relay.config import Settings

    assert (Settings().cache_max_bytes, Settings().cache_max_entry_bytes) == (64 << 20, 1 << 20)
    for name, value in (("RELAY_CACHE_MAX_BYTES", "12"), ("RELAY_CACHE_MAX_ENTRY_BYTES", "lots")):
        with pytest.raises(ConfigError, match=name):
            load_settings({name: value})


def test_the_guardrail_stream_window_defaults_to_256_and_is_validated() -> None:
    """SPEC §20: RELAY_GUARDRAIL_STREAM_WINDOW (256 characters); 0 or a word stops the start naming it."""
    from relay.config import Settings

    assert Settings().guardrail_stream_window == 256
    assert load_settings({"RELAY_GUARDRAIL_STREAM_WINDOW": "64"}).guardrail_stream_window == 64
    for value in ("0", "wide"):
        with pytest.raises(ConfigError, match="RELAY_GUARDRAIL_STREAM_WINDOW"):
            load_settings({"RELAY_GUARDRAIL_STREAM_WINDOW": value})


def test_the_offload_poll_defaults_to_30_s_and_is_validated() -> None:
    """SPEC §22: RELAY_OFFLOAD_POLL_S (30 s); below 0.05 s, above an hour or not a number stops the start."""
    from relay.config import Settings

    assert Settings().offload_poll_s == 30.0
    assert load_settings({"RELAY_OFFLOAD_POLL_S": "0.2"}).offload_poll_s == 0.2
    for value in ("0", "3601", "often", "nan"):
        with pytest.raises(ConfigError, match="RELAY_OFFLOAD_POLL_S"):
            load_settings({"RELAY_OFFLOAD_POLL_S": value})
