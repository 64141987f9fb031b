"""Model grants on a policy (SPEC §2): ``*``, ``<provider>/*``, ``<model>``, ``@<host>``,
``<model>@<host>``. Grants are patterns, not references: a grant may name a model or host that does
not exist (yet), so deleting a model never has to rewrite policies."""

from __future__ import annotations

import re
from dataclasses import dataclass

_PART = r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}"
_GRANT = re.compile(
    rf"^(?:\*|(?P<provider>{_PART})/\*|(?P<model>{_PART})?(?:@(?P<host>[a-z0-9][a-z0-9-]{{0,62}}))?)$"
)


@dataclass(frozen=True)
class Grant:
    every: bool = False
    provider: str | None = None
    model: str | None = None
    host: str | None = None


def parse_grant(text: str) -> Grant:
    """Parse one grant; ValueError with the offending text when it matches none of the five forms."""
    if text == "*":
        return Grant(every=True)
    match = _GRANT.match(text)
    if not match or text == "" or text == "@":
        raise ValueError(f"grant {text!r} must be *, <provider>/*, <model>, @<host> or <model>@<host>")
    if match.group("provider"):
        return Grant(provider=match.group("provider"))
    return Grant(model=match.group("model"), host=match.group("host"))


def grant_matches(
    grant: Grant, *, model: str, aliases: tuple[str, ...], provider: str, host: str | None
) -> bool:
    """Does ``grant`` allow this model on ``host`` (None: on any host, for listing)?"""
    if grant.every:
        return True
    if grant.provider is not None:
        return grant.provider == provider
    if grant.model is not None and grant.model != model and grant.model not in aliases:
        return False
    return grant.host is None or host is None or grant.host == host
