"""``relay batch`` as a user meets it, against a real ``relay demo``: the derived state, the progress bar
(in a pseudo-terminal, as a person sees it), the summary, a cancel seen from ``--wait``, bad lines named
by line and index, the status view without items, and the cancelled counter."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import termios
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.live import metric_value
from tests.fixtures.polling import wait_for
from tests.fixtures.relay_server import RELAY_BIN
from tests.integration.cli.demo_process import Demo

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def item(n: int, **fake: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"item {n}"}]}
    if fake:
        body["fake"] = fake
    return body


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


class Terminal:
    """A ``relay`` command with stderr on a pseudo-terminal (200 columns) and stdout on a pipe."""

    def __init__(self, demo: Demo, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        env = demo.env() | {"TERM": "xterm-256color", "COLUMNS": "200"}
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [RELAY_BIN, *args],
            cwd=demo.workdir,
            env=env,
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
        )
        os.close(slave)
        self._master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: the last holder of the terminal exited
                break
            if not chunk:
                break
            self._chunks.append(chunk)

    @property
    def screen(self) -> str:
        return ANSI.sub("\n", b"".join(self._chunks).decode(errors="replace"))

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        stdout, _ = self.proc.communicate(timeout=timeout)
        self._reader.join(timeout=10)
        os.close(self._master)
        return self.proc.returncode, stdout, self.screen


def status_lines(demo: Demo, batch_id: str) -> dict[str, str]:
    done = demo.cli("batch", "status", batch_id)
    assert done.returncode == 0, done.stderr
    fields = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        fields[key] = value.strip()
    return fields


def test_wait_shows_counts_and_ends_with_a_summary_naming_failures(demo: Demo, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "six.jsonl", [item(0)] + [item(n, status=400) for n in range(1, 6)])
    term = Terminal(demo, "batch", "submit", str(source), "--shape", "openai", "--wait")
    code, stdout, screen = term.finish()
    batch_id = stdout.strip()
    assert code == 2 and batch_id.startswith("b_") and "\n" not in batch_id, (code, stdout, screen)
    assert "done 1 · failed 5 · cancelled 0" in screen, screen  # on the bar
    assert (
        f"{batch_id} finished: 1 completed, 5 failed; "
        f"see the failures with: relay batch results {batch_id} --failed"
    ) in screen, screen
    failed = demo.cli("batch", "results", batch_id, "--failed")
    rows = [json.loads(line) for line in failed.stdout.splitlines()]
    assert [(r["idx"], r["state"]) for r in rows] == [(n, "discarded") for n in range(1, 6)]
    assert all(r["error"] == "upstream returned 400: Invalid request." for r in rows)
    status = status_lines(demo, batch_id)
    assert status["state"] == "finished" and status["items"] == "6 (completed 1, discarded 5)"
    assert status["5"] == f"failed: see them with: relay batch results {batch_id} --failed"


def test_wait_reacts_to_a_cancel_and_every_cancelled_item_is_counted(demo: Demo, tmp_path: Path) -> None:
    before = metric_value(
        httpx.get(f"{demo.control_url}/metrics").text, "relay_batch_items_finished_total", state="cancelled"
    )
    n = 40  # more than the demo's 16 workers and the 16 items they claim ahead: 8 stay waiting
    slow = write_jsonl(tmp_path / "slow.jsonl", [item(i, latency_ms=60_000) for i in range(n)])
    term = Terminal(demo, "batch", "submit", str(slow), "--shape", "openai", "--wait")
    wait_for("the bar to show a running batch", lambda: " running " in term.screen, timeout=60)
    batch_id = next(w for w in term.screen.split() if w.startswith("b_"))
    assert status_lines(demo, batch_id)["state"] == "running"

    # A batch submitted behind it has nothing started yet.
    later = demo.cli(
        "batch", "submit", str(write_jsonl(tmp_path / "two.jsonl", [item(0), item(1)])), "--shape", "openai"
    )
    assert later.returncode == 0, later.stderr
    assert status_lines(demo, later.stdout.strip())["state"] == "waiting"

    cancelled = demo.cli("batch", "cancel", batch_id)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"cancelled {batch_id}"
    code, stdout, screen = term.finish(timeout=60)
    assert code == 2 and stdout.strip() == batch_id, (code, screen)
    assert "cancelled 40" in screen and f"{batch_id} cancelled" in screen, screen  # the bar saw it
    assert screen.rstrip().endswith(f"{batch_id} cancelled: 0 completed, 40 cancelled"), screen
    assert status_lines(demo, batch_id)["state"] == "cancelled"

    def counted() -> float:
        text = httpx.get(f"{demo.control_url}/metrics").text
        return metric_value(text, "relay_batch_items_finished_total", state="cancelled") - before

    wait_for(f"{n} cancelled items counted", lambda: counted() >= n, timeout=30)
    assert counted() == n  # waiting, claimed-ahead and running items, each once
    finished = demo.cli("batch", "submit", str(tmp_path / "two.jsonl"), "--shape", "openai", "--wait")
    assert finished.returncode == 0, finished.stderr  # all completed: exit 0
    assert finished.stderr.strip().endswith("finished: 2 completed"), finished.stderr


def test_bad_lines_are_named_by_line_and_index(demo: Demo, tmp_path: Path) -> None:
    not_json = tmp_path / "broken.jsonl"
    not_json.write_text(json.dumps(item(0)) + "\n\n" + "{oops\n")
    refused = demo.cli("batch", "submit", str(not_json), "--shape", "openai")
    assert refused.returncode == 1 and refused.stdout == ""
    assert f"{not_json}: line 3 (requests[1]) is not JSON" in refused.stderr, refused.stderr

    streamed = tmp_path / "streamed.jsonl"
    streamed.write_text(json.dumps(item(0)) + "\n\n" + json.dumps(item(1) | {"stream": True}) + "\n")
    refused = demo.cli("batch", "submit", str(streamed), "--shape", "openai")
    assert refused.returncode == 1 and refused.stdout == ""
    assert "400: line 3 (requests[1]): stream is not allowed" in refused.stderr, refused.stderr


def test_status_view_without_items(demo: Demo, tmp_path: Path) -> None:
    done = demo.cli(
        "batch", "submit", str(write_jsonl(tmp_path / "one.jsonl", [item(0)])), "--shape", "openai", "--wait"
    )
    assert done.returncode == 0, done.stderr
    batch_id = done.stdout.strip()
    headers = {"Authorization": f"Bearer {demo.key}"}
    full = httpx.get(f"{demo.url}/v1/batches/{batch_id}", headers=headers).json()
    assert full["items"] == [{"idx": 0, "state": "completed"}]  # the default view keeps its items
    lean = httpx.get(f"{demo.url}/v1/batches/{batch_id}?items=false", headers=headers).json()
    assert lean == {k: v for k, v in full.items() if k != "items"}
    assert httpx.get(f"{demo.url}/v1/batches/{batch_id}?items=true", headers=headers).json() == full
    bad = httpx.get(f"{demo.url}/v1/batches/{batch_id}?items=no", headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "items must be true or false"
