"""docs/control-api.md names the apply kinds in apply order: the list a user reads must be the one
`POST /api/apply` uses (a kind added to the catalog and forgotten in the doc fails here)."""

from __future__ import annotations

import re
from pathlib import Path

from relay.control.kinds import KINDS

DOC = Path(__file__).resolve().parents[3] / "docs" / "control-api.md"


def test_the_apply_kinds_in_the_doc_are_the_catalogs_in_apply_order() -> None:
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    match = re.search(r"`kind` is one of `([A-Za-z ]+)`", text)
    assert match, "docs/control-api.md no longer lists the apply kinds"
    assert match.group(1).split() == [kind.name for kind in KINDS]


def test_the_kinds_table_has_a_row_per_kind() -> None:
    rows = re.findall(r"^\| (\w+) \| `/api/", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    assert rows == [kind.name for kind in KINDS]
