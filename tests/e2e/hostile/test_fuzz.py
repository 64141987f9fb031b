"""A bounded fuzz run over both planes (hypothesis, against one real ``relay serve``): whatever is
sent — deep or malformed JSON, lone surrogates, huge or odd numbers, wrong types, crafted query
parameters, any credential or none — the answer is never a 5xx, always JSON with a request id, and
afterwards the relay is healthy and still records usage.

Bounded: a fixed number of examples per plane, derandomized (the same inputs every run, so a failure
reproduces), no example database on disk.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.inference.app import INFERENCE_ROUTES
from tests.e2e.hostile.test_reproducers import still_recording
from tests.fixtures.live import CHAT_MODEL, MESSAGES_MODEL, Gateway
from tests.fixtures.relay_server import ADMIN_TOKEN

EXAMPLES = 250
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- values --------------------------------------------------------------------------------------------

text = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),  # lone surrogates
    st.text(st.characters(categories=["Cc", "Zs", "So"]), max_size=10),
    st.sampled_from(["", " ", "\x00", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "*"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True).encode()  # surrogates as \\udxxx escapes: valid JSON


@st.composite
def deep_json(draw: st.DrawFn) -> bytes:
    levels = draw(st.integers(min_value=100, max_value=3000))
    opener = draw(st.sampled_from(["[", '{"a":']))
    closer = "]" if opener == "[" else "}"
    return f'{{"model": "{CHAT_MODEL}", "messages": [], "x": {opener * levels}1{closer * levels}}}'.encode()


def mutated(raw: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.just(raw),
        st.integers(min_value=0, max_value=max(0, len(raw) - 1)).map(lambda n: raw[:n]),  # truncated
        st.binary(max_size=40).map(lambda junk: raw + junk),
    )


@st.composite
def inference_bodies(draw: st.DrawFn) -> bytes:
    model = draw(st.one_of(st.sampled_from([CHAT_MODEL, MESSAGES_MODEL]), text, json_values))
    body: dict[str, Any] = {
        "model": model,
        "messages": draw(
            st.one_of(
                json_values,
                st.lists(st.fixed_dictionaries({"role": text, "content": json_values}), max_size=3),
            )
        ),
    }
    body.update(
        draw(
            st.dictionaries(
                st.sampled_from(["stream", "max_tokens", "input", "shape", "requests", "system", "n"]),
                json_values,
                max_size=3,
            )
        )
    )
    raw = dumps(body if draw(st.booleans()) else json_values.example() if False else body)
    return draw(st.one_of(mutated(raw), deep_json(), st.binary(max_size=200), json_values.map(dumps)))


# -- answers -------------------------------------------------------------------------------------------


NOT_ERRORS = ("text/event-stream", "application/x-ndjson", "text/html", "text/plain; version=")


def check_answer(response: httpx.Response, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.text[:300]}"
    assert len(response.headers.get("x-relay-request-id", "")) == 32, what
    if response.status_code == 204:
        return
    content_type = response.headers.get("content-type", "")
    if content_type.startswith(
        ("text/event-stream", "application/x-ndjson", "text/html", "text/plain; version=")
    ):
        return  # a real stream, JSONL results, the docs page or /metrics: not errors
    assert content_type.startswith("application/json"), f"{what}: {content_type} {response.text[:200]}"
    response.json()


# -- the inference plane -------------------------------------------------------------------------------

INFERENCE_PATHS = [*sorted(INFERENCE_ROUTES), "/v1/batches", "/v1/batches/b_01", "/v1/models", "/v1/nope"]


@pytest.mark.timeout(300)
def test_fuzz_the_inference_plane(hostile_sqlite: Gateway) -> None:
    gw = hostile_sqlite
    credentials = st.sampled_from([gw.key, None, "sk-relay-" + "x" * 43, "eyJhbGciOi.eyJ.sig", "\u00ff"])

    @FUZZ
    @given(
        path=st.sampled_from(INFERENCE_PATHS),
        method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT"]),
        body=inference_bodies(),
        key=credentials,
    )
    def one(path: str, method: str, body: bytes, key: str | None) -> None:
        headers = {"content-type": b"application/json"}
        if key is not None:
            headers["authorization"] = f"Bearer {key}".encode()
        response = gw.client.request(method, path, content=body, headers=headers)
        check_answer(response, f"{method} {path} {body[:120]!r}")

    one()
    assert gw.client.get("/livez").status_code == 200
    still_recording(gw)


# -- the control plane ---------------------------------------------------------------------------------


def _q(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")  # lone surrogates as raw bytes


def control_operations(gw: Gateway) -> list[tuple[str, str]]:
    spec = gw.relay.control.get("/api/openapi.json").json()
    ops = []
    for path, item in spec["paths"].items():
        for method in item:
            if method in ("get", "post", "patch", "put", "delete"):
                ops.append((method.upper(), path))
    return sorted(ops)


USAGE_QUERY = st.dictionaries(
    st.sampled_from(
        [
            "from",
            "to",
            "cursor",
            "limit",
            "group_by",
            "status",
            "status_class",
            "error",
            "source",
            "project",
            "x",
        ]
    ),
    text,
    max_size=3,
)


@pytest.mark.timeout(300)
def test_fuzz_the_control_plane(hostile_sqlite: Gateway) -> None:
    gw = hostile_sqlite
    ops = control_operations(gw)
    assert len(ops) > 40
    client = httpx.Client(base_url=gw.relay.control_url, timeout=30)

    @FUZZ
    @given(
        op=st.sampled_from(ops),
        ref=st.one_of(text, st.sampled_from(["", "..", "%00", "a" * 300])),
        payload=st.one_of(json_values, deep_json(), st.binary(max_size=100)),
        query=USAGE_QUERY,
        admin=st.sampled_from([True, True, True, False]),
    )
    def one(op: tuple[str, str], ref: str, payload: Any, query: dict[str, str], admin: bool) -> None:
        method, template = op
        quoted = quote((ref or "x").encode("utf-8", "surrogatepass"), safe="")
        path = re.sub(r"\{[^}]+\}", lambda _: quoted, template)
        if isinstance(payload, dict):
            payload.pop("prune", None)  # pruning the module catalog would only test the fuzz itself
        content = payload if isinstance(payload, bytes) else dumps(payload)
        headers = {"content-type": "application/json"}
        if admin:
            headers["authorization"] = f"Bearer {ADMIN_TOKEN}"
        body = content if method in ("POST", "PATCH", "PUT") else None
        raw_query = "&".join(
            f"{k}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}" for k, v in query.items()
        )
        url = f"{path}?{raw_query}" if raw_query else path
        response = client.request(method, url, content=body, headers=headers)
        check_answer(response, f"{method} {path} {query} {content[:120]!r}")

    one()
    client.close()
    assert gw.client.get("/livez").status_code == 200
    assert gw.relay.control.get("/api/snapshot").status_code == 200
    still_recording(gw)
    logs = gw.relay.logs()
    assert "Exception in ASGI application" not in logs and "unhandled error" not in logs
