"""The Files API's wire manners (SPEC §14 Files, over the inference listener's rules), seen on a raw
socket: a 401, 405 or 413 reads nothing more of the body and closes the connection; an upload stops
reading at its closing boundary, however long the epilogue; a 405 names the methods in ``Allow``; a
repeated header is joined (RFC 9110) as on every other ``/v1`` route."""

from __future__ import annotations

import httpx

from tests.e2e.hostile.wire import RawAnswer, connect, read_answer, request_head, send_quietly
from tests.integration.files.conftest import MAX_BYTES
from tests.integration.files.helpers import FilesRelay, jsonl

MULTIPART = "multipart/form-data; boundary=b"
HUGE = str(100 * MAX_BYTES)  # a declared length nobody should read


def form(content: bytes) -> bytes:
    """A whole multipart body: purpose=batch and a file part, up to the closing boundary."""
    return (
        b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n'
        + content
        + b"\r\n--b--\r\n"
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def raw_exchange(fr: FilesRelay, head: bytes, body: bytes) -> RawAnswer:
    """Send ``head`` and ``body`` (and nothing after), then read what the relay answers."""
    sock = connect(fr.gw.relay.port, timeout=15)
    send_quietly(sock, head + body)
    return read_answer(sock)


def test_refusals_read_no_more_of_the_body_and_close(files_relay: FilesRelay) -> None:
    fr = files_relay
    auth = fr.gw.auth(fr.new_key())
    cases = [
        ("POST", {"Content-Type": MULTIPART, "Content-Length": HUGE}, 401),  # no credential
        ("POST", {**auth, "Content-Type": MULTIPART, "Content-Length": HUGE}, 413),
        ("PUT", {**auth, "Content-Type": MULTIPART, "Content-Length": HUGE}, 405),
    ]
    for method, headers, status in cases:
        answer = raw_exchange(fr, request_head(method, "/openai/v1/files", headers), b"--b\r\n")
        assert answer.status == status, (method, status, answer)
        assert answer.headers.get("connection") == "close" and answer.closed, answer.headers
        assert answer.json()["error"]["message"]
    assert answer.headers["allow"] == "GET, POST"


def test_an_upload_stops_reading_at_the_closing_boundary(files_relay: FilesRelay) -> None:
    fr = files_relay
    key = fr.new_key()
    headers = {**fr.gw.auth(key), "Content-Type": MULTIPART, "Transfer-Encoding": "chunked"}
    head = request_head("POST", "/openai/v1/files", headers)
    content = jsonl(3)
    # An epilogue that never ends (no last chunk is ever sent): answered once the form is complete.
    answer = raw_exchange(fr, head, chunk(form(content)) + chunk(b"epilogue " * 2000))
    assert answer.status == 200 and answer.json()["bytes"] == len(content), answer
    assert answer.headers.get("connection") == "close" and answer.closed
    assert fr.rows_of(key) == 1
    # A chunked upload that ends properly keeps the connection open.
    whole = raw_exchange(fr, head, chunk(form(content)) + b"0\r\n\r\n")
    assert whole.status == 200 and whole.json()["bytes"] == len(content), whole
    assert whole.headers.get("connection") != "close" and not whole.closed
    assert fr.rows_of(key) == 2


def test_a_405_names_its_methods_and_repeated_headers_are_joined(files_relay: FilesRelay) -> None:
    fr = files_relay
    auth = fr.gw.auth(None)
    for method, path, allow in (
        ("PUT", "/v1/files", "GET, POST"),
        ("POST", "/openai/v1/files/file-00000000000000000000000000", "GET, DELETE"),
        ("DELETE", "/openai/v1/files/file-00000000000000000000000000/content", "GET"),
    ):
        response = fr.http().request(method, path, headers=auth)
        assert response.status_code == 405 and response.headers["allow"] == allow, response.text
        assert response.json()["error"]["code"] == "method_not_allowed"
    # Two x-api-key headers are one value "k, k" (no key), exactly as on /v1/batches.
    doubled = httpx.Headers([("x-api-key", fr.gw.key), ("x-api-key", fr.gw.key)])
    files = httpx.get(f"{fr.gw.url}/openai/v1/files", headers=doubled, timeout=30)
    batches = httpx.get(f"{fr.gw.url}/v1/batches", headers=doubled, timeout=30)
    assert files.status_code == batches.status_code == 401, (files.text, batches.text)
    single = httpx.get(f"{fr.gw.url}/openai/v1/files", headers={"x-api-key": fr.gw.key}, timeout=30)
    assert single.status_code == 200, single.text
