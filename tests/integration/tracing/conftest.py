"""A real OTLP/HTTP receiver per test (``tests.fixtures.otlp``)."""

from collections.abc import Iterator

import pytest

from tests.fixtures.otlp import OtlpReceiver, running_receiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    yield from running_receiver()


@pytest.fixture(autouse=True)
def prompt_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's own ``OTEL_BSP_SCHEDULE_DELAY`` (read by its batch processor, SPEC §18): export every
    50 ms instead of every 5 s, so a test waits for spans no longer than it must."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
