"""``domain.audit``: the entry hash as SPEC §21 words it, redaction, and the chain verdict for each
kind of tampering (an edit, a removal, an insertion), without a database."""

from __future__ import annotations

import hashlib
from typing import Any

from relay.domain.audit import GENESIS, REDACTED, canonical, entry_hash, redacted, verify_chain


def chain(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    prev = GENESIS
    for i in range(n):
        entry = {"id": f"aud_{i}", "action": "create", "kind": "Team", "ref": f"tm_{i}", "prev_hash": prev}
        entry["hash"] = prev = entry_hash(entry)
        out.append(entry)
    return out


def test_the_hash_covers_prev_hash_and_the_canonical_entry_without_hash() -> None:
    entry = {"b": "é ✓", "a": {"z": 1, "y": [True, None]}, "prev_hash": GENESIS, "hash": "ignored"}
    text = '{"a":{"y":[true,null],"z":1},"b":"é ✓","prev_hash":"' + GENESIS + '"}'
    assert canonical({k: v for k, v in entry.items() if k != "hash"}) == text
    assert entry_hash(entry) == hashlib.sha256((GENESIS + text).encode()).hexdigest()


def test_write_only_fields_are_redacted_and_empty_objects_left_out() -> None:
    shown = redacted({"name": "u", "password": "pw", "secret": None}, ("password", "secret"))
    assert shown == {"name": "u", "password": REDACTED, "secret": None}
    assert redacted({}, ("password",)) is None and redacted(None, ()) is None


def test_an_intact_chain_verifies() -> None:
    assert verify_chain(chain(5)).as_json() == {"ok": True, "entries": 5, "first_bad": None}
    assert verify_chain([]).as_json() == {"ok": True, "entries": 0, "first_bad": None}


def test_an_edit_a_removal_and_an_insertion_are_each_found_at_the_right_entry() -> None:
    edited = chain(5)
    edited[2]["ref"] = "tm_other"
    assert verify_chain(edited).first_bad == "aud_2"

    removed = chain(5)
    del removed[2]
    assert verify_chain(removed).as_json() == {"ok": False, "entries": 4, "first_bad": "aud_3"}

    inserted = chain(5)
    forged = {
        "id": "aud_x",
        "action": "delete",
        "kind": "Team",
        "ref": "tm_x",
        "prev_hash": inserted[1]["hash"],
    }
    forged["hash"] = entry_hash(forged)
    inserted.insert(2, forged)
    assert verify_chain(inserted).first_bad == "aud_2"  # the entry after the forgery links past it

    rehashed = chain(5)
    rehashed[4]["hash"] = "0" * 64
    assert verify_chain(rehashed).first_bad == "aud_4"
