"""``relay apply`` reads YAML within bounds (billion laughs → one-line error, not 4 GB)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from relay.yaml_documents import DocumentsRefused, load_documents
from tests.fixtures.relay_server import RELAY_BIN

LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_billion_laughs_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS)
    with pytest.raises(DocumentsRefused, match="expands to more than"):
        load_documents(path)


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("a: &a [*a]\n")
    with pytest.raises(DocumentsRefused, match="recursive"):
        load_documents(path)


def test_modest_aliases_still_work(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(
        "- {kind: Team, name: t, spec: &s {display_name: T}}\n- {kind: Team, name: u, spec: *s}\n"
        "---\nkind: Team\nname: v\n"
    )
    docs = load_documents(path)
    assert [d["kind"] for d in docs] == ["Team", "Team", "Team"]
    assert docs[1]["spec"] == {"display_name": "T"}


def test_relay_apply_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS)
    # No control plane is needed: the file is refused before anything is sent.
    result = subprocess.run(
        [RELAY_BIN, "apply", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "RELAY_CONTROL_URL": "http://127.0.0.1:9"},
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "expands to more than" in result.stderr
