"""``relay batch`` with OpenAI-format files, against a real ``relay demo``: an OpenAI batch JSONL is
detected, submitted through the OpenAI-compatible API (custom ids kept) and waited for; a mix of the
two formats and a bad OpenAI line are refused naming the line, submitting nothing; ``list`` shows the
caller's batches; ``results --format openai`` writes OpenAI output and error lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relay.cli.batch_files import openai_format
from tests.integration.cli.demo_process import Demo

CHAT = "/v1/chat/completions"


def body(n: int, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"item {n}"}], **extra}


def openai_line(custom_id: str, payload: dict[str, Any], url: str = CHAT) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": payload}


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_an_openai_file_is_submitted_with_its_custom_ids(demo: Demo, tmp_path: Path) -> None:
    lines = [openai_line("alpha", body(0)), openai_line("beta", body(1, model="no-such-model"))]
    done = demo.cli("batch", "submit", str(write(tmp_path / "oa.jsonl", lines)), "--wait")
    assert done.returncode == 2, done.stderr  # one item failed
    batch_id = done.stdout.strip()
    assert batch_id.startswith("batch_"), done.stdout

    out = tmp_path / "out.jsonl"
    written = demo.cli("batch", "results", batch_id, "-o", str(out), "--format", "openai")
    assert written.returncode == 0, written.stderr
    results = [json.loads(text) for text in out.read_text().splitlines()]
    assert [r["custom_id"] for r in results] == ["alpha", "beta"]  # output file, then error file
    assert results[0]["response"]["status_code"] == 200 and results[0]["error"] is None
    assert results[1]["response"] is None and results[1]["error"]["code"] == "routing_error"

    listed = demo.cli("batch", "list", "--limit", "100")
    assert listed.returncode == 0 and batch_id in listed.stdout, listed.stdout

    plain = demo.cli(
        "batch", "submit", str(write(tmp_path / "plain.jsonl", [body(2)])), "--shape", "openai", "--wait"
    )
    assert plain.returncode == 0, plain.stderr
    native = plain.stdout.strip()
    converted = demo.cli("batch", "results", native, "--format", "openai")
    (line,) = [json.loads(text) for text in converted.stdout.splitlines()]
    assert line["custom_id"] is None and line["response"]["status_code"] == 200
    assert line["response"]["body"]["choices"], line


def test_mixed_and_bad_openai_files_are_refused_naming_the_line(demo: Demo, tmp_path: Path) -> None:
    before = demo.cli("batch", "list", "--limit", "100").stdout
    mixed = write(tmp_path / "mixed.jsonl", [openai_line("a", body(0)), body(1)])
    refused = demo.cli("batch", "submit", str(mixed))
    assert refused.returncode == 1 and refused.stdout == ""
    assert f"{mixed}: line 2 is a request body but line 1 is an OpenAI batch line" in refused.stderr

    reverse = write(tmp_path / "reverse.jsonl", [body(0), openai_line("a", body(1))])
    refused = demo.cli("batch", "submit", str(reverse), "--shape", "openai")
    assert refused.returncode == 1 and "line 2 is an OpenAI batch line" in refused.stderr, refused.stderr

    duplicate = write(tmp_path / "dup.jsonl", [openai_line("a", body(0)), openai_line("a", body(1))])
    refused = demo.cli("batch", "submit", str(duplicate))
    assert refused.returncode == 1 and f"{duplicate}: line 2: custom_id 'a'" in refused.stderr, refused.stderr

    wrong_url = write(
        tmp_path / "url.jsonl", [openai_line("a", body(0)), openai_line("b", body(1), "/v1/responses")]
    )
    refused = demo.cli("batch", "submit", str(wrong_url))
    assert refused.returncode == 1 and "line 2: url must be" in refused.stderr, refused.stderr

    plain_without_shape = demo.cli("batch", "submit", str(write(tmp_path / "p.jsonl", [body(0)])))
    assert plain_without_shape.returncode == 1 and "--shape is required" in plain_without_shape.stderr
    assert demo.cli("batch", "list", "--limit", "100").stdout == before  # nothing submitted


def test_anthropic_batch_lines_are_not_taken_for_openai_ones(tmp_path: Path) -> None:
    """``{"custom_id", "params"}`` lines are the Anthropic format (``--shape anthropic``), not OpenAI's."""
    anthropic = write(tmp_path / "mb.jsonl", [{"custom_id": "a", "params": {"model": "m", "messages": []}}])
    assert openai_format(anthropic) is None
    openai_file = write(tmp_path / "oa.jsonl", [openai_line("a", body(0))])
    assert openai_format(openai_file) == CHAT


def message(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-haiku",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": f"item {n}"}],
        **extra,
    }


def test_results_in_anthropic_format_and_custom_ids_in_relay_results(demo: Demo, tmp_path: Path) -> None:
    """``--format anthropic``: a Message Batch's own result lines; another batch's final items
    converted (its custom ids when it has them, else ``<batch id>-<idx>``). And the relay-format
    results of a §15 batch carry each item's ``custom_id``."""
    lines = [
        {"custom_id": "hello", "params": message(0)},
        {"custom_id": "refused", "params": message(1, fake={"status": 400})},
    ]
    done = demo.cli(
        "batch", "submit", str(write(tmp_path / "mb.jsonl", lines)), "--shape", "anthropic", "--wait"
    )
    assert done.returncode == 2, done.stderr  # one item failed
    batch_id = done.stdout.strip()
    assert batch_id.startswith("msgbatch_"), done.stdout

    own = demo.cli("batch", "results", batch_id, "--format", "anthropic")
    assert own.returncode == 0, own.stderr
    results = [json.loads(text) for text in own.stdout.splitlines()]
    assert [(r["custom_id"], r["result"]["type"]) for r in results] == [
        ("hello", "succeeded"),
        ("refused", "errored"),
    ]
    refused = results[1]["result"]["error"]["error"]
    assert refused["type"] == "invalid_request_error" and refused["message"].startswith(
        "upstream returned 400"
    )

    relay_format = demo.cli("batch", "results", batch_id)
    rows = [json.loads(text) for text in relay_format.stdout.splitlines()]
    assert [(r["idx"], r["custom_id"], r["state"]) for r in rows] == [
        (0, "hello", "completed"),
        (1, "refused", "discarded"),
    ]

    plain = demo.cli(
        "batch",
        "submit",
        str(write(tmp_path / "plain.jsonl", [body(0), body(1, fake={"status": 400})])),
        "--shape",
        "openai",
        "--wait",
    )
    native = plain.stdout.strip()
    converted = demo.cli("batch", "results", native, "--format", "anthropic")
    assert converted.returncode == 0, converted.stderr
    got = [json.loads(text) for text in converted.stdout.splitlines()]
    assert [(r["custom_id"], r["result"]["type"]) for r in got] == [
        (f"{native}-0", "succeeded"),
        (f"{native}-1", "errored"),
    ]
    assert got[0]["result"]["message"]["choices"]  # the item's own (OpenAI-shaped) response
    assert got[1]["result"]["error"]["error"]["type"] == "invalid_request_error"
    assert "custom_id" not in json.loads(demo.cli("batch", "results", native).stdout.splitlines()[0])
