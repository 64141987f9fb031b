"""What an operator does from the command line (#28 item 5), against a real ``relay demo``: an Anthropic
batch file detected without ``--shape``, ``custom_id`` kept in Relay's own results, Anthropic result
lines, every owner's batches with ``--all``, ``relay users`` and ``relay tokens mint`` — the token then
used for a real inference call."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.relay_server import RELAY_BIN
from tests.integration.cli.demo_process import Demo


def message_line(custom_id: str, text: str, model: str = "claude-haiku") -> dict[str, Any]:
    params = {"model": model, "max_tokens": 32, "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "params": params}


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_an_anthropic_batch_file_needs_no_shape_and_its_results_keep_the_custom_ids(
    demo: Demo, tmp_path: Path
) -> None:
    lines = [message_line("first", "hello"), message_line("second", "hi", model="no-such-model")]
    done = demo.cli("batch", "submit", str(write(tmp_path / "an.jsonl", lines)), "--wait")
    assert done.returncode == 2, done.stderr  # one item fails routing
    batch_id = done.stdout.strip()
    assert batch_id.startswith("msgbatch_"), done.stdout

    relay = demo.cli("batch", "results", batch_id)
    assert relay.returncode == 0, relay.stderr
    results = [json.loads(text) for text in relay.stdout.splitlines()]
    assert [(r["idx"], r["custom_id"], r["state"]) for r in results] == [
        (0, "first", "completed"),
        (1, "second", "discarded"),
    ]

    anthropic = demo.cli("batch", "results", batch_id, "--format", "anthropic")
    assert anthropic.returncode == 0, anthropic.stderr
    lines_out = [json.loads(text) for text in anthropic.stdout.splitlines()]
    assert [(r["custom_id"], r["result"]["type"]) for r in lines_out] == [
        ("first", "succeeded"),
        ("second", "errored"),
    ]
    assert lines_out[0]["result"]["message"]["content"], lines_out[0]


def test_a_native_batch_converts_to_anthropic_lines_named_by_idx(demo: Demo, tmp_path: Path) -> None:
    body = {"model": "claude-haiku", "max_tokens": 32, "messages": [{"role": "user", "content": "x"}]}
    done = demo.cli("batch", "submit", str(write(tmp_path / "plain.jsonl", [body])), "--shape", "anthropic")
    assert done.returncode == 0, done.stderr
    batch_id = done.stdout.strip()
    assert batch_id.startswith("b_"), done.stdout  # plain Messages bodies stay a §10 batch
    waited = demo.cli(
        "batch", "submit", str(write(tmp_path / "again.jsonl", [body])), "--shape", "anthropic", "--wait"
    )
    assert waited.returncode == 0, waited.stderr
    converted = demo.cli("batch", "results", waited.stdout.strip(), "--format", "anthropic")
    (line,) = [json.loads(text) for text in converted.stdout.splitlines()]
    assert line["custom_id"] == "0" and line["result"]["type"] == "succeeded", line

    plain = write(tmp_path / "bodies.jsonl", [body])
    refused = demo.cli("batch", "submit", str(plain))
    assert refused.returncode == 1 and "--shape is required" in refused.stderr, refused.stderr


def test_list_all_shows_every_owners_batches_with_api_and_owner(demo: Demo, tmp_path: Path) -> None:
    done = demo.cli("batch", "submit", str(write(tmp_path / "one.jsonl", [message_line("a", "x")])))
    assert done.returncode == 0, done.stderr
    batch_id = done.stdout.strip()
    listed = demo.cli("batch", "list", "--all", "--limit", "1000")
    assert listed.returncode == 0, listed.stderr
    (line,) = [text for text in listed.stdout.splitlines() if text.startswith(batch_id)]
    assert line.split()[1] == "anthropic" and " key:key_" in line, line  # the API, the owning credential

    no_admin = demo.env() | {"RELAY_ADMIN_TOKEN": "not-the-admin-token-at-all"}
    refused = subprocess.run(
        [RELAY_BIN, "batch", "list", "--all"], cwd=demo.workdir, env=no_admin, capture_output=True, text=True
    )
    assert refused.returncode == 1 and refused.stderr.startswith("error: 401"), refused.stderr


def test_users_create_list_and_a_minted_token_that_works(demo: Demo) -> None:
    created = demo.cli("users", "create", "oncall", "--email", "oncall@example.com", "--member", "demo")
    assert created.returncode == 0, created.stderr
    user_id = created.stdout.strip()
    assert user_id and "\n" not in user_id and "created user oncall" in created.stderr, created

    listed = demo.cli("users", "list")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line.split("\t") for line in listed.stdout.splitlines() if "oncall@example.com" in line]
    assert row[1:] == ["oncall", "oncall@example.com", "enabled", "demo"], row

    minted = demo.cli("tokens", "mint", "--user", "oncall", "--project", "demo", "--ttl-seconds", "600")
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert token.count(".") == 2 and "expires" in minted.stderr, minted
    answer = httpx.post(
        f"{demo.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {token}"},
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text

    stranger = demo.cli("tokens", "mint", "--user", "oncall", "--project", "nosuch")
    assert stranger.returncode == 1 and stranger.stderr.startswith("error: "), stranger.stderr
