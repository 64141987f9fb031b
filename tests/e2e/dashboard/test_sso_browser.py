"""Single sign-on in a real Chromium (SPEC §21): the sign-in page's "Sign in with SSO" button, the real
OpenID Provider's login and consent pages, and back on the dashboard signed in, with the session
cookies a browser actually keeps across the cross-site redirect (``SameSite=Lax``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.dashboard.conftest import PageWatch, shot
from tests.e2e.dashboard.helpers import AXE, AXE_RUN
from tests.fixtures.oidc import SsoSetup
from tests.fixtures.oidc import sso as sso


@pytest.mark.parametrize("sso", ["sqlite"], indirect=True)
def test_sign_in_with_sso_in_chromium(browser: Any, sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("browser-ola", email="ola@sso.test", email_verified=True, groups=["eng"])
    context = browser.new_context(base_url=relay.control_url)
    context.set_default_timeout(30_000)
    page = context.new_page()
    watch = PageWatch()
    watch.attach(page)
    try:
        page.goto("/ui/signin")
        page.evaluate(AXE.read_text())
        violations = page.evaluate(AXE_RUN)
        assert not violations, "the sign-in page with SSO:\n" + "\n".join(violations)
        shot(page, "sso-signin")
        page.get_by_role("link", name="Sign in with SSO").click()
        page.wait_for_url(provider.issuer + "/**")
        page.fill("input[name=login]", "browser-ola")
        page.fill("input[name=password]", "any")
        page.locator("button[type=submit]").first.click()
        page.locator("button[type=submit]", has_text="Continue").click()  # the provider's consent
        page.wait_for_url(relay.control_url + "/ui/")
        assert "ola@sso.test" in page.content()
        shot(page, "sso-signed-in")
        cookies = {c["name"]: c for c in context.cookies(relay.control_url + "/ui/sso/")}
        assert cookies["relay_ui"]["sameSite"] == "Lax" and cookies["relay_ui"]["httpOnly"]
        assert "relay_session" in cookies and "relay_sso" not in cookies
        page.goto("/ui/usage")  # a user's page, pinned to the projects the groups granted
        assert page.url.endswith("/ui/usage") and "sso-alpha" in page.content()
    finally:
        context.close()
    # The provider's own pages ask for web fonts (no internet here): only Relay's pages are judged.
    ours = [p for p in watch.problems if relay.control_url in p]
    assert not ours, "Relay's pages had errors:\n" + "\n".join(ours)
