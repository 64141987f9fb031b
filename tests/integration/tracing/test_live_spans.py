"""SPEC §18 on the live path: one SERVER span per request and one CLIENT span per upstream attempt,
as a real collector receives them (OTLP/HTTP protobuf decoded with opentelemetry-proto)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.otlp import OtlpReceiver
from tests.integration.tracing.helpers import server_and_attempts, traced

CHAT = {"messages": [{"role": "user", "content": "hello traced world"}]}
SHAPES = [
    # (path, body, model, operation, provider)
    ("/openai/v1/chat/completions", {"model": "chat", **CHAT}, "chat", "chat", "openai"),
    ("/anthropic/v1/messages", {"model": "anth", "max_tokens": 20, **CHAT}, "anth", "chat", "anthropic"),
    ("/openai/v1/responses", {"model": "resp", "input": "hello traced world"}, "resp", "chat", "openai"),
    ("/v1/generate", {"model": "chat", **CHAT}, "chat", "chat", "openai"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_each_shape_is_a_server_span_over_one_attempt(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver, stream: bool
) -> None:
    async with traced(tmp_path, fake, receiver) as t:
        for path, body, model, operation, provider in SHAPES:
            answer = await t.post(path, {**body, "stream": stream})
            assert answer.status_code == 200, answer.text
            spans = t.request_trace(answer.headers["x-relay-request-id"])
            server, attempts = server_and_attempts(spans)
            assert server.name == f"POST {path}"
            assert server.attributes["http.request.method"] == "POST"
            assert server.attributes["url.path"] == path
            assert server.attributes["http.response.status_code"] == 200
            assert server.attributes["relay.credential_kind"] == "key"
            assert server.attributes["relay.policy"] and server.attributes["relay.project_id"]
            assert not server.error
            assert not any(k.startswith("gen_ai.") for k in server.attributes)
            assert server.resource["service.name"] == "relay"
            [attempt] = attempts
            a = attempt.attributes
            assert attempt.name == f"{operation} up-{model}"
            assert a["gen_ai.operation.name"] == operation
            assert a["gen_ai.provider.name"] == provider
            assert a["gen_ai.request.model"] == f"up-{model}"
            assert a["relay.model"] == model and a["relay.host"] == "ok"
            assert a["relay.attempt"] == 1 and "relay.fallback_from" not in a
            assert a["relay.host_key_id"]
            assert a["server.address"] == "127.0.0.1"
            assert a["server.port"] == int(fake.base_url.rsplit(":", 1)[1])
            assert a["http.response.status_code"] == 200
            assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
            assert a["gen_ai.response.model"] == f"up-{model}"
            assert a["gen_ai.response.finish_reasons"]  # every shape, whole and streamed
            assert not attempt.error and "error.type" not in a


async def test_embeddings_attempt(tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver) -> None:
    async with traced(tmp_path, fake, receiver) as t:
        answer = await t.post("/v1/embeddings", {"model": "chat", "input": ["a", "b"]})
        assert answer.status_code == 200, answer.text
        server, [attempt] = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert server.name == "POST /v1/embeddings"
        assert attempt.name == "embeddings up-chat"
        assert attempt.attributes["gen_ai.operation.name"] == "embeddings"
        assert attempt.attributes["gen_ai.usage.input_tokens"] > 0


async def test_failover_fallback_and_upstream_error(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    async with traced(tmp_path, fake, receiver) as t:
        # A key answering 500, then the next key of the host: two attempts, the first failed.
        answer = await t.post("/v1/chat/completions", {"model": "flaky", **CHAT})
        assert answer.status_code == 200, answer.text
        server, attempts = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert [a.attributes["relay.attempt"] for a in attempts] == [1, 2]
        first, second = attempts
        assert first.error and first.attributes["error.type"] == "500"
        assert first.attributes["http.response.status_code"] == 500
        assert not second.error and second.attributes["http.response.status_code"] == 200
        assert first.attributes["relay.host_key_id"] != second.attributes["relay.host_key_id"]
        assert not server.error

        # A model whose only key fails falls back to another model: attempts count across both.
        answer = await t.post("/v1/chat/completions", {"model": "dead", **CHAT})
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-relay-fallback-from"] == "dead"
        server, attempts = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert [a.attributes["relay.attempt"] for a in attempts] == [1, 2]
        dead, fallback = attempts
        assert dead.error and dead.attributes["relay.model"] == "dead"
        assert "relay.fallback_from" not in dead.attributes
        assert fallback.attributes["relay.model"] == "chat"
        assert fallback.attributes["relay.fallback_from"] == "dead"
        assert fallback.name == "chat up-chat"

        # An upstream 4xx the caller gets as it is: a failed attempt, the server span not ERROR (4xx).
        answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT, "fake": {"status": 400}})
        assert answer.status_code == 400
        server, [attempt] = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert attempt.error and attempt.attributes["error.type"] == "400"
        assert server.attributes["http.response.status_code"] == 400 and not server.error

        # Every key failed: the caller gets a 5xx, so the server span is ERROR too.
        answer = await t.post("/v1/chat/completions", {"model": "chat", **CHAT, "fake": {"status": 503}})
        assert answer.status_code >= 500
        server, attempts = server_and_attempts(t.request_trace(answer.headers["x-relay-request-id"]))
        assert attempts and all(a.error and a.attributes["error.type"] == "503" for a in attempts)
        assert server.error


async def test_refused_request_has_no_attempt_span(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver
) -> None:
    async with traced(tmp_path, fake, receiver, max_request_bytes=4096) as t:
        unknown = await t.post("/v1/chat/completions", {"model": "no-such-model", **CHAT})
        assert unknown.status_code == 404
        spans = t.request_trace(unknown.headers["x-relay-request-id"])
        assert [s.kind for s in spans] == ["SERVER"]
        assert spans[0].attributes["http.response.status_code"] == 404 and not spans[0].error
        assert fake.stats()["requests"] == 0

        no_key = await t.planes.inference.post("/v1/chat/completions", json={"model": "chat", **CHAT})
        assert no_key.status_code == 401
        spans = t.request_trace(no_key.headers["x-relay-request-id"])
        assert [s.kind for s in spans] == ["SERVER"]
        assert "relay.project_id" not in spans[0].attributes

        # Refused before the body is read: a wrong method, a body over RELAY_MAX_REQUEST_BYTES.
        wrong = await t.planes.inference.get("/v1/chat/completions")
        big = await t.post(
            "/v1/chat/completions", {"model": "chat", "messages": [{"role": "user", "content": "x" * 5000}]}
        )
        assert (wrong.status_code, big.status_code) == (405, 413)
        for answer, method in ((wrong, "GET"), (big, "POST")):
            [span] = t.request_trace(answer.headers["x-relay-request-id"])
            assert span.kind == "SERVER" and span.name == f"{method} /v1/chat/completions"
            assert span.attributes["http.response.status_code"] == answer.status_code and not span.error
