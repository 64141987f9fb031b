"""The supply chain (#28): installs come from hashed lock files that match pyproject.toml, and
`make sbom` describes exactly what the image installs.

Why these checks and not a test of pip: pip's hash checking is pip's to test. What can silently rot
here is ours — a dependency added to pyproject.toml but not to the lock (then `make` would install an
environment that does not satisfy the package), a lock line without hashes (then `--require-hashes`
refuses the whole install), or a Makefile that stops asking for hashes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.integration.deploy.deploy_helpers import REPO

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)")


def read_lock(path: Path) -> dict[str, tuple[str, int]]:
    """name → (version, number of hashes), from a `uv pip compile --generate-hashes` file."""
    pins: dict[str, tuple[str, int]] = {}
    current: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if match := PIN.match(line):
            current = canonicalize_name(match.group(1))
            pins[current] = (match.group(2), 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        elif line.strip() and not line.startswith((" ", "#")):
            pytest.fail(f"{path.name}: a line that is not an exact pin: {line!r}")
    return pins


def pyproject_requirements(*extras: str) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    build = (REPO / "requirements" / "build.in").read_text(encoding="utf-8").splitlines()
    lines += [line for line in build if line.strip() and not line.startswith("#")]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize(("lock", "extras"), [("dev.lock", ("dev",)), ("runtime.lock", ())])
def test_every_requirement_is_pinned_in_the_lock_within_its_range_and_hashed(
    lock: str, extras: tuple[str, ...]
) -> None:
    pins = read_lock(REPO / "requirements" / lock)
    assert pins, f"{lock} pins nothing"
    for requirement in pyproject_requirements(*extras):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is in pyproject.toml but not in {lock}: run `make lock`"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{lock} pins {name}=={version}, outside pyproject.toml's {requirement}: run `make lock`"
        )
    unhashed = sorted(name for name, (_, hashes) in pins.items() if hashes == 0)
    assert not unhashed, f"{lock} pins without a hash: {unhashed}"


def test_the_runtime_lock_holds_no_development_tool() -> None:
    """The image installs the runtime lock: a test runner in it would be dead weight and attack surface."""
    pins = read_lock(REPO / "requirements" / "runtime.lock")
    for tool in ("pytest", "mypy", "ruff", "playwright", "uv", "cyclonedx-bom"):
        assert tool not in pins, f"{tool} is in the runtime lock"


def test_make_installs_from_the_dev_lock_with_hashes_required() -> None:
    """What `make test` and `make demo` run on a fresh clone, read from make itself (-n -B)."""
    make = shutil.which("make")
    assert make, "make is needed to check the Makefile"
    out = subprocess.run(
        [make, "-n", "-B", ".venv/.installed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    installs = [line for line in out.splitlines() if "pip install" in line]
    assert installs, out
    from_lock = [line for line in installs if "-r requirements/dev.lock" in line]
    assert from_lock and all("--require-hashes" in line and "--no-deps" in line for line in from_lock), out
    for line in installs:
        if line not in from_lock:
            assert "--no-deps" in line and "--no-build-isolation" in line, (
                f"an install outside the lock may fetch unchecked packages: {line}"
            )


def test_make_sbom_lists_every_runtime_package_with_its_hashes(tmp_path: Path) -> None:
    make = shutil.which("make")
    assert make, "make is needed for `make sbom`"
    sbom = REPO / "sbom.cdx.json"
    subprocess.run([make, "sbom"], cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
    document = json.loads(sbom.read_text(encoding="utf-8"))
    assert document["bomFormat"] == "CycloneDX"
    assert document["metadata"]["component"]["name"] == "relay"
    listed = {canonicalize_name(component["name"]): component for component in document["components"]}
    pins = read_lock(REPO / "requirements" / "runtime.lock")
    assert set(listed) == set(pins)
    for name, (version, hashes) in pins.items():
        component = listed[name]
        assert component["version"] == version
        assert component["purl"] == f"pkg:pypi/{name}@{version}"
        recorded = [h for ref in component.get("externalReferences", []) for h in ref.get("hashes", [])]
        assert len(recorded) == hashes, f"{name}: {len(recorded)} hashes in the SBOM, {hashes} in the lock"
