"""The OpenID Connect client of single sign-on (SPEC §21), over Authlib and joserfc.

Authlib's httpx OAuth 2.0 client builds the authorization URL (code flow, PKCE S256, ``state`` and
``nonce``) and redeems the code with the verifier and the client secret; joserfc checks the ID token's
signature against the issuer's JWKS, and :meth:`OidcClient.verify` its ``iss``, ``aud``, ``exp`` and
``nonce``. Discovery and the JWKS are fetched at sign-in (never at boot: an unreachable provider must
not stop Relay) and kept for a few minutes; an unknown ``kid`` refetches the JWKS once (key rotation).

Every failure is an :class:`SsoError` with the status and a reason safe to show: no token, code or
secret ever goes into its message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import httpx
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from relay.oidc_settings import GroupGrant

CACHE_S: Final = 300.0
LEEWAY_S: Final = 60
TIMEOUT_S: Final = 10.0
# Asymmetric algorithms only: an HS256 token would be signed with the client secret, not the JWKS.
ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class SsoError(Exception):
    """A refused or failed sign-in: 400 (state, code, ID token), 403 (account), 502 (provider)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class SsoSettings:
    """The ``RELAY_OIDC_*`` settings in force (relay.config validated them at start)."""

    issuer: str
    client_id: str
    client_secret: str | None
    scopes: str = "openid email profile"
    groups_claim: str = "groups"
    admin_groups: tuple[str, ...] = ()
    project_groups: tuple[GroupGrant, ...] = ()
    redirect_url: str | None = None


class OidcClient:
    def __init__(self, settings: SsoSettings, *, timeout_s: float = TIMEOUT_S) -> None:
        self.settings = settings
        self._timeout = timeout_s
        self._metadata: tuple[float, dict[str, Any]] | None = None
        self._jwks: tuple[float, KeySet] | None = None

    def _oauth(self, redirect_uri: str) -> AsyncOAuth2Client:
        return AsyncOAuth2Client(
            client_id=self.settings.client_id,
            client_secret=self.settings.client_secret,
            scope=self.settings.scopes,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            timeout=self._timeout,
        )

    async def metadata(self) -> dict[str, Any]:
        """The issuer's discovery document (``/.well-known/openid-configuration``), cached."""
        if self._metadata is not None and self._metadata[0] > time.monotonic():
            return self._metadata[1]
        url = self.settings.issuer + "/.well-known/openid-configuration"
        document = await self._get_json(url)
        if document.get("issuer", "").rstrip("/") != self.settings.issuer:
            raise SsoError(502, f"the discovery document of {self.settings.issuer} names another issuer")
        for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(document.get(field), str):
                raise SsoError(502, f"the discovery document of {self.settings.issuer} has no {field}")
        self._metadata = (time.monotonic() + CACHE_S, document)
        return document

    async def authorization_url(self, redirect_uri: str, state: str, nonce: str, verifier: str) -> str:
        endpoint = (await self.metadata())["authorization_endpoint"]
        async with self._oauth(redirect_uri) as oauth:
            url, _ = oauth.create_authorization_url(
                endpoint, state=state, code_verifier=verifier, nonce=nonce
            )
        return str(url)

    async def redeem(self, code: str, redirect_uri: str, verifier: str) -> str:
        """The ID token the code buys (with the PKCE verifier and the client secret)."""
        endpoint = (await self.metadata())["token_endpoint"]
        try:
            async with self._oauth(redirect_uri) as oauth:
                token = await oauth.fetch_token(
                    endpoint, grant_type="authorization_code", code=code, code_verifier=verifier
                )
        except httpx.HTTPError:
            raise SsoError(
                502, f"the identity provider {self.settings.issuer} could not be reached"
            ) from None
        except Exception as exc:  # Authlib raises OAuthError (and subclasses) for the provider's refusal
            error = getattr(exc, "error", None) or "invalid_grant"
            raise SsoError(400, f"the identity provider refused the code ({error})") from None
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise SsoError(400, "the identity provider returned no ID token")
        return id_token

    async def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims once its signature, ``iss``, ``aud``, ``exp`` and ``nonce`` check out."""
        keys = await self._keys(refresh=False)
        try:
            try:
                token = jwt.decode(id_token, keys, algorithms=ALGORITHMS)
            except JoseError as exc:
                if "key" not in str(exc).lower():
                    raise
                token = jwt.decode(id_token, await self._keys(refresh=True), algorithms=ALGORITHMS)
        except (JoseError, ValueError):
            raise SsoError(
                400, "the ID token's signature does not verify against the issuer's keys"
            ) from None
        claims = dict(token.claims)
        self.check_claims(claims, nonce, now=time.time())
        return claims

    def check_claims(self, claims: dict[str, Any], nonce: str, *, now: float) -> None:
        if str(claims.get("iss", "")).rstrip("/") != self.settings.issuer:
            raise SsoError(400, "the ID token was issued by another issuer (iss)")
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.settings.client_id not in audiences:
            raise SsoError(400, "the ID token is meant for another client (aud)")
        if len(audiences) > 1 and claims.get("azp") not in (None, self.settings.client_id):
            raise SsoError(400, "the ID token is meant for another client (azp)")
        exp = claims.get("exp")
        if not isinstance(exp, int) or isinstance(exp, bool):
            raise SsoError(400, "the ID token has no expiry (exp)")
        if exp + LEEWAY_S < now:
            raise SsoError(400, "the ID token has expired (exp)")
        if not isinstance(claims.get("nonce"), str) or claims["nonce"] != nonce:
            raise SsoError(400, "the ID token's nonce does not match this sign-in (replayed or foreign)")

    async def _keys(self, *, refresh: bool) -> KeySet:
        if not refresh and self._jwks is not None and self._jwks[0] > time.monotonic():
            return self._jwks[1]
        document = await self._get_json((await self.metadata())["jwks_uri"])
        try:
            keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError):
            raise SsoError(502, f"the JWKS of {self.settings.issuer} is not a key set") from None
        self._jwks = (time.monotonic() + CACHE_S, keys)
        return keys

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                answer = await client.get(url, headers={"accept": "application/json"})
            answer.raise_for_status()
            document = answer.json()
        except (httpx.HTTPError, ValueError):
            raise SsoError(
                502, f"the identity provider {self.settings.issuer} could not be reached"
            ) from None
        if not isinstance(document, dict):
            raise SsoError(502, f"the identity provider {self.settings.issuer} answered no JSON object")
        return document
