"""The response cache's key (SPEC §19): one pure function, so what makes two requests "the same" is
decided in one place and tested on its own.

The key is the SHA-256 of the scope (its kind and id: a project, policy or credential), the route's
shape and the canonical JSON of the body — keys sorted at every depth, compact, with ``stream``,
``stream_options`` and ``user`` left out (they change how an answer is delivered or who is named, not
the answer). The shape is the caller's wire shape, so route aliases (``/v1/chat/completions`` and
``/openai/v1/chat/completions``) and a batch item of that shape share keys with the live route.

The body given here is the one the request is about to be answered for: the caller's body after any
input step that rewrites it (§20's input redaction comes before the lookup), never the upstream body a
translation produced. What it deliberately does not know: stores, TTLs, the policy's namespace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

import orjson

#: Body fields that never change the answer and so are not part of the key.
IGNORED_FIELDS: Final = frozenset(("stream", "stream_options", "user"))


def canonical_body(body: Mapping[str, Any]) -> bytes:
    """The body's canonical JSON: sorted keys at every depth, compact, without :data:`IGNORED_FIELDS`."""
    kept = {k: v for k, v in body.items() if k not in IGNORED_FIELDS}
    try:
        return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer past 64 bits: the standard library writes it exactly
        return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def cache_key(scope: str, scope_id: str, shape: str, body: Mapping[str, Any]) -> str:
    """The hex SHA-256 key of ``body`` asked in ``shape`` within the scope ``scope``/``scope_id``."""
    digest = hashlib.sha256()
    for part in (scope, scope_id, shape):
        digest.update(part.encode())
        digest.update(b"\x00")  # a separator no id or shape contains: ("ab", "c") ≠ ("a", "bc")
    digest.update(canonical_body(body))
    return digest.hexdigest()
