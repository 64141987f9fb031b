"""Handles and checks shared by the Files API tests: the relay under test, an SDK client per
credential, and what the database and payload directory hold for a file."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI
from sqlalchemy import func, select, update

from relay.domain.credentials import hash_key
from relay.store import tables as t
from relay.store.engine import create_engine
from tests.fixtures.live import Gateway, uniq

NOT_FOUND = {"error": {"type": "invalid_request_error", "code": "not_found", "message": "file not found"}}
FILE_FIELDS = {"id", "object", "bytes", "created_at", "filename", "purpose", "expires_at", "status"}


@dataclass
class FilesRelay:
    gw: Gateway
    store: str  # RELAY_BATCH_PAYLOAD_STORE of this relay
    payload_dir: Path
    database_url: str

    def sdk(self, credential: str | None = None, prefix: str = "/openai/v1") -> OpenAI:
        return OpenAI(base_url=self.gw.url + prefix, api_key=credential or self.gw.key, max_retries=0)

    def http(self) -> httpx.Client:
        return self.gw.client

    def new_key(self) -> str:
        return self.gw.mint_key()[1]

    def new_user(self) -> str:
        name = uniq("fu")
        doc = {
            "kind": "User",
            "name": name,
            "spec": {"email": f"{name}@example.com", "memberships": [{"project": self.gw.project}]},
        }
        self.gw.control_write("POST", "/api/apply", {"documents": [doc]}, 200)
        return self.gw.object_id("users", name)

    def token(self, user_id: str) -> str:
        body = {"project": self.gw.project}
        return str(self.gw.control_write("POST", f"/api/users/{user_id}/tokens", body, 201).json()["token"])

    def upload(
        self, key: str, content: bytes, fields: dict[str, str] | None = None, filename: str = "in.jsonl"
    ) -> httpx.Response:
        """A raw multipart upload (``fields`` default to purpose=batch)."""
        data = {"purpose": "batch"} if fields is None else fields
        files = {"file": (filename, content, "application/jsonl")}
        return self.gw.client.post("/openai/v1/files", data=data, files=files, headers=self.gw.auth(key))

    # -- what is stored -------------------------------------------------------------------------

    def _db(self, work: Any) -> Any:
        async def run() -> Any:
            engine = create_engine(self.database_url)
            try:
                async with engine.begin() as conn:
                    return await work(conn)
            finally:
                await engine.dispose()

        return asyncio.run(run())

    def rows_of(self, owner_key: str | None = None, file_id: str | None = None) -> int:
        query = select(func.count()).select_from(t.files)
        if owner_key is not None:
            query = query.where(t.files.c.owner == hash_key(owner_key))
        if file_id is not None:
            query = query.where(t.files.c.id == file_id)

        async def work(conn: Any) -> int:
            return int((await conn.execute(query)).scalar())

        return int(self._db(work))

    def chunk_rows(self, file_id: str | None = None) -> int:
        query = select(func.count()).select_from(t.payload_chunks).where(t.payload_chunks.c.kind == "file")
        if file_id is not None:
            query = query.where(t.payload_chunks.c.owner_id == file_id)

        async def work(conn: Any) -> int:
            return int((await conn.execute(query)).scalar())

        return int(self._db(work))

    def files_on_disk(self) -> list[str]:
        directory = self.payload_dir / "files"
        return sorted(p.name for p in directory.iterdir()) if directory.exists() else []

    def bytes_stored(self, file_id: str) -> bool:
        """Whether the file's bytes are anywhere (its store's: a file on disk or chunk rows)."""
        on_disk = any(name.lstrip(".").startswith(file_id) for name in self.files_on_disk())
        return on_disk or self.chunk_rows(file_id) > 0

    def set_expires_at(self, file_id: str, when: datetime) -> None:
        async def work(conn: Any) -> None:
            await conn.execute(update(t.files).where(t.files.c.id == file_id).values(expires_at=when))

        self._db(work)


def jsonl(n: int, marker: str | None = None) -> bytes:
    marker = marker or uuid.uuid4().hex
    return b"".join(
        b'{"custom_id": "r%d", "method": "POST", "url": "/v1/chat/completions", "body": {"m": "%s"}}\n'
        % (i, marker.encode())
        for i in range(n)
    )
