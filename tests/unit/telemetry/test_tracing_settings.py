"""SPEC §18's settings: tracing off unless RELAY_OTEL_ENDPOINT is set, the sample ratio (the standard
OTEL_TRACES_SAMPLER_ARG wins), bad values stopping the start with the variable named, and `relay config`
masking the collector headers; and the facade importing no OpenTelemetry code while tracing is off."""

from __future__ import annotations

import subprocess
import sys

import pytest

from relay.config import ConfigError, load_settings, unknown_variables
from relay.telemetry.tracing import start_tracing


class _Count:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


def test_off_by_default_and_on_with_an_endpoint() -> None:
    off = load_settings({})
    assert off.otel_endpoint is None and off.otel_ratio == 1.0 and off.otel_service_name == "relay"
    assert start_tracing(off, _Count()) is None
    on = load_settings({"RELAY_OTEL_ENDPOINT": "http://collector:4318/", "RELAY_OTEL_SAMPLE_RATIO": "0.25"})
    assert on.otel_endpoint == "http://collector:4318" and on.otel_ratio == 0.25
    # The standard variables: the sampler argument wins over Relay's own ratio.
    std = load_settings(
        {
            "RELAY_OTEL_ENDPOINT": "https://c.example",
            "RELAY_OTEL_SAMPLE_RATIO": "0.25",
            "OTEL_TRACES_SAMPLER_ARG": "0.5",
            "OTEL_SERVICE_NAME": "gateway-eu",
        }
    )
    assert std.otel_ratio == 0.5 and std.otel_service_name == "gateway-eu"
    # OTEL_EXPORTER_OTLP_ENDPOINT alone does not turn tracing on.
    assert load_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}).otel_endpoint is None


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"RELAY_OTEL_ENDPOINT": "collector:4318"}, "RELAY_OTEL_ENDPOINT"),
        ({"RELAY_OTEL_ENDPOINT": "grpc://collector:4317"}, "RELAY_OTEL_ENDPOINT"),
        ({"RELAY_OTEL_ENDPOINT": "http://"}, "RELAY_OTEL_ENDPOINT"),
        ({"RELAY_OTEL_SAMPLE_RATIO": "1.5"}, "RELAY_OTEL_SAMPLE_RATIO"),
        ({"RELAY_OTEL_SAMPLE_RATIO": "-0.1"}, "RELAY_OTEL_SAMPLE_RATIO"),
        ({"RELAY_OTEL_SAMPLE_RATIO": "nan"}, "RELAY_OTEL_SAMPLE_RATIO"),
        ({"OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_TRACES_SAMPLER_ARG": "half"}, "OTEL_TRACES_SAMPLER_ARG"),
    ],
)
def test_bad_values_stop_the_start_naming_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(env)
    assert str(raised.value).startswith(variable + ": ")


def test_config_shows_the_settings_and_masks_the_collector_headers() -> None:
    settings = load_settings(
        {
            "RELAY_OTEL_ENDPOINT": "http://collector:4318",
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer collector-secret-123",
        }
    )
    shown = settings.masked()
    assert shown["RELAY_OTEL_ENDPOINT"] == "http://collector:4318"
    assert shown["RELAY_OTEL_SAMPLE_RATIO"] == 1.0
    assert shown["OTEL_EXPORTER_OTLP_HEADERS"] == "********"
    assert shown["OTEL_SERVICE_NAME"] == "relay"
    assert "collector-secret-123" not in repr(shown)
    # Standard variables are not Relay typos: the boot warning does not list them.
    assert unknown_variables({"OTEL_SERVICE_NAME": "x", "RELAY_OTEL_ENDPOINT": "http://c"}) == []


def test_tracing_off_imports_no_opentelemetry_code() -> None:
    """Off costs nothing: building the whole runtime with tracing off imports neither the SDK's tracing
    nor the exporter (run in a fresh interpreter, since this test process may have imported them for
    other tests). redis-py imports the SDK's metrics module by itself once the SDK is installed; it
    records nothing unless its own observability is configured, which Relay never does."""
    code = (
        "import sys, tempfile, base64\n"
        "from relay.boot import build_runtime\n"
        "from relay.config import Settings\n"
        "d = tempfile.mkdtemp()\n"
        "build_runtime(Settings(database_url=f'sqlite:///{d}/r.db', data_dir=d, batch_workers=0,\n"
        "    master_key=base64.b64encode(bytes(32)).decode(), admin_token='a' * 20))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk.trace')\n"
        "    or m.startswith('opentelemetry.exporter') or m == 'relay.telemetry.tracing_export'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "4"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),  # the default batch is 512
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "-1"}, "OTEL_BSP_SCHEDULE_DELAY"),
    ],
)
def test_batch_processor_settings_the_sdk_refuses_stop_the_start_naming_them(
    env: dict[str, str], variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the SDK reads OTEL_BSP_* itself
    settings = load_settings({"RELAY_OTEL_ENDPOINT": "http://127.0.0.1:9"})
    with pytest.raises(ConfigError) as raised:
        start_tracing(settings, _Count())
    assert str(raised.value).startswith(variable + ": ")
