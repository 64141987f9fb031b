"""The audit log's entry shape and hash chain (SPEC §21), as pure functions over plain values.

What it does. :func:`entry_hash` is the one definition of an entry's hash: ``sha256(prev_hash +
canonical JSON of the entry without "hash")``, canonical meaning sorted keys, ``,``/``:`` separators
and UTF-8 left unescaped, so anyone can recompute it with ``jq``/``sha256sum`` or a few lines of any
language. :func:`verify_chain` walks entries oldest first and names the first one that does not hold.
:func:`redacted` replaces write-only fields in a before/after object.

What it deliberately does not know: where entries are stored or who made them (``store.audit`` and
``control.audit``). The entry given to :func:`entry_hash` must be exactly what ``GET /api/audit`` shows,
or a verifier outside Relay would compute another hash.

Invariants. The first entry's ``prev_hash`` is :data:`GENESIS` (64 zeros); every later entry's
``prev_hash`` is the previous entry's ``hash``; optional fields (``before``, ``after``, an actor's
``id``/``email``) are left out when empty, never written as null, on both sides of the hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

GENESIS: Final = "0" * 64
REDACTED: Final = "<redacted>"

ActorKind = Literal["admin_token", "user", "oidc"]
AuditAction = Literal[
    "create",
    "update",
    "delete",
    "rotate",
    "revoke",
    "apply",
    "cancel",
    "purge",
    "test",
    "redeliver",
    "sign_in",
    "sign_in_failed",
]
ACTOR_KINDS: Final = get_args(ActorKind)
ACTIONS: Final = get_args(AuditAction)


def canonical(entry: Mapping[str, Any]) -> str:
    """The canonical JSON the hash covers: sorted keys, no spaces, UTF-8 unescaped."""
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def entry_hash(entry: Mapping[str, Any]) -> str:
    """sha256 hex of ``prev_hash`` + the canonical JSON of ``entry`` without its ``hash``."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256((str(entry["prev_hash"]) + canonical(body)).encode()).hexdigest()


def redacted(obj: Mapping[str, Any] | None, write_only: Iterable[str]) -> dict[str, Any] | None:
    """``obj`` with every write-only field that holds a value shown as ``"<redacted>"``; None for an
    empty object (the entry then leaves the field out)."""
    if not obj:
        return None
    out = dict(obj)
    for name in write_only:
        if out.get(name) not in (None, ""):
            out[name] = REDACTED
    return out


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    entries: int
    first_bad: str | None

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "entries": self.entries, "first_bad": self.first_bad}


class ChainCheck:
    """Entries fed oldest first (:meth:`add`): the first whose stored hash is not the recomputed one,
    or whose ``prev_hash`` is not the previous entry's hash (a row removed before it, or one inserted),
    is ``first_bad``. Counting goes on to the end so ``entries`` is the log's size. Constant memory:
    the log is streamed through it."""

    def __init__(self) -> None:
        self._previous = GENESIS
        self._count = 0
        self._first_bad: str | None = None

    def add(self, entry: Mapping[str, Any]) -> None:
        self._count += 1
        if self._first_bad is None and (
            entry["prev_hash"] != self._previous or entry_hash(entry) != entry["hash"]
        ):
            self._first_bad = str(entry["id"])
        self._previous = str(entry["hash"])

    def verdict(self) -> Verdict:
        return Verdict(self._first_bad is None, self._count, self._first_bad)


def verify_chain(entries: Iterable[Mapping[str, Any]]) -> Verdict:
    """:class:`ChainCheck` over ``entries``, oldest first."""
    check = ChainCheck()
    for entry in entries:
        check.add(entry)
    return check.verdict()
