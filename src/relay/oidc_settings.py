"""Single sign-on settings and group mapping as values (SPEC §21): pure and below relay.config, so
the start-up check, the sign-in and their tests share one reading of ``RELAY_OIDC_*``.

``RELAY_OIDC_PROJECT_GROUPS`` is ``group=project[:policy],…``: an account in ``group`` is a member of
``project`` (with ``policy`` when given). At each sign-in the memberships in the projects this mapping
names become exactly those the account's current groups grant; other projects are left alone.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"  # relay.domain.ids.NAME_PATTERN (a lower layer cannot import it)

_NAME = re.compile(NAME_PATTERN)
_GROUP = re.compile(r"^[^\s=,]{1,256}$")


@dataclass(frozen=True)
class GroupGrant:
    """Members of ``group`` belong to ``project`` (under ``policy`` when set)."""

    group: str
    project: str
    policy: str | None = None

    def __str__(self) -> str:
        return f"{self.group}={self.project}" + (f":{self.policy}" if self.policy else "")


def parse_project_groups(text: object) -> tuple[GroupGrant, ...]:
    """``group=project[:policy],…`` → grants; a malformed entry raises ValueError naming it."""
    if not isinstance(text, str):
        return text  # type: ignore[return-value]  # already parsed (a Settings built in code)
    grants: list[GroupGrant] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        group, eq, target = entry.partition("=")
        project, _, policy = target.partition(":")
        group, project, policy = group.strip(), project.strip(), policy.strip()
        if not eq or not _GROUP.match(group) or not _NAME.match(project):
            raise ValueError(f"{entry!r} is not group=project[:policy] (project and policy are names)")
        if ":" in target and not _NAME.match(policy):
            raise ValueError(f"{entry!r}: the policy after ':' must be a name")
        grants.append(GroupGrant(group, project, policy or None))
    return tuple(grants)


def parse_groups(text: object) -> tuple[str, ...]:
    """A comma-separated list of group names (``RELAY_OIDC_ADMIN_GROUPS``)."""
    if not isinstance(text, str):
        return text  # type: ignore[return-value]  # already parsed (a Settings built in code)
    groups = tuple(g.strip() for g in text.split(",") if g.strip())
    for group in groups:
        if not _GROUP.match(group):
            raise ValueError(f"{group!r} is not a group name")
    return groups


def check_issuer(url: str) -> str:
    """An issuer URL: http(s) with a host; https unless the host is loopback (a local test provider)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError("must be the provider's http(s) issuer URL, e.g. https://login.example.com/realms/x")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ValueError("must use https (http is accepted for a loopback issuer only)")
    return url.rstrip("/")


def check_scopes(scopes: str) -> str:
    if "openid" not in scopes.split():
        raise ValueError("must include openid (e.g. 'openid email profile')")
    return " ".join(scopes.split())


def check_redirect(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
        raise ValueError("must be the absolute http(s) URL of /ui/sso/callback as the provider knows it")
    return url


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def desired_memberships(
    grants: Iterable[GroupGrant], groups: Iterable[str]
) -> tuple[set[str], dict[str, str | None]]:
    """The projects the mapping manages, and project → policy the account's groups grant now.
    Two groups granting one project: the first grant with a policy wins (a policy is more specific)."""
    held = set(groups)
    managed: set[str] = set()
    wanted: dict[str, str | None] = {}
    for grant in grants:
        managed.add(grant.project)
        if grant.group in held and wanted.get(grant.project) is None:
            wanted[grant.project] = grant.policy
    return managed, wanted


def merged_memberships(
    current: Iterable[Mapping[str, str | None]], managed: set[str], wanted: Mapping[str, str | None]
) -> list[dict[str, str | None]]:
    """A user's membership list after a sign-in: unmanaged projects kept in their order, then the
    managed projects the groups grant (policy as granted), in the order of the mapping."""
    kept = [
        {"project": m["project"], "policy": m.get("policy")} for m in current if m["project"] not in managed
    ]
    granted = [{"project": project, "policy": policy} for project, policy in wanted.items()]
    return [*kept, *granted]


def groups_of(claims: Mapping[str, object], claim: str) -> tuple[str, ...]:
    """The account's groups from the ID token or userinfo: a list of strings, or one string."""
    value = claims.get(claim)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value if isinstance(v, (str, int)))
    return ()
