"""``tests/spec-coverage.md`` cites only tests that exist: every file and test its tables and headings name.

The citation format: a backticked ``<layer>/<path>.py`` (``unit/``, ``integration/`` or ``e2e/``, relative
to ``tests/``), optionally ``::test_name``; a backticked ``::test_name`` names a test of the file cited
last in the same table cell or heading; a parametrized test may be cited with its id,
``::test_name[id]``. A wildcard path (``unit/adapters/test_translation_*.py``) must match at least one
file and cannot be continued; a backticked ``<layer>/<dir>/`` (a whole suite) must be a directory. A
bare ``test_x.py`` is refused: two layers may hold modules of that name.

What this does not know: whether a test proves what its row says (that is review's job).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
COVERAGE = TESTS / "spec-coverage.md"
LAYERS = ("unit/", "integration/", "e2e/")
_CODE = re.compile(r"`([^`]+)`")
_CITATION = re.compile(r"^(?P<path>[\w/*.]+\.py)?(?:::(?P<test>\w+)(?:\[[^\]]*\])?)?$")


@cache
def defined_names(path: Path) -> frozenset[str]:
    """Names of the functions and classes a test module defines, at any depth (a class's methods too)."""
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return frozenset(node.name for node in ast.walk(tree) if isinstance(node, kinds))


def broken_citations(text: str) -> list[str]:
    """Each broken citation as ``line N: what``; [] when every cited file and test exists."""
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith(("|", "#")):
            continue  # prose (the introduction) describes the format; the tables and headings cite
        for cell in line.split("|"):
            current: Path | None = None
            for token in _CODE.findall(cell):
                if token.startswith(LAYERS) and token.endswith("/"):
                    if not (TESTS / token).is_dir():
                        problems.append(f"line {number}: `{token}`: no such directory")
                    continue
                match = _CITATION.match(token)
                if match is None or not (match["path"] or match["test"]):
                    continue
                path, test = match["path"], match["test"]
                if path is not None:
                    if not path.startswith(LAYERS):
                        if Path(path).name.startswith("test_"):
                            problems.append(f"line {number}: `{token}` names no layer ({', '.join(LAYERS)})")
                        current = None
                        continue
                    if "*" in path:
                        if not list(TESTS.glob(path)):
                            problems.append(f"line {number}: `{token}` matches no file")
                        current = None
                        continue
                    current = TESTS / path
                    if not current.is_file():
                        problems.append(f"line {number}: `{token}`: no such file")
                        current = None
                        continue
                if test is not None:
                    if current is None:
                        problems.append(f"line {number}: `{token}` follows no cited file in its cell")
                    elif test not in defined_names(current):
                        problems.append(
                            f"line {number}: `{token}`: {current.relative_to(TESTS)} has no {test}"
                        )
    return problems


def test_every_cited_test_exists() -> None:
    problems = broken_citations(COVERAGE.read_text())
    assert not problems, "tests/spec-coverage.md cites what does not exist:\n" + "\n".join(problems)


def test_the_check_finds_a_missing_file_a_missing_test_and_an_imprecise_path() -> None:
    rows = "\n".join(
        [
            "| a | `unit/test_spec_coverage.py::test_every_cited_test_exists`, `::broken_citations` |",
            "| b | `unit/no_such_module.py` |",
            "| c | `unit/test_spec_coverage.py::test_nothing_by_this_name` |",
            "| d | `test_spec_coverage.py` |",
            "| e | `::test_every_cited_test_exists` |",
            "| f | `unit/test_nothing_*.py` |",
            "| g | `integration/no_such_area/` |",
        ]
    )
    assert [problem.split(":")[0] for problem in broken_citations(rows)] == [
        "line 2",
        "line 3",
        "line 4",
        "line 5",
        "line 6",
        "line 7",
    ]
