"""The retention settings (SPEC §17): ``RELAY_BATCH_RETENTION_DAYS`` and ``RELAY_USAGE_RETENTION_DAYS``
are whole numbers of days (0 = keep forever, the default), ``RELAY_RETENTION_SWEEP_S`` a positive
interval (3600); anything else stops the start in one line naming the variable; ``relay config`` shows
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import ConfigError, load_settings
from tests.unit.test_config import _run


def test_retention_defaults_keep_everything() -> None:
    settings = load_settings({})
    assert (settings.batch_retention_days, settings.usage_retention_days) == (0, 0)
    assert settings.retention_sweep_s == 3600
    chosen = load_settings(
        {
            "RELAY_BATCH_RETENTION_DAYS": "30",
            "RELAY_USAGE_RETENTION_DAYS": " 90",
            "RELAY_RETENTION_SWEEP_S": "60",
        }
    )
    assert (chosen.batch_retention_days, chosen.usage_retention_days, chosen.retention_sweep_s) == (
        30,
        90,
        60,
    )


@pytest.mark.parametrize("variable", ["RELAY_BATCH_RETENTION_DAYS", "RELAY_USAGE_RETENTION_DAYS"])
@pytest.mark.parametrize("raw", ["-1", "1.5", "7d", "", "1e3", "true", "99999999"])
def test_bad_retention_days_name_the_variable(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({variable: raw})
    message = str(info.value)
    assert message.startswith(variable + ":") and "\n" not in message, message


@pytest.mark.parametrize("raw", ["0", "-5", "inf", "nan", "hourly"])
def test_bad_sweep_interval_names_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"RELAY_RETENTION_SWEEP_S": raw})
    assert str(info.value).startswith("RELAY_RETENTION_SWEEP_S:")


def test_a_bad_retention_stops_serve_and_config_shows_the_settings(tmp_path: Path) -> None:
    result = _run(["serve"], {"RELAY_BATCH_RETENTION_DAYS": "-3"}, tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].count("RELAY_BATCH_RETENTION_DAYS") == 1, lines
    assert not (tmp_path / "relay-data").exists()
    shown = _run(["config"], {"RELAY_USAGE_RETENTION_DAYS": "14"}, tmp_path)
    assert shown.returncode == 0, shown.stderr
    for line in (
        "RELAY_BATCH_RETENTION_DAYS=0",
        "RELAY_USAGE_RETENTION_DAYS=14",
        "RELAY_RETENTION_SWEEP_S=3600",
    ):
        assert line in shown.stdout, shown.stdout
