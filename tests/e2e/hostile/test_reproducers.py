"""Every reproducer of the hostile-input issue, against a real ``relay serve`` (SPEC §1, §7, §8, §10,
§11, §12): each answer is a bounded, JSON, request-id-carrying refusal, and the relay keeps serving and
recording afterwards."""

from __future__ import annotations

import base64
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from relay.control.services.throttle import ADDRESS_FAILURES, EMAIL_FAILURES
from relay.inference.app import INFERENCE_ROUTES
from tests.e2e.hostile.conftest import HOSTILE_ENV
from tests.e2e.hostile.guesses import client_from, fresh_loopback_address, guesses_at_once
from tests.e2e.hostile.wire import connect, exchange, read_answer, request_head, send_quietly
from tests.fixtures.live import CHAT_MODEL, Gateway
from tests.fixtures.relay_server import ADMIN_TOKEN

CONTROL_LIMIT = int(HOSTILE_ENV["RELAY_CONTROL_MAX_REQUEST_BYTES"])


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def assert_json_error(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert len(response.headers.get("x-relay-request-id", "")) == 32
    body = response.json()
    message = body["error"]["message"]
    for word in words:
        assert word in message, message
    return dict(body)


def recorded(gw: Gateway, request_id: str, timeout: float = 15.0) -> dict[str, Any]:
    """The usage event of ``request_id``, once the background writer has stored it."""
    deadline = time.monotonic() + timeout
    while True:
        events = gw.relay.api("GET", "/api/usage/events?limit=200").json()["events"]
        for event in events:
            if event["request_id"] == request_id:
                return dict(event)
        assert time.monotonic() < deadline, f"usage event of {request_id} never written"
        time.sleep(0.1)


def still_recording(gw: Gateway) -> None:
    """A normal request is answered and its usage event written (the writer is not wedged)."""
    response = gw.chat()
    assert response.status_code == 200, response.text
    recorded(gw, response.headers["x-relay-request-id"])


# -- 1. lone surrogates never reach a background writer ---------------------------------------------


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/anthropic/v1/messages", "/v1/responses", "/v1/embeddings"]
)
def test_a_lone_surrogate_model_is_refused_and_recording_continues(hostile: Gateway, path: str) -> None:
    response = hostile.post(path, content=b'{"model": "\\ud800", "messages": []}')
    assert response.status_code == 400 and response.headers["x-relay-request-id"]
    body = response.json()
    if path.startswith("/anthropic/"):
        assert body["type"] == "error" and "'model'" in body["error"]["message"]
    else:
        assert body["error"]["code"] == "invalid_json" and "'model'" in body["error"]["message"]
    still_recording(hostile)


def test_surrogates_deep_in_a_body_name_the_field(hostile: Gateway) -> None:
    raw = b'{"model": "%s", "messages": [{"role": "user", "content": "x\\udfff"}]}' % CHAT_MODEL.encode()
    body = assert_json_error(hostile.post("/v1/chat/completions", content=raw), 400, "messages[0].content")
    assert body["error"]["code"] == "invalid_json"


def make_user(gw: Gateway) -> tuple[dict[str, Any], str]:
    password = "pw-" + uuid.uuid4().hex
    user = gw.create(
        "users",
        {
            "name": f"u-{uuid.uuid4().hex[:8]}",
            "email": f"{uuid.uuid4().hex[:8]}@example.test",
            "password": password,
            "memberships": [{"project": gw.project}],
        },
    )
    return user, password


def test_surrogates_on_the_control_plane_are_400_not_500(hostile: Gateway) -> None:
    user, _ = make_user(hostile)
    control = hostile.relay.control
    raw = '{"email": "\\ud800@x", "password": "p"}'
    cases = [
        ("/api/auth/login", raw, {}),
        ("/api/auth/token", '{"project": "\\ud800"}', {}),
        (f"/api/users/{user['id']}/tokens", '{"project": "\\ud800"}', None),
        ("/api/apply", '{"documents": [{"kind": "Team", "name": "\\udc00", "spec": {}}]}', None),
        ("/api/teams", '{"name": "t", "display_name": "\\ud800"}', None),
    ]
    for path, body, headers in cases:
        sent = {"content-type": "application/json", **(headers if headers is not None else {})}
        client = control if headers is None else httpx.Client(base_url=hostile.relay.control_url, timeout=30)
        assert_json_error(client.post(path, content=body, headers=sent), 400, "surrogate")
    still_recording(hostile)


def test_a_huge_model_name_makes_a_short_log_line_and_row(hostile: Gateway) -> None:
    model = "m" * 1_000_000
    response = hostile.post("/v1/chat/completions", {"model": model, "messages": []})
    assert response.status_code == 404
    request_id = response.headers["x-relay-request-id"]
    line = hostile.wait_log_line(request_id)
    assert len(json.dumps(line)) < 4096
    event = recorded(hostile, request_id)
    assert len(event["model"]) <= 300 and len(event["error_message"] or "") <= 600


# -- 2. bounded before any work -----------------------------------------------------------------------


def test_a_128_kib_header_is_431_json_and_the_relay_stays_live(hostile: Gateway) -> None:
    port = port_of(hostile.url)
    answer = exchange(port, request_head("GET", "/livez", {"X-Big": "a" * 128 * 1024}))
    assert answer.status == 431 and answer.closed
    assert answer.headers["content-type"] == "application/json" and answer.headers["x-relay-request-id"]
    assert answer.json()["error"]["code"] == "headers_too_large"
    assert "RELAY_MAX_HEADER_BYTES" in answer.json()["error"]["message"]
    # A header far past the limit is cut off as it arrives, not buffered (the 128 MiB case).
    sock = connect(port)
    send_quietly(sock, b"GET /livez HTTP/1.1\r\nX-Huge: " + b"a" * (8 * 1024 * 1024))
    assert read_answer(sock).status == 431
    assert hostile.client.get("/livez").status_code == 200


def test_too_many_headers_is_431(hostile: Gateway) -> None:
    headers = {f"x-h{i}": "1" for i in range(150)}
    for port in (port_of(hostile.url), port_of(hostile.relay.control_url)):
        answer = exchange(port, request_head("GET", "/livez", headers))
        assert answer.status == 431 and answer.closed
        assert answer.json()["error"]["code"] == "too_many_headers"
        assert "x-relay-request-id" in answer.headers


def test_control_plane_answers_401_before_reading_a_body(hostile: Gateway) -> None:
    port = port_of(hostile.relay.control_url)
    for path in ("/api/teams", "/api/apply", "/api/keys"):
        sock = connect(port)
        head = request_head(
            "POST", path, {"Content-Length": str(200 * 1024 * 1024), "Content-Type": "application/json"}
        )
        send_quietly(sock, head + b"{" * 65536)  # a promise of 200 MiB, a taste of it
        answer = read_answer(sock)
        assert answer.status == 401 and answer.closed, answer
        assert answer.json()["error"]["code"] == "unauthenticated"
        assert answer.headers["x-relay-request-id"]


def test_control_plane_413_from_content_length_and_while_streaming(hostile: Gateway) -> None:
    port = port_of(hostile.relay.control_url)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    declared = exchange(port, request_head("POST", "/api/teams", {**auth, "Content-Length": "999999999"}))
    assert declared.status == 413 and declared.closed
    assert "RELAY_CONTROL_MAX_REQUEST_BYTES" in declared.json()["error"]["message"]
    # Chunked: no length to check up front; refused once past the limit.
    sock = connect(port)
    send_quietly(sock, request_head("POST", "/api/teams", {**auth, "Transfer-Encoding": "chunked"}))
    chunk = b" " * 65536
    for _ in range(CONTROL_LIMIT // len(chunk) + 2):
        send_quietly(sock, b"%x\r\n%s\r\n" % (len(chunk), chunk))
    answer = read_answer(sock)
    assert answer.status == 413 and answer.json()["error"]["code"] == "payload_too_large"
    # Login takes a few KiB at most, with no credential needed.
    login = httpx.post(f"{hostile.relay.control_url}/api/auth/login", content=b" " * 8192, timeout=30)
    assert_json_error(login, 413, "login")


def test_live_plane_413_from_content_length_and_while_streaming(hostile: Gateway) -> None:
    port = port_of(hostile.url)
    head = {"Content-Length": str(64 * 1024 * 1024), "Authorization": f"Bearer {hostile.key}"}
    declared = exchange(port, request_head("POST", "/v1/chat/completions", head))
    assert declared.status == 413 and declared.closed and declared.headers["x-relay-request-id"]
    chunked = {"Transfer-Encoding": "chunked", "Authorization": f"Bearer {hostile.key}"}
    sock = connect(port)
    send_quietly(sock, request_head("POST", "/anthropic/v1/messages", chunked))
    chunk = b" " * (1024 * 1024)
    for _ in range(34):  # past the 32 MiB default
        send_quietly(sock, b"%x\r\n%s\r\n" % (len(chunk), chunk))
    answer = read_answer(sock)
    assert answer.status == 413 and answer.json()["type"] == "error"


def test_slow_headers_and_slow_bodies_time_out(hostile: Gateway) -> None:
    live, control = port_of(hostile.url), port_of(hostile.relay.control_url)
    auth = {"Content-Length": "200", "Authorization": f"Bearer {hostile.key}"}
    cases = {
        # Headers never finished: 408 after RELAY_HEADER_TIMEOUT_S (2 s here).
        "head-live": (live, b"GET /livez HTTP/1.1\r\nHost: x\r\n"),
        "head-control": (control, b"GET /api/teams HTTP/1.1\r\nHost: x\r\n"),
        # 10 of 200 promised body bytes, then silence: 408 after RELAY_BODY_READ_TIMEOUT_S.
        "body-live": (live, request_head("POST", "/v1/chat/completions", auth) + b'{"model":"'),
        "body-control": (control, request_head("POST", "/api/auth/login", auth) + b'{"email":"'),
    }
    with ThreadPoolExecutor(len(cases) + 1) as pool:
        idle = pool.submit(lambda: read_answer(connect(live)))  # never says anything: closed
        answers = {name: pool.submit(exchange, port, data) for name, (port, data) in cases.items()}
        for name, future in answers.items():
            answer = future.result()
            assert answer.status == 408 and answer.closed, (name, answer)
            setting = "RELAY_HEADER_TIMEOUT_S" if name.startswith("head") else "RELAY_BODY_READ_TIMEOUT_S"
            assert setting in answer.json()["error"]["message"]
            assert answer.headers["x-relay-request-id"]
        silent = idle.result()
        assert silent.closed and silent.status == 0 and silent.elapsed < 20
    still_recording(hostile)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("path", sorted(INFERENCE_ROUTES))
def test_deep_json_is_400_invalid_json_on_every_live_route(hostile: Gateway, path: str) -> None:
    raw = f'{{"model": "{CHAT_MODEL}", "messages": [], "x": {deep(1000)}}}'.encode()
    response = hostile.post(path, content=raw)
    assert response.status_code == 400 and response.headers["content-type"] == "application/json"
    assert "128" in response.text and "RELAY_MAX_JSON_DEPTH" in response.text


def test_deep_json_in_a_batch_item_and_on_the_control_plane(hostile: Gateway) -> None:
    item = f'{{"model": "{CHAT_MODEL}", "messages": [], "x": {deep(254)}}}'
    raw = f'{{"shape": "openai", "requests": [{item}]}}'.encode()
    response = hostile.post("/v1/batches", content=raw)
    assert_json_error(response, 400, "deeper than")
    team = f'{{"name": "t", "display_name": {deep(300)}}}'
    response = hostile.relay.control.post("/api/teams", content=team)
    assert_json_error(response, 400, "deeper than 128")


# -- 3. JSON, request ids, usage API edges ------------------------------------------------------------


def test_malformed_http_is_a_json_400_with_a_request_id(hostile: Gateway) -> None:
    for port in (port_of(hostile.url), port_of(hostile.relay.control_url)):
        answer = exchange(port, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
        assert answer.status == 400 and answer.headers["content-type"] == "application/json"
        assert answer.headers["x-relay-request-id"] and answer.json()["error"]["code"] == "invalid_request"


def test_usage_api_edge_timestamps_and_crafted_cursors_are_400(hostile: Gateway) -> None:
    api = hostile.relay.control
    for query in (
        "from=0001-01-01T00:00:00%2B14:00",
        "to=9999-12-31T23:59:59-14:00",
        "cursor=" + base64.urlsafe_b64encode(b"0001-01-01T00:00:00+14:00|ue_1").decode(),
        "cursor=" + base64.urlsafe_b64encode(b"2026-01-01T00:00:00+00:00|ue_\x00").decode(),
    ):
        assert_json_error(api.get(f"/api/usage/events?{query}"), 400)
        assert_json_error(api.get(f"/api/usage/summary?group_by=model&{query}"), 400)
    assert api.get("/api/usage/events?from=0001-01-01T00:00:00Z").status_code == 200


# -- 4. files and tokens ------------------------------------------------------------------------------


def test_login_is_throttled_per_email_with_retry_after(hostile: Gateway) -> None:
    user, password = make_user(hostile)
    url = f"{hostile.relay.control_url}/api/auth/login"
    for _ in range(10):
        wrong = httpx.post(url, json={"email": user["email"], "password": "nope"}, timeout=30)
        assert wrong.status_code == 401
    throttled = httpx.post(url, json={"email": user["email"], "password": password}, timeout=30)
    assert_json_error(throttled, 429, "too many failed logins")
    assert int(throttled.headers["retry-after"]) >= 1
    # Another user from the same address is not locked out by that email's failures.
    other, other_password = make_user(hostile)
    ok = httpx.post(url, json={"email": other["email"], "password": other_password}, timeout=30)
    assert ok.status_code == 200, ok.text
    cookie = ok.headers["set-cookie"]
    assert "relay_session=" in cookie and "Secure" in cookie and "HttpOnly" in cookie  # https public URL


def test_concurrent_wrong_passwords_are_verified_at_most_the_limit(hostile: Gateway) -> None:
    """50 guesses at once for one email: each is counted before its password is hashed, so only the
    limit's worth reach the argon2 check (401); the rest are refused first (429)."""
    user, password = make_user(hostile)
    address = fresh_loopback_address()
    answers = guesses_at_once([hostile.relay.control_url], user["email"], 50, address)
    assert answers == {401: EMAIL_FAILURES, 429: 50 - EMAIL_FAILURES}, answers
    with client_from(fresh_loopback_address()) as client:  # the email is used up, from anywhere
        right = client.post(
            f"{hostile.relay.control_url}/api/auth/login", json={"email": user["email"], "password": password}
        )
    assert_json_error(right, 429, "too many failed logins for this email")


def test_the_dashboard_sign_in_shares_the_login_throttle(hostile: Gateway) -> None:
    """The dashboard's sign-in form is a second door to the same credentials: its password guesses count
    against the same per-email and per-address limits as the API's login; its admin-token guesses
    against the per-address limit only (there is no email to lock)."""
    import re

    base = hostile.relay.control_url

    def sign_in(client: httpx.Client, **fields: str) -> httpx.Response:
        page = client.get(f"{base}/ui/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        pre = re.search(r"relay_ui_pre=([^;]+)", page.headers.get("set-cookie", ""))
        assert page.status_code == 200 and csrf is not None and pre is not None
        # The cookie is Secure (this relay's public URL is https), so it is sent by hand over http.
        return client.post(
            f"{base}/ui/signin",
            data={"csrf": csrf.group(1), **fields},
            headers={"cookie": f"relay_ui_pre={pre.group(1)}"},
        )

    user, password = make_user(hostile)
    with httpx.Client(timeout=30) as client:
        for _ in range(10):
            assert sign_in(client, email=user["email"], password="nope").status_code == 401
        # the API's login for that email is throttled now, and the form too, even with the password
        api = httpx.post(f"{base}/api/auth/login", json={"email": user["email"], "password": password})
        assert_json_error(api, 429, "too many failed logins")
        assert sign_in(client, email=user["email"], password=password).status_code == 429

    # Admin-token guesses count per address only: anyone's guesses elsewhere never lock the operator out.
    with client_from(fresh_loopback_address()) as client:
        for _ in range(EMAIL_FAILURES + 2):
            assert sign_in(client, admin_token="sk-guess").status_code == 401
    with client_from(fresh_loopback_address()) as client:
        signed_in = sign_in(client, admin_token=ADMIN_TOKEN)
        assert signed_in.status_code == 303 and "relay_ui=" in signed_in.headers["set-cookie"], signed_in.text
    address = fresh_loopback_address()  # ...but the guesser's own address runs out of guesses
    with client_from(address) as client:
        answers = [sign_in(client, admin_token="sk-guess").status_code for _ in range(ADDRESS_FAILURES + 1)]
        assert answers == [401] * ADDRESS_FAILURES + [429]
        assert sign_in(client, admin_token=ADMIN_TOKEN).status_code == 429


def test_swagger_ui_is_served_by_relay(hostile: Gateway) -> None:
    page = httpx.get(f"{hostile.relay.control_url}/api/docs", timeout=30)
    assert page.status_code == 200 and "/api/docs/assets/swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        got = httpx.get(f"{hostile.relay.control_url}/api/docs/assets/{asset}", timeout=30)
        assert got.status_code == 200 and len(got.content) > 10_000


def test_the_relay_is_healthy_after_all_of_it(hostile: Gateway) -> None:
    assert hostile.client.get("/livez").status_code == 200
    still_recording(hostile)
    logs = hostile.relay.logs()
    assert "Traceback" not in logs and "Exception in ASGI application" not in logs
    metrics = hostile.metrics()
    assert "relay_usage_write_errors_total 0.0" in metrics


# -- 5. the OpenAPI document tells the truth ----------------------------------------------------------


def test_openapi_declares_every_error_status_and_real_schemas(hostile: Gateway) -> None:
    doc = httpx.get(f"{hostile.relay.control_url}/api/openapi.json", timeout=30).json()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    operations = [
        (path, method, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "patch", "put", "delete")
    ]
    assert len(operations) > 40
    for path, method, op in operations:
        responses = op["responses"]
        for code in ("400", "401", "408", "431", "500"):
            schema = responses[code]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}, (path, method, code)
        if method in ("post", "patch", "put"):
            assert "413" in responses, (path, method)
        for code, answer in responses.items():
            if code.startswith("2") and code != "204":
                assert answer["content"]["application/json"]["schema"], (path, method, code)
    team = doc["paths"]["/api/teams/{ref}"]["get"]["responses"]["200"]["content"]["application/json"]
    assert team["schema"] == {"$ref": "#/components/schemas/TeamObject"}
    user = doc["components"]["schemas"]["UserObject"]["properties"]
    assert "password" not in user and {"id", "email", "created_at"} <= set(user)
    assert "429" in doc["paths"]["/api/auth/login"]["post"]["responses"]
