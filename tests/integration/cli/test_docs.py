"""The README's and the docs' examples, run against a real ``relay demo`` (so a doc that drifts fails).

Which blocks run: a fenced block whose info string carries the word ``test`` after its language —
```` ```sh test ```` or ```` ```python test ````. Other blocks (output, YAML, commands that need a
production setup) are only shown. A document's shell blocks run in order in one ``bash`` (variables
set by one block are seen by the next), ``set -euo pipefail``, from the demo's directory (so
``relay-data/demo.key`` and ``relay-data/admin.token`` are there) with ``RELAY_URL``,
``RELAY_CONTROL_URL``, ``RELAY_API_KEY``, ``RELAY_ADMIN_TOKEN`` and ``RELAY_TOKEN`` (the demo user's
inference token) exported, as the demo's banner tells a user to. The docs' default addresses
(``http://127.0.0.1:8080`` and ``:8081``) are pointed at the demo's ports and ``.venv/bin/relay`` at
the installed command.

Every ``curl`` fails the run on an HTTP error, unless the line after the command is an expected
answer, ``# <status> <body>``: then the status must match, and the body too when it is complete JSON
(a body shortened with ``…`` is not compared). Python blocks run one by one and must exit 0.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.cli.demo_process import Demo

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)(.*)$")
EXPECT = re.compile(r"^# (\d{3}) ?(.*)$")
SHELLS = ("sh", "bash")


@dataclass
class Block:
    language: str
    line: int  # 1-based line of the opening fence
    text: str


@dataclass
class Script:
    """A document's shell blocks as one bash script, and the answers its checks expect."""

    text: str
    expected: dict[int, tuple[int, str, int]] = field(default_factory=dict)  # check → status, body, line


def runnable_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if "test" in match.group(2).split():
            blocks.append(Block(match.group(1), start + 1, "\n".join(body)))
    return blocks


def localize(text: str, demo: Demo) -> str:
    return (
        text.replace("http://127.0.0.1:8080", demo.url)
        .replace("http://127.0.0.1:8081", demo.control_url)
        .replace(".venv/bin/relay", "relay")
    )


def shell_script(blocks: list[Block], demo: Demo) -> Script:
    script = Script(
        "set -euo pipefail\n"
        'curl() { command curl -sS --fail-with-body "$@"; }\n'  # an HTTP error fails the example
    )
    parts: list[str] = []
    for block in blocks:
        parts.append(f"echo '@@block {block.line}' >&2")
        lines = localize(block.text, demo).splitlines()
        pending: list[str] = []
        for offset, line in enumerate(lines):
            expect = EXPECT.match(line)
            if expect is None:
                pending.append(line)
                continue
            starts = [n for n, text in enumerate(pending) if text.startswith("curl ")]
            if not starts:
                raise AssertionError(f"line {block.line + offset + 1}: an expected answer after no curl")
            command = "\n".join(pending[starts[-1] :])[len("curl ") :]
            check = len(script.expected)
            script.expected[check] = (int(expect.group(1)), expect.group(2), block.line + offset + 1)
            parts.extend(pending[: starts[-1]])
            parts.append(
                f"__answer=$(command curl -sS -w '\\n@@status %{{http_code}}' {command}\n)\n"
                f"printf '@@check {check}\\n%s\\n' \"$__answer\""
            )
            pending = []
        parts.extend(pending)
    script.text += "\n".join(parts) + "\n"
    return script


def check_answers(script: Script, stdout: str, where: str) -> None:
    for check, (status, body, line) in script.expected.items():
        match = re.search(rf"@@check {check}\n(.*?)\n@@status (\d{{3}})", stdout, re.DOTALL)
        assert match is not None, f"{where}:{line}: the example's command did not run"
        got_body, got_status = match.group(1), int(match.group(2))
        said = f"{where}:{line}: answered {got_status} {got_body}, the doc says {status}"
        assert got_status == status, said
        if body and "…" not in body:
            assert json.loads(got_body) == json.loads(body), f"{where}:{line}: answered {got_body}"


def documents_with_examples() -> list[Path]:
    return [path for path in DOCUMENTS if runnable_blocks(path)]


@pytest.mark.parametrize("path", documents_with_examples(), ids=lambda p: p.name)
def test_examples_run(demo: Demo, path: Path) -> None:
    where = str(path.relative_to(ROOT))
    blocks = runnable_blocks(path)
    env = demo.env() | {"RELAY_TOKEN": demo.token}
    shell = [b for b in blocks if b.language in SHELLS]
    if shell:
        script = shell_script(shell, demo)
        done = subprocess.run(
            ["bash", "-c", script.text],
            cwd=demo.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        last = re.findall(r"@@block (\d+)", done.stderr)
        assert done.returncode == 0, (
            f"{where}: the shell example at line {last[-1] if last else '?'} failed "
            f"(exit {done.returncode}):\n{done.stderr[-3000:]}\n{done.stdout[-2000:]}"
        )
        check_answers(script, done.stdout, where)
    for block in blocks:
        if block.language != "python":
            continue
        ran = subprocess.run(
            [sys.executable, "-c", localize(block.text, demo)],
            cwd=demo.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, f"{where}:{block.line}: the Python example failed:\n{ran.stderr[-3000:]}"


def test_the_docs_have_runnable_examples() -> None:
    """The runner finds what it should: a doc whose examples lose their marker would silently stop
    being tested."""
    names = {path.name for path in documents_with_examples()}
    expected = {"README.md", "batches.md", "inference-api.md", "control-api.md", "deployment.md"}
    expected |= {"credentials.md", "observability.md"}
    assert expected <= names
