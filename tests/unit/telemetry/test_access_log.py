"""The access log (``relay.telemetry.access_log``): lines queued on the request path are written in one
batch, each the same JSON line the logger's handler writes, in order and with their fields; a full
queue and a stream that refuses the write count their dropped lines; ``warning`` writes nothing."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import uuid
from collections.abc import Iterator

import pytest

from relay.telemetry.access_log import AccessLog
from relay.telemetry.logs import JsonFormatter


class Writes(io.StringIO):
    """A stream that remembers how many writes it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


class Refusing(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("disk full")


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(f"relay.test.access.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger
    logger.handlers.clear()


def attach(logger: logging.Logger, stream: io.StringIO) -> None:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)


async def test_queued_lines_are_written_in_one_batch_with_their_fields(logger: logging.Logger) -> None:
    stream = Writes()
    attach(logger, stream)
    dropped: list[int] = []
    access = AccessLog(logger, on_drop=dropped.append, flush_after_s=0.01)
    for i in range(3):
        access.write({"request_id": f"req_{i}", "status": 200, "latency_ms": i, "model": "m"})
    assert stream.getvalue() == ""  # nothing written on the request path
    await asyncio.sleep(0.1)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["request_id"] for line in lines] == ["req_0", "req_1", "req_2"]
    assert lines[1]["status"] == 200 and lines[1]["latency_ms"] == 1 and lines[1]["model"] == "m"
    assert {line["message"] for line in lines} == {"request"}
    assert {line["level"] for line in lines} == {"info"}
    assert {line["logger"] for line in lines} == {logger.name}
    assert stream.writes == 1 and dropped == []


async def test_a_full_queue_counts_the_lines_it_drops(logger: logging.Logger) -> None:
    stream = Writes()
    attach(logger, stream)
    dropped: list[int] = []
    access = AccessLog(logger, on_drop=dropped.append, max_pending=2, flush_after_s=0.01)
    for i in range(5):
        access.write({"request_id": f"req_{i}"})
    assert sum(dropped) == 3
    access.flush()
    assert [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()] == ["req_0", "req_1"]


async def test_a_stream_that_refuses_the_batch_counts_every_line(logger: logging.Logger) -> None:
    attach(logger, Refusing())
    dropped: list[int] = []
    access = AccessLog(logger, on_drop=dropped.append)
    for i in range(4):
        access.write({"request_id": f"req_{i}"})
    access.flush()
    assert dropped == [4]


async def test_flush_writes_what_is_queued_at_once(logger: logging.Logger) -> None:
    stream = Writes()
    attach(logger, stream)
    access = AccessLog(logger, on_drop=lambda n: None, flush_after_s=60)
    access.write({"request_id": "req_last"})
    access.flush()  # shutdown does not wait for the timer
    assert json.loads(stream.getvalue())["request_id"] == "req_last"


def test_at_warning_the_access_log_is_off(logger: logging.Logger) -> None:
    logger.setLevel(logging.WARNING)
    assert AccessLog(logger, on_drop=lambda n: None).enabled() is False
    logger.setLevel(logging.INFO)
    assert AccessLog(logger, on_drop=lambda n: None).enabled() is True


async def test_drops_reach_the_relay_access_log_dropped_total_counter(logger: logging.Logger) -> None:
    from prometheus_client import CollectorRegistry

    from relay.telemetry.metrics import Metrics

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    attach(logger, Refusing())
    access = AccessLog(logger, on_drop=metrics.access_log_dropped.inc, max_pending=1)
    access.write({"request_id": "req_a"})
    access.write({"request_id": "req_b"})  # past the bound
    access.flush()  # refused by the stream
    assert registry.get_sample_value("relay_access_log_dropped_total") == 2


async def test_a_batched_json_line_is_the_line_the_formatter_writes(logger: logging.Logger) -> None:
    stream = Writes()
    attach(logger, stream)
    fields = {"request_id": "req_1", "status": 502, "model": "m\udc80" + "x" * 2000, "error": None}
    access = AccessLog(logger, on_drop=lambda n: None)
    access.write(dict(fields))
    access.flush()
    record = logger.makeRecord(logger.name, logging.INFO, "", 0, "request", (), None, extra=dict(fields))
    record.created = json_ts(stream.getvalue())
    assert stream.getvalue() == JsonFormatter().format(record) + "\n"


def json_ts(line: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(json.loads(line)["ts"]).timestamp()


async def test_console_lines_are_written_in_batches_too(logger: logging.Logger) -> None:
    from relay.telemetry.logs import ConsoleFormatter

    stream = Writes()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(ConsoleFormatter())
    logger.addHandler(handler)
    access = AccessLog(logger, on_drop=lambda n: None)
    access.write({"request_id": "req_a", "status": 200})
    access.write({"request_id": "req_b", "status": 404})
    access.flush()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and stream.writes == 1
    assert "INFO" in lines[0] and "request request_id=req_a status=200" in lines[0]
    assert lines[1].endswith("request request_id=req_b status=404")


async def test_the_shipped_handler_gets_lines_built_without_a_record_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``configure_logging``'s handler carries no filter (uvicorn's once-per-process filter sits on
    uvicorn's logger), so access lines take the record-free path (``JsonFormatter.info_line``): the
    same line the formatter would write."""
    from relay.telemetry.logs import configure_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging("info", "json")
    try:
        (handler,) = root.handlers
        assert isinstance(handler, logging.StreamHandler)
        stream = Writes()
        handler.setStream(stream)
        logger = logging.getLogger(f"relay.test.access.{uuid.uuid4().hex}")  # propagates to the root
        fields = {"request_id": "req_1", "status": 200}

        def no_records(self: JsonFormatter, record: logging.LogRecord) -> str:
            raise AssertionError("an access line went through a LogRecord")

        monkeypatch.setattr(JsonFormatter, "format", no_records)
        access = AccessLog(logger, on_drop=lambda n: None)
        access.write(dict(fields))
        access.flush()
        monkeypatch.undo()
        record = logger.makeRecord(logger.name, logging.INFO, "", 0, "request", (), None, extra=dict(fields))
        record.created = json_ts(stream.getvalue())
        assert stream.getvalue() == JsonFormatter().format(record) + "\n"
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


async def test_a_handler_with_another_filter_still_gets_records(logger: logging.Logger) -> None:
    """A filter Relay does not know may drop or change a line: it sees each line as a record."""
    stream = Writes()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(lambda record: getattr(record, "status", 0) != 404)
    logger.addHandler(handler)
    access = AccessLog(logger, on_drop=lambda n: None)
    access.write({"request_id": "req_a", "status": 200})
    access.write({"request_id": "req_b", "status": 404})
    access.flush()
    assert [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()] == ["req_a"]
