"""``relay.telemetry.logs`` in-process: the line each formatter writes for uvicorn's records (no
``color_message``, no ANSI escapes), the JSON keys SPEC §18 names, and uvicorn's per-server lifecycle
lines let through once per process — in both formats, through the real ``configure_logging``."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from relay.telemetry import logs

UVICORN = logging.getLogger("uvicorn.error")


@pytest.fixture
def captured(request: pytest.FixtureRequest) -> Iterator[io.StringIO]:
    """``configure_logging`` as ``relay serve`` runs it, writing to a buffer; the root logger restored."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    logs.configure_logging("info", request.param)
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    handler.setStream(buffer)
    yield buffer
    root.handlers[:] = handlers
    root.setLevel(level)


def uvicorn_lifecycle() -> None:
    """What uvicorn writes for each of the two servers ``relay serve`` runs (inference, control)."""
    for _server in ("inference", "control"):
        UVICORN.info(
            "Started server process [%d]",
            4242,
            extra={"color_message": "Started server process [\x1b[36m%d\x1b[0m]"},
        )
        UVICORN.info("Shutting down")
    UVICORN.warning("Invalid HTTP request received.")
    UVICORN.warning("Invalid HTTP request received.")  # not a lifecycle line: every one is written


@pytest.mark.parametrize("captured", ["json"], indirect=True)
def test_json_lines_carry_message_and_no_color_message(captured: io.StringIO) -> None:
    uvicorn_lifecycle()
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert [line["message"] for line in lines] == [
        "Started server process [4242]",
        "Shutting down",
        "Invalid HTTP request received.",
        "Invalid HTTP request received.",
    ]
    for line in lines:
        assert set(line) == {"ts", "level", "logger", "message"}, line  # no color_message, no msg
        assert line["logger"] == "uvicorn.error"
    assert "\x1b" not in captured.getvalue() and "\\u001b" not in captured.getvalue()


@pytest.mark.parametrize("captured", ["console"], indirect=True)
def test_console_lines_carry_no_color_message_either(captured: io.StringIO) -> None:
    uvicorn_lifecycle()
    text = captured.getvalue()
    assert text.count("Started server process [4242]") == 1
    assert text.count("Shutting down") == 1
    assert text.count("Invalid HTTP request received.") == 2
    assert "color_message" not in text and "\x1b" not in text


@pytest.mark.parametrize("captured", ["json"], indirect=True)
def test_structured_fields_are_kept_beside_the_message(captured: io.StringIO) -> None:
    logging.getLogger("relay.batches").info(
        "batch b_1 submitted", extra={"event": "batch_submitted", "items": 3}
    )
    [line] = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert (line["message"], line["event"], line["items"], line["level"]) == (
        "batch b_1 submitted",
        "batch_submitted",
        3,
        "info",
    )
