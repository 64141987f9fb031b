"""``relay users …`` and ``relay tokens mint``: the people who use Relay, over the control API.

Why these exist beside ``relay apply``: an operator onboarding someone wants one command for the
user and one for a short-lived inference token to hand over (SPEC §3.2), not a YAML document and a
``curl``. They call the same control-plane routes as everything else (``RELAY_CONTROL_URL``,
``RELAY_ADMIN_TOKEN``). A password is read from a prompt or from ``RELAY_USER_PASSWORD``, never from a
flag, so it does not land in the shell history or the process list.
"""

from __future__ import annotations

import os
from typing import Any

import typer

from relay.cli.support import admin_call, err, fail, print_table

users_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Users (list, create), over the control API (RELAY_CONTROL_URL).",
)
tokens_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Inference tokens (mint), over the control API (RELAY_CONTROL_URL).",
)


def _membership(text: str) -> dict[str, str]:
    """``project`` or ``project:policy`` → a membership of SPEC §2."""
    project, _, policy = text.partition(":")
    if not project:
        fail(f"--member {text!r}: use PROJECT or PROJECT:POLICY")
    return {"project": project, **({"policy": policy} if policy else {})}


@users_app.command("list")
def users_list() -> None:
    """Users: name, email, state and the projects they are members of."""
    rows = []
    for user in admin_call("GET", "/api/users")["items"]:
        projects = ", ".join(
            m["project"] + (f":{m['policy']}" if m.get("policy") else "") for m in user["memberships"]
        )
        rows.append(
            [user["id"], user["name"], user["email"], "enabled" if user["enabled"] else "disabled", projects]
        )
    print_table(["id", "name", "email", "state", "projects"], rows)


@users_app.command("create")
def users_create(
    name: str = typer.Argument(..., help="The user's name (unique)"),
    email: str = typer.Option(..., "--email", help="Email, used to sign in"),
    member: list[str] = typer.Option([], "--member", help="PROJECT or PROJECT:POLICY (repeatable)"),
    password: bool = typer.Option(
        False, "--password", help="Set a password: prompted for, or RELAY_USER_PASSWORD"
    ),
) -> None:
    """Create a user; prints its id on stdout."""
    body: dict[str, Any] = {"name": name, "email": email, "memberships": [_membership(m) for m in member]}
    if password:
        secret = os.environ.get("RELAY_USER_PASSWORD") or typer.prompt(
            "password", hide_input=True, confirmation_prompt=True
        )
        body["password"] = secret
    created = admin_call("POST", "/api/users", body)
    err.print(f"created user {created['name']} ({created['email']})")
    print(created["id"])


@tokens_app.command("mint")
def tokens_mint(
    user: str = typer.Option(..., "--user", help="User (name or id)"),
    project: str = typer.Option(
        ..., "--project", help="Project the token acts in (the user must be a member)"
    ),
    ttl_seconds: int = typer.Option(3600, "--ttl-seconds", help="Lifetime, 1-86400 seconds"),
) -> None:
    """Mint an inference token for a user; prints only the token on stdout (its jti and expiry on stderr)."""
    minted = admin_call("POST", f"/api/users/{user}/tokens", {"project": project, "ttl_seconds": ttl_seconds})
    err.print(f"token {minted['jti']} for {user} in {project}, expires {minted['expires_at']}")
    print(minted["token"])
