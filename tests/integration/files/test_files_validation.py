"""Every refused Files API request (SPEC §14 Files): a 4xx in the OpenAI error shape naming the
parameter, and a refused upload leaves nothing behind (no row, no bytes)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.integration.files.conftest import MAX_BYTES
from tests.integration.files.helpers import FilesRelay, jsonl


def refused(response: httpx.Response, status: int, param: str | None) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["type"] == "invalid_request_error" and error["param"] == param, error
    return dict(error)


def stored(fr: FilesRelay) -> tuple[list[str], int]:
    """Every file's bytes the relay holds: names under the payload directory, and file chunk rows."""
    return fr.files_on_disk(), fr.chunk_rows()


def assert_nothing_stored(fr: FilesRelay, key: str, before: tuple[list[str], int]) -> None:
    assert fr.rows_of(key) == 0
    assert stored(fr) == before  # neither a file nor a partial one, in either store
    listed = fr.http().get("/openai/v1/files", headers=fr.gw.auth(key)).json()
    assert listed["data"] == []


A, S = "expires_after[anchor]", "expires_after[seconds]"
BATCH = {"purpose": "batch"}
UPLOAD_CASES = [
    ("no purpose", {}, True, "purpose"),
    ("bad purpose", {"purpose": "fine-tune"}, True, "purpose"),
    ("batch_output is Relay's", {"purpose": "batch_output"}, True, "purpose"),
    ("no file", BATCH, False, "file"),
    ("bad anchor", {**BATCH, A: "now", S: "3600"}, True, A),
    ("too short", {**BATCH, A: "created_at", S: "3599"}, True, S),
    ("too long", {**BATCH, A: "created_at", S: "2592001"}, True, S),
    ("not a number", {**BATCH, A: "created_at", S: "abc"}, True, S),
    ("anchor alone", {**BATCH, A: "created_at"}, True, S),
    ("seconds alone", {**BATCH, S: "3600"}, True, A),
    ("unknown field", {**BATCH, "colour": "blue"}, True, "colour"),
]


@pytest.mark.parametrize(
    ("fields", "with_file", "param"), [c[1:] for c in UPLOAD_CASES], ids=[c[0] for c in UPLOAD_CASES]
)
def test_bad_uploads_are_400_naming_the_field(
    files_relay: FilesRelay, fields: dict[str, str], with_file: bool, param: str
) -> None:
    fr = files_relay
    key, before = fr.new_key(), stored(fr)
    if with_file:
        response = fr.upload(key, jsonl(3), fields)
    else:  # a multipart body of fields only
        headers = {**fr.gw.auth(key), "content-type": "multipart/form-data; boundary=b"}
        body = b"".join(
            b'--b\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (k.encode(), v.encode())
            for k, v in fields.items()
        )
        response = fr.http().post("/openai/v1/files", content=body + b"--b--\r\n", headers=headers)
    refused(response, 400, param)
    assert_nothing_stored(fr, key, before)


def test_a_body_that_is_not_multipart_is_refused(files_relay: FilesRelay) -> None:
    fr = files_relay
    key = fr.new_key()
    response = fr.http().post("/openai/v1/files", json={"purpose": "batch"}, headers=fr.gw.auth(key))
    refused(response, 400, "file")
    cut = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nhalf a file'
    headers = {**fr.gw.auth(key), "content-type": "multipart/form-data; boundary=b"}
    refused(fr.http().post("/openai/v1/files", content=cut, headers=headers), 400, "file")
    assert fr.rows_of(key) == 0


def _streamed_multipart(size: int) -> Iterator[bytes]:
    """A multipart body whose file has ``size`` bytes, produced as it is sent (chunked, no length)."""
    yield b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
    yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n\r\n'
    block = b"x" * (1 << 20)
    left = size
    while left > 0:
        yield block[: min(left, len(block))]
        left -= len(block)
    yield b"\r\n--b--\r\n"


def test_over_the_limit_is_413_and_leaves_nothing(files_relay: FilesRelay) -> None:
    fr = files_relay
    key, before = fr.new_key(), stored(fr)
    headers = {**fr.gw.auth(key), "content-type": "multipart/form-data; boundary=b"}
    # Streamed without a length: refused once the file passes RELAY_BATCH_MAX_BYTES.
    response = fr.http().post("/openai/v1/files", content=_streamed_multipart(MAX_BYTES + 1), headers=headers)
    error = refused(response, 413, None)
    assert "RELAY_BATCH_MAX_BYTES" in str(error["message"])
    assert_nothing_stored(fr, key, before)
    # Declared too long: refused before a byte is stored.
    body = b"".join(_streamed_multipart(MAX_BYTES + 128 * 1024))
    refused(fr.http().post("/openai/v1/files", content=body, headers=headers), 413, None)
    assert_nothing_stored(fr, key, before)
    # Exactly the limit is fine.
    fine = fr.http().post("/openai/v1/files", content=_streamed_multipart(MAX_BYTES), headers=headers)
    assert fine.status_code == 200 and fine.json()["bytes"] == MAX_BYTES, fine.text
    assert (
        fr.http().delete(f"/openai/v1/files/{fine.json()['id']}", headers=fr.gw.auth(key)).status_code == 200
    )


LIST_CASES = [
    ({"limit": "0"}, "limit"),
    ({"limit": "10001"}, "limit"),
    ({"limit": "abc"}, "limit"),
    ({"limit": "-1"}, "limit"),
    ({"order": "newest"}, "order"),
    ({"purpose": "assistants"}, "purpose"),
    ({"after": ""}, "after"),
    ({"page": "2"}, "page"),
]


@pytest.mark.parametrize(("params", "param"), LIST_CASES, ids=[p for _, p in LIST_CASES])
def test_bad_list_parameters_are_400_naming_them(
    files_relay: FilesRelay, params: dict[str, str], param: str
) -> None:
    fr = files_relay
    refused(fr.http().get("/openai/v1/files", params=params, headers=fr.gw.auth(None)), 400, param)


def test_limits_at_the_edges_are_accepted(files_relay: FilesRelay) -> None:
    fr = files_relay
    for limit in ("1", "10000"):
        response = fr.http().get("/v1/files", params={"limit": limit}, headers=fr.gw.auth(None))
        assert response.status_code == 200, response.text


def test_credentials_are_checked_and_methods_are_named(files_relay: FilesRelay) -> None:
    fr = files_relay
    assert fr.http().get("/openai/v1/files").json()["error"]["code"] == "unauthenticated"
    bad = {"Authorization": "Bearer sk-relay-not-a-key"}
    for method, path in (("GET", "/openai/v1/files"), ("POST", "/openai/v1/files"), ("GET", "/v1/files/x")):
        response = fr.http().request(method, path, headers=bad)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated"
    response = fr.http().put("/openai/v1/files", headers=fr.gw.auth(None))
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"
    response = fr.http().post("/openai/v1/files/file-00000000000000000000000000", headers=fr.gw.auth(None))
    assert response.status_code == 405
