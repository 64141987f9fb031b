"""Where a YAML file is wrong (``relay apply``): PyYAML's error as one line with a 1-based line and
column, and the line each document starts on (so the control plane's ``documents[i]`` can be found)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from relay.yaml_documents import load_documents, load_documents_with_lines, yaml_problem


def _problem(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(yaml.YAMLError) as raised:
        load_documents(path)
    return yaml_problem(raised.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "kind: Team\nname: x\nspec: {display_name: [a, b}\n",
            "line 3, column 27: expected ',' or ']', but got '}' "
            "(while parsing a flow sequence started at line 3, column 22)",
        ),
        ("a: b\n c: d\n", "line 2, column 3: mapping values are not allowed here"),
        (
            "kind: Team\n\tname: a\n",
            "line 2, column 1: found character '\\t' that cannot start any token "
            "(while scanning for the next token)",
        ),
        (
            'a: "b\n',
            "line 2, column 1: found unexpected end of stream "
            "(while scanning a quoted scalar started at line 1, column 4)",
        ),
    ],
)
def test_a_yaml_error_says_where_in_one_line(tmp_path: Path, text: str, said: str) -> None:
    assert _problem(tmp_path, text) == said


def test_each_document_knows_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "docs.yaml"
    path.write_text(
        "- {kind: Team, name: t}\n- {kind: Team, name: u}\n---\n\n# a comment\nkind: Team\nname: v\n"
        "---\n---\n- kind: Host\n  name: h\n- kind: Model\n  name: m\n"
    )
    docs, lines = load_documents_with_lines(path)
    assert [d["name"] for d in docs] == ["t", "u", "v", "h", "m"]
    assert lines == [1, 2, 6, 10, 12]
    assert load_documents(path) == docs
