"""``relay batch submit --shape anthropic`` with Anthropic Message Batches JSONL (``custom_id`` +
``params`` lines) against a real relay: the batch is a Message Batch with those custom_ids, readable by
the SDK and by ``relay batch``; plain Messages bodies still make a §10 batch; a mixed file submits
nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from relay.store import tables as t
from tests.fixtures.live import Gateway
from tests.fixtures.relay_server import RELAY_BIN
from tests.integration.message_batches.helpers import params, request, sdk, wait_ended


def cli(gw: Gateway, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RELAY_URL": gw.url, "RELAY_API_KEY": gw.key}
    return subprocess.run([RELAY_BIN, *args], env=env, capture_output=True, text=True, timeout=60)


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_anthropic_batch_jsonl_becomes_a_message_batch(mb_gateway: Gateway, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "batch.jsonl", [request("first", 0), request("second", 1)])
    done = cli(mb_gateway, "batch", "submit", str(source), "--shape", "anthropic", "--wait")
    batch_id = done.stdout.strip()
    assert done.returncode == 0 and batch_id.startswith("msgbatch_"), (done.stdout, done.stderr)
    client = sdk(mb_gateway)
    assert wait_ended(client, batch_id, 2).request_counts.succeeded == 2
    assert [r.custom_id for r in client.messages.batches.results(batch_id)] == ["first", "second"]
    results = cli(mb_gateway, "batch", "results", batch_id)
    assert [json.loads(line)["state"] for line in results.stdout.splitlines()] == ["completed"] * 2


def test_plain_messages_bodies_still_make_a_relay_batch(mb_gateway: Gateway, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "plain.jsonl", [params(0), params(1)])
    done = cli(mb_gateway, "batch", "submit", str(source), "--shape", "anthropic")
    assert done.returncode == 0 and done.stdout.strip().startswith("b_"), done.stderr


def test_a_refused_line_is_named_by_line_and_request(mb_gateway: Gateway, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "dup.jsonl", [request("same", 0), request("same", 1)])
    done = cli(mb_gateway, "batch", "submit", str(source), "--shape", "anthropic")
    assert done.returncode == 1 and done.stdout == ""
    assert "line 2 (requests[1]).custom_id: 'same' is already the custom_id" in done.stderr, done.stderr


def test_a_file_mixing_both_formats_submits_nothing(mb_gateway: Gateway, tmp_path: Path) -> None:
    before = int(mb_gateway.sql(select(func.count()).select_from(t.batches)))
    source = write_jsonl(tmp_path / "mixed.jsonl", [request("a", 0), params(1)])
    done = cli(mb_gateway, "batch", "submit", str(source), "--shape", "anthropic")
    assert done.returncode == 1 and "requests[1] mixes formats" in done.stderr, done.stderr
    assert int(mb_gateway.sql(select(func.count()).select_from(t.batches))) == before
