"""SPEC §18: W3C trace context in and out, parent-based sampling, a collector that is down or hangs,
the trace ids on JSON request lines, and nothing secret in any span."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.otlp import OtlpReceiver
from tests.integration.tracing.helpers import SECRET_HOST_KEY, server_and_attempts, traced

CHAT = {"messages": [{"role": "user", "content": "hello traced world"}]}
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACESTATE = "vendor=opaque-value,other=1"


def _upstream_headers(fake: FakeUpstream) -> dict[str, str]:
    return {k.lower(): v for k, v in fake.requests(limit=1)[-1]["headers"].items()}


async def test_incoming_traceparent_is_the_parent_and_each_upstream_call_names_its_attempt(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    async with traced(tmp_path, fake, receiver) as t:
        answer = await t.post(
            "/v1/chat/completions",
            {"model": "chat", **CHAT},
            traceparent=f"00-{PARENT_TRACE}-{PARENT_SPAN}-01",
            tracestate=TRACESTATE,
        )
        assert answer.status_code == 200, answer.text
        server, [attempt] = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert server.trace_id == PARENT_TRACE and server.parent_span_id == PARENT_SPAN
        assert attempt.trace_id == PARENT_TRACE
        sent = _upstream_headers(fake)
        assert sent["traceparent"] == f"00-{PARENT_TRACE}-{attempt.span_id}-01"
        assert sent["tracestate"] == TRACESTATE

        # Without one, the request starts a trace; failover: each call carries its own attempt's id.
        fake.reset()
        answer = await t.post("/v1/chat/completions", {"model": "flaky", **CHAT})
        server, attempts = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert server.parent_span_id == "" and len(attempts) == 2
        sent_parents = [r["headers"]["traceparent"] for r in fake.requests()]
        assert sent_parents == [f"00-{server.trace_id}-{a.span_id}-01" for a in attempts]
        assert all("tracestate" not in r["headers"] for r in fake.requests())

        # A malformed traceparent is ignored: a new trace, the request unharmed.
        answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT}, traceparent="00-nonsense")
        assert answer.status_code == 200
        server, _ = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert server.parent_span_id == "" and server.trace_id != PARENT_TRACE


async def test_sampling_zero_exports_nothing_but_a_sampled_parent_wins(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    async with traced(tmp_path, fake, receiver, otel_sample_ratio=0.0) as t:
        for _ in range(3):
            answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT})
            assert answer.status_code == 200
        # Unsampled, the context still propagates (flags 00), so downstream agrees not to sample.
        assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-00", _upstream_headers(fake)["traceparent"])
        # Parent-based: a caller's sampled traceparent is followed even at ratio 0.
        answer = await t.post(
            "/v1/chat/completions",
            {"model": "chat", **CHAT},
            traceparent=f"00-{PARENT_TRACE}-{PARENT_SPAN}-01",
        )
        spans = t.request_trace(answer.headers["x-relay-request-id"])
        assert {s.trace_id for s in spans} == {PARENT_TRACE}
        # ... and so is an unsampled one at ratio 1 (below, in a second relay).
    # Nothing but that one trace arrived.
    assert {s.trace_id for s in receiver.spans} == {PARENT_TRACE}
    receiver.clear()
    async with traced(tmp_path / "second", fake, receiver) as t:
        answer = await t.post(
            "/v1/chat/completions",
            {"model": "chat", **CHAT},
            traceparent=f"00-{PARENT_TRACE}-{PARENT_SPAN}-00",
        )
        assert answer.status_code == 200
        assert _upstream_headers(fake)["traceparent"].endswith("-00")
        marker = await t.post("/v1/chat/completions", {"model": "chat", **CHAT})
        t.request_trace(marker.headers["x-relay-request-id"])  # exported after the unsampled one
    assert PARENT_TRACE not in {s.trace_id for s in receiver.spans}


def _dropped(metrics_text: str) -> float:
    found = re.search(r"^relay_otel_spans_dropped_total (\S+)$", metrics_text, re.MULTILINE)
    assert found is not None, "relay_otel_spans_dropped_total is not exported"
    return float(found.group(1))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("fault", ["down", "hangs"])
async def test_a_collector_that_is_down_or_hangs_drops_spans_not_requests(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # the SDK's own: give up on an export after 1 s
    if fault == "hangs":
        receiver.hang()
        endpoint = receiver.endpoint
    else:
        endpoint = f"http://127.0.0.1:{_closed_port()}"
    async with traced(tmp_path, fake, receiver, otel_endpoint=endpoint) as t:
        # The catalog's control-plane writes were spans too, and they are dropped as well.
        expected = t.control_writes + 20  # + 10 server spans and 10 attempt spans below
        assert _dropped((await t.planes.control.get("/metrics")).text) <= t.control_writes
        for stream in (False, True):
            for _ in range(5):
                answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT, "stream": stream})
                assert answer.status_code == 200, answer.text
        deadline = 30.0
        while deadline > 0 and _dropped((await t.planes.control.get("/metrics")).text) < expected:
            await asyncio.sleep(0.1)
            deadline -= 0.1
        assert _dropped((await t.planes.control.get("/metrics")).text) == expected
    assert receiver.spans == []


async def request_line(caplog: pytest.LogCaptureFixture, request_id: str) -> logging.LogRecord:
    """The request's line: the access log writes it in a batch a moment after the answer."""
    deadline = asyncio.get_running_loop().time() + 5
    while not (lines := [r for r in caplog.records if getattr(r, "request_id", None) == request_id]):
        assert asyncio.get_running_loop().time() < deadline, f"no request line for {request_id}"
        await asyncio.sleep(0.02)
    [line] = lines
    return line


async def test_json_request_lines_carry_the_server_span_ids(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    async with traced(tmp_path, fake, receiver) as t:
        with caplog.at_level(logging.INFO, logger="relay.request"):
            answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT})
            refused = await t.post("/v1/chat/completions", {"model": "no-such", **CHAT})
            lines = [await request_line(caplog, r.headers["x-relay-request-id"]) for r in (answer, refused)]
        for response, line in zip((answer, refused), lines, strict=True):
            request_id = response.headers["x-relay-request-id"]
            server, _ = server_and_attempts(t.request_trace(request_id))
            assert (line.trace_id, line.span_id) == (server.trace_id, server.span_id)  # type: ignore[attr-defined]
    # Tracing off: no such fields.
    caplog.clear()
    async with traced(tmp_path / "off", fake, receiver, otel_endpoint=None) as t:
        with caplog.at_level(logging.INFO, logger="relay.request"):
            answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT})
            line = await request_line(caplog, answer.headers["x-relay-request-id"])
        assert not hasattr(line, "trace_id") and not hasattr(line, "span_id")


async def test_no_span_holds_a_key_a_token_or_message_text(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    secret_text = "the-password-is-swordfish"
    chat = {"messages": [{"role": "user", "content": secret_text}]}
    async with traced(tmp_path, fake, receiver, otel_headers="authorization=Bearer collector-cred-42") as t:
        relay_key = t.relay_key
        requests = [
            ("/v1/chat/completions", {"model": "chat", **chat}),
            ("/v1/chat/completions", {"model": "chat", **chat, "stream": True}),
            ("/v1/chat/completions", {"model": "flaky", **chat}),
            ("/v1/chat/completions", {"model": "dead", **chat}),
            ("/v1/chat/completions", {"model": "chat", **chat, "fake": {"status": 400}}),
            ("/anthropic/v1/messages", {"model": "anth", "max_tokens": 9, **chat}),
            ("/openai/v1/responses", {"model": "resp", "input": secret_text}),
            ("/v1/embeddings", {"model": "chat", "input": secret_text}),
            ("/v1/chat/completions", {"model": "nope", **chat}),
        ]
        ids = []
        for path, body in requests:
            ids.append((await t.post(path, body)).headers["x-relay-request-id"])
        spans = [s for request_id in ids for s in t.request_trace(request_id)]
    assert len(spans) >= len(requests) * 2 - 1
    needles = [secret_text, relay_key, relay_key[-12:], SECRET_HOST_KEY, "fail-500-a", "fail-503-c", "Bearer"]
    for span in spans:
        text = repr((span.name, span.attributes, span.resource))
        for needle in needles:
            assert needle not in text, (needle, span.name)
    # The collector headers reach the collector, as configured, and only it.
    assert receiver.posts and all(
        p.get("authorization") == "Bearer collector-cred-42" for p in receiver.posts
    )


async def test_the_batch_span_processor_reads_its_standard_settings(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_BSP_*: with a schedule delay of a minute and batches of 2, spans still arrive at once, in
    exports of exactly 2 (the processor exports as soon as a batch is full)."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    async with traced(tmp_path, fake, receiver) as t:
        assert t.control_writes % 2 == 0  # the catalog's spans fill whole batches: none waits a minute
        answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT})
        server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert receiver.batch_sizes and set(receiver.batch_sizes) == {2}
