"""Batch prompts and completions are private to Relay's user (SPEC §10.7: directories 0700, files 0600),
or readable by its group with ``RELAY_BATCH_PAYLOAD_GROUP_READABLE=true`` (0750/0640) — whatever the
umask, and never by anyone else. Checked on real files: the payload module itself, and a real
``relay serve`` that ran a batch with the option on."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.domain.ids import mint_id
from relay.payloads.directory import PayloadDir
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import CHAT_MODEL, Gateway, Reaper
from tests.fixtures.relay_server import RelayProcess


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_modes(root: Path, dir_mode: int, file_mode: int) -> None:
    directories = [root, *(p for p in root.rglob("*") if p.is_dir())]
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) >= 3  # requests, offsets, responses
    assert {str(p): mode(p) for p in directories} == {str(p): dir_mode for p in directories}
    assert {p.name: mode(p) for p in files} == {p.name: file_mode for p in files}


@pytest.mark.parametrize(
    ("group_readable", "umask", "dir_mode", "file_mode"),
    [
        (False, 0o022, 0o700, 0o600),  # the usual umask, which left them 0755/0644 before
        (True, 0o077, 0o750, 0o640),  # a strict umask does not take the group's read away
        (True, 0o000, 0o750, 0o640),  # nor does an open one give the world anything
    ],
)
def test_payload_directories_and_files_have_the_configured_modes(
    tmp_path: Path, group_readable: bool, umask: int, dir_mode: int, file_mode: int
) -> None:
    old = os.umask(umask)
    try:
        root = tmp_path / "deep" / "payloads"
        store = PayloadDir(root, group_readable=group_readable)
        batch_id = mint_id("b")
        store.write_requests(batch_id, [b'{"model": "m"}', b'{"model": "n"}'])
        store.append_response(batch_id, b'{"ok": true}')
        store.close()
    finally:
        os.umask(old)
    assert mode(root.parent) == dir_mode  # missing parents are created with the same mode
    assert_modes(root, dir_mode, file_mode)
    assert store.read_request(batch_id, 1) == b'{"model": "n"}'


@pytest.fixture(scope="module")
def group_readable_relay(
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[tuple[Gateway, Path]]:
    workdir = tmp_path_factory.mktemp("payload-group")
    payloads = workdir / "payloads"
    env = {"RELAY_BATCH_PAYLOAD_GROUP_READABLE": "true", "RELAY_BATCH_PAYLOAD_DIR": str(payloads)}
    process = RelayProcess(workdir, f"sqlite:///{workdir / 'relay.db'}", env)
    try:
        process.start()
        gw = Gateway(process, fake_upstream, "sqlite", None)
        gw.apply_catalog()
        yield gw, payloads
    finally:
        live_reaper.stop([process], None)


def test_relay_serve_threads_the_group_readable_setting_to_its_payload_files(
    group_readable_relay: tuple[Gateway, Path],
) -> None:
    gw, payloads = group_readable_relay
    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    submitted = gw.post("/v1/batches", {"shape": "openai", "requests": [body, body]})
    assert submitted.status_code in (200, 201, 202), submitted.text
    batch_id = submitted.json()["id"]
    deadline = time.monotonic() + 30
    while not list((payloads / batch_id).glob("responses-*.data")):
        assert time.monotonic() < deadline, "no response file was written"
        time.sleep(0.1)
    assert_modes(payloads, 0o750, 0o640)
