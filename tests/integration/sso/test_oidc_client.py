"""Relay's OIDC client (relay.control.sso) against the real provider: discovery, the JWKS and the ID
token checks an HTTP flow cannot reach (a token issued to another client), and an unreachable issuer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay.control.sso import OidcClient, SsoError, SsoSettings
from tests.fixtures.oidc import (
    CLIENT_ID,
    CLIENT_SECRET,
    OTHER_CLIENT_ID,
    OidcProvider,
    ensure_provider_installed,
    other_client_id_token,
)
from tests.fixtures.relay_server import free_ports
from tests.fixtures.relay_server import relay_factory as relay_factory


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    ensure_provider_installed()
    log: Path = tmp_path_factory.mktemp("oidc-client") / "provider.log"
    started = OidcProvider(free_ports(1)[0], "http://127.0.0.1:9/ui/sso/callback", log)
    try:
        yield started
    finally:
        started.close()


def client_for(issuer: str, client_id: str = CLIENT_ID) -> OidcClient:
    return OidcClient(
        SsoSettings(issuer=issuer, client_id=client_id, client_secret=CLIENT_SECRET), timeout_s=3
    )


def test_a_token_for_another_client_is_refused_by_audience(provider: OidcProvider) -> None:
    provider.account("aud-max", email="max@sso.test", email_verified=True)
    token = other_client_id_token(provider, "aud-max", nonce="n-123")

    with pytest.raises(SsoError) as refused:
        asyncio.run(client_for(provider.issuer).verify(token, "n-123"))
    assert refused.value.status == 400 and "aud" in refused.value.reason
    # The same token passes every check for the client it was issued to: only the audience differed.
    claims = asyncio.run(client_for(provider.issuer, OTHER_CLIENT_ID).verify(token, "n-123"))
    assert claims["email"] == "max@sso.test" and claims["aud"] == OTHER_CLIENT_ID


def test_a_tampered_token_fails_the_signature_check(provider: OidcProvider) -> None:
    provider.account("sig-ned", email="ned@sso.test", email_verified=True)
    header, payload, signature = other_client_id_token(provider, "sig-ned", nonce="n").split(".")
    forged = ".".join((header, payload, signature[:-4] + ("AAAA" if signature[-4:] != "AAAA" else "BBBB")))
    with pytest.raises(SsoError) as refused:
        asyncio.run(client_for(provider.issuer, OTHER_CLIENT_ID).verify(forged, "n"))
    assert refused.value.status == 400 and "signature" in refused.value.reason


def test_discovery_names_the_endpoints(provider: OidcProvider) -> None:
    async def urls() -> str:
        client = client_for(provider.issuer)
        return await client.authorization_url("http://127.0.0.1:9/ui/sso/callback", "st", "no", "v" * 50)

    url = asyncio.run(urls())
    assert url.startswith(provider.issuer + "/auth?")
    for part in (
        "code_challenge_method=S256",
        "state=st",
        "nonce=no",
        f"client_id={CLIENT_ID}",
        "response_type=code",
    ):
        assert part in url


def test_an_unreachable_issuer_is_a_502_naming_it() -> None:
    [port] = free_ports(1)  # nothing listens there
    issuer = f"http://127.0.0.1:{port}"
    with pytest.raises(SsoError) as failed:
        asyncio.run(client_for(issuer).authorization_url("http://127.0.0.1:9/cb", "s", "n", "v" * 50))
    assert failed.value.status == 502 and issuer in failed.value.reason


def test_relay_starts_with_an_unreachable_issuer_and_answers_502_naming_it(
    tmp_path: Path, relay_factory: Any
) -> None:
    [port] = free_ports(1)
    issuer = f"http://127.0.0.1:{port}"
    relay = relay_factory(
        f"sqlite:///{tmp_path / 'relay.db'}", {"RELAY_OIDC_ISSUER": issuer, "RELAY_OIDC_CLIENT_ID": CLIENT_ID}
    )
    assert 'href="/ui/sso/start"' in httpx.get(relay.control_url + "/ui/signin").text
    answer = httpx.get(relay.control_url + "/ui/sso/start")
    assert answer.status_code == 502 and answer.headers["content-type"].startswith("text/html")
    assert issuer in answer.text and "Traceback" not in answer.text


def test_without_sso_the_sign_in_page_has_no_button_and_the_routes_are_404(
    tmp_path: Path, relay_factory: Any
) -> None:
    relay = relay_factory(f"sqlite:///{tmp_path / 'relay.db'}")
    assert "/ui/sso/start" not in httpx.get(relay.control_url + "/ui/signin").text
    assert httpx.get(relay.control_url + "/ui/sso/start").status_code == 404
    assert httpx.get(relay.control_url + "/ui/sso/callback?state=x&code=y").status_code == 404
