"""The Files API through the official ``openai`` SDK (SPEC §14 Files): upload, retrieve, content,
list with auto-pagination, delete, and the owner rule (§10.8), on every backend × payload store."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.integration.files.helpers import FILE_FIELDS, NOT_FOUND, FilesRelay, jsonl


def test_upload_retrieve_content_delete(files_relay: FilesRelay, tmp_path: Path) -> None:
    fr = files_relay
    content = jsonl(7)
    path = tmp_path / "requests.jsonl"
    path.write_bytes(content)
    client = fr.sdk()
    with path.open("rb") as handle:
        created = client.files.create(file=handle, purpose="batch")
    raw = fr.http().get(f"/openai/v1/files/{created.id}", headers=fr.gw.auth(fr.gw.key)).json()
    assert set(raw) == FILE_FIELDS, raw
    assert raw["id"].startswith("file-") and raw["object"] == "file" and raw["status"] == "processed"
    assert raw["bytes"] == len(content) and raw["filename"] == "requests.jsonl"
    assert raw["purpose"] == "batch" and raw["expires_at"] is None and isinstance(raw["created_at"], int)
    assert fr.bytes_stored(created.id)
    assert (fr.chunk_rows(created.id) > 0) == (fr.store == "database")  # the configured store holds them

    got = client.files.retrieve(created.id)
    assert got.model_dump() == created.model_dump() == {**raw, "status_details": None}
    assert client.files.content(created.id).read() == content
    assert client.files.content(created.id).text == content.decode()
    # The alias serves the same file.
    assert fr.sdk(prefix="/v1").files.retrieve(created.id).id == created.id

    deleted = client.files.delete(created.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "file", True)
    assert not fr.bytes_stored(created.id) and fr.rows_of(file_id=created.id) == 0
    for call in (client.files.retrieve, client.files.content, client.files.delete):
        with pytest.raises(openai.NotFoundError) as caught:
            call(created.id)
        assert caught.value.response.json() == NOT_FOUND


def test_expires_after_sets_expires_at(files_relay: FilesRelay) -> None:
    client = files_relay.sdk()
    created = client.files.create(
        file=("a.jsonl", jsonl(1)), purpose="batch", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert created.expires_at == created.created_at + 3600
    assert client.files.retrieve(created.id).expires_at == created.created_at + 3600


def test_list_pages_newest_first_and_auto_paginates(files_relay: FilesRelay) -> None:
    fr = files_relay
    key = fr.new_key()  # an owner of its own: exactly the files made here
    client = fr.sdk(key)
    ids = [client.files.create(file=(f"f{i}.jsonl", jsonl(1)), purpose="batch").id for i in range(5)]
    newest_first = list(reversed(ids))

    first = fr.http().get("/openai/v1/files", params={"limit": 2}, headers=fr.gw.auth(key)).json()
    assert set(first) == {"object", "data", "first_id", "last_id", "has_more"}
    assert first["object"] == "list" and first["has_more"] is True
    assert [f["id"] for f in first["data"]] == newest_first[:2]
    assert (first["first_id"], first["last_id"]) == (newest_first[0], newest_first[1])

    assert [f.id for f in client.files.list(limit=2)] == newest_first  # every page, each file once
    assert [f.id for f in client.files.list(limit=2, order="asc")] == ids
    assert [f.id for f in client.files.list()] == newest_first  # default limit: one page
    assert [f.id for f in client.files.list(purpose="batch")] == newest_first
    assert list(client.files.list(purpose="batch_output")) == []
    last = (
        fr.http().get("/openai/v1/files", params={"after": newest_first[2]}, headers=fr.gw.auth(key)).json()
    )
    assert [f["id"] for f in last["data"]] == newest_first[3:] and last["has_more"] is False
    empty = fr.http().get("/openai/v1/files", params={"after": ids[0]}, headers=fr.gw.auth(key)).json()
    assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    assert not set(ids) & {f.id for f in fr.sdk(fr.new_key()).files.list()}  # nobody else lists them


def test_only_the_uploader_sees_a_file(files_relay: FilesRelay) -> None:
    fr = files_relay
    owner = fr.new_key()
    file_id = fr.sdk(owner).files.create(file=("mine.jsonl", jsonl(2)), purpose="batch").id
    stranger = fr.new_key()
    for credential in (stranger, owner):
        unknown = "file-00000000000000000000000000"
        for path in (f"/openai/v1/files/{unknown}", f"/openai/v1/files/{unknown}/content", "/v1/files/x"):
            response = fr.http().get(path, headers=fr.gw.auth(credential))
            assert response.status_code == 404 and response.json() == NOT_FOUND, response.text
    for method, path in (
        ("GET", f"/openai/v1/files/{file_id}"),
        ("GET", f"/openai/v1/files/{file_id}/content"),
        ("DELETE", f"/openai/v1/files/{file_id}"),
        ("GET", f"/v1/files/{file_id}"),
    ):
        response = fr.http().request(method, path, headers=fr.gw.auth(stranger))
        assert response.status_code == 404 and response.json() == NOT_FOUND, (method, path, response.text)
    assert fr.sdk(owner).files.retrieve(file_id).id == file_id  # still there for its owner


def test_tokens_of_the_same_user_share_files(files_relay: FilesRelay) -> None:
    fr = files_relay
    user, other_user = fr.new_user(), fr.new_user()
    first, second, stranger = fr.token(user), fr.token(user), fr.token(other_user)
    created = fr.sdk(first).files.create(file=("t.jsonl", jsonl(3)), purpose="batch")
    assert fr.sdk(second).files.retrieve(created.id).id == created.id
    assert fr.sdk(second).files.content(created.id).read() == fr.sdk(first).files.content(created.id).read()
    assert [f.id for f in fr.sdk(second).files.list()] == [created.id]
    with pytest.raises(openai.NotFoundError) as caught:
        fr.sdk(stranger).files.retrieve(created.id)
    assert caught.value.response.json() == NOT_FOUND
    assert fr.sdk(second).files.delete(created.id).deleted is True
