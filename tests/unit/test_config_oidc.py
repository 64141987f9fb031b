"""Single sign-on settings (SPEC §21): defaults, parsing, and a bad value stopping the start with one
line naming the variable (SPEC §1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import ConfigError, load_settings
from relay.oidc_settings import GroupGrant, desired_memberships, groups_of, merged_memberships
from tests.unit.test_config import _run


def test_sso_is_off_by_default_and_defaults_match_the_spec() -> None:
    s = load_settings({})
    assert s.oidc_issuer is None and s.oidc_client_id is None and s.oidc_client_secret is None
    assert (s.oidc_scopes, s.oidc_groups_claim) == ("openid email profile", "groups")
    assert s.oidc_admin_groups == () and s.oidc_project_groups == () and s.oidc_redirect_url is None


def test_a_full_configuration_is_parsed() -> None:
    s = load_settings(
        {
            "RELAY_OIDC_ISSUER": "https://login.example.com/realms/acme/",
            "RELAY_OIDC_CLIENT_ID": "relay",
            "RELAY_OIDC_CLIENT_SECRET": "very-secret-value",
            "RELAY_OIDC_ADMIN_GROUPS": "ops-admins, platform",
            "RELAY_OIDC_PROJECT_GROUPS": "eng=alpha:gold, data=beta",
            "RELAY_OIDC_REDIRECT_URL": "https://relay.example.com/ui/sso/callback",
        }
    )
    assert s.oidc_issuer == "https://login.example.com/realms/acme"
    assert s.oidc_admin_groups == ("ops-admins", "platform")
    assert s.oidc_project_groups == (GroupGrant("eng", "alpha", "gold"), GroupGrant("data", "beta"))
    masked = s.masked()
    assert masked["RELAY_OIDC_CLIENT_SECRET"] == "********"
    assert masked["RELAY_OIDC_PROJECT_GROUPS"] == "eng=alpha:gold,data=beta"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"RELAY_OIDC_ISSUER": "http://login.example.com", "RELAY_OIDC_CLIENT_ID": "c"}, "RELAY_OIDC_ISSUER"),
        ({"RELAY_OIDC_ISSUER": "login.example.com", "RELAY_OIDC_CLIENT_ID": "c"}, "RELAY_OIDC_ISSUER"),
        ({"RELAY_OIDC_ISSUER": "https://login.example.com"}, "RELAY_OIDC_CLIENT_ID"),
        ({"RELAY_OIDC_SCOPES": "email profile"}, "RELAY_OIDC_SCOPES"),
        ({"RELAY_OIDC_PROJECT_GROUPS": "eng"}, "RELAY_OIDC_PROJECT_GROUPS"),
        ({"RELAY_OIDC_PROJECT_GROUPS": "eng=Alpha"}, "RELAY_OIDC_PROJECT_GROUPS"),
        ({"RELAY_OIDC_PROJECT_GROUPS": "eng=alpha:"}, "RELAY_OIDC_PROJECT_GROUPS"),
        ({"RELAY_OIDC_ADMIN_GROUPS": "has space"}, "RELAY_OIDC_ADMIN_GROUPS"),
        ({"RELAY_OIDC_REDIRECT_URL": "/ui/sso/callback"}, "RELAY_OIDC_REDIRECT_URL"),
        ({"RELAY_OIDC_GROUPS_CLAIM": ""}, "RELAY_OIDC_GROUPS_CLAIM"),
    ],
)
def test_a_bad_value_names_the_variable_in_one_line(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as bad:
        load_settings(env)
    message = str(bad.value)
    assert message.startswith(variable + ":") and "\n" not in message


def test_an_http_issuer_is_accepted_on_loopback_only() -> None:
    for host in ("127.0.0.1:8443", "localhost", "[::1]:9000"):
        s = load_settings({"RELAY_OIDC_ISSUER": f"http://{host}", "RELAY_OIDC_CLIENT_ID": "c"})
        assert s.oidc_issuer == f"http://{host}"


def test_an_issuer_without_a_client_id_stops_serve(tmp_path: Path) -> None:
    result = _run(["serve"], {"RELAY_OIDC_ISSUER": "https://login.example.com"}, tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "RELAY_OIDC_CLIENT_ID" in lines[0]


def test_memberships_follow_the_groups_and_leave_other_projects_alone() -> None:
    grants = (
        GroupGrant("eng", "alpha", "gold"),
        GroupGrant("eng", "beta"),
        GroupGrant("ops", "beta", "silver"),
    )
    managed, wanted = desired_memberships(grants, ["eng", "ops"])
    assert managed == {"alpha", "beta"} and wanted == {"alpha": "gold", "beta": "silver"}
    current = [{"project": "alpha", "policy": None}, {"project": "mine", "policy": "p"}]
    _, now = desired_memberships(grants, ["ops"])
    assert merged_memberships(current, managed, now) == [
        {"project": "mine", "policy": "p"},
        {"project": "beta", "policy": "silver"},
    ]
    assert groups_of({"groups": "solo"}, "groups") == ("solo",)
    assert groups_of({"roles": ["a", 7, None]}, "roles") == ("a", "7")
    assert groups_of({}, "groups") == ()
