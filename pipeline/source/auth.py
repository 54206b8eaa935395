"""Bearer tokens for the platform: exchange the app secret, refresh before expiry and on 401, fall back to
a new exchange when a refresh is refused. One asyncio.Lock makes concurrent requests share one refresh, and its
failure: a token request that fails for good (the platform unavailable for a whole retry budget, the secret refused)
is remembered and raised to every waiting and later caller at once, so the streams of a run fail together within
one budget instead of each retrying the same request for a budget of its own, in turn.

Token lifetimes are not shown in the spec, so the expiry is read from the JWT payload WITHOUT verifying
it (we are not the audience that checks signatures; we only want `exp`). The lifetime is taken as
`exp - iat` when both are present (immune to clock skew between us and the server), else `exp - now`.
A token that is not a JWT, or has no `exp`, is used until the platform answers 401. The payload is read with the
standard library (RFC 7519: the second of three base64url segments, a JSON object): PyJWT would bring
`cryptography` into every sync process (~10 MiB of RSS, ~40 ms of import) to read one claim it does not verify.

Secrets (app secret, access and refresh tokens) live in SecretStr and never reach logs, reprs or error
messages; `redact` scrubs them from any text the transport puts in an error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import SecretStr

from pipeline.contract.models import TokenResponse
from pipeline.source.errors import PlatformAuthError, PlatformRequestError, SourceError

log = logging.getLogger("lessonsync.source")

PostToken = Callable[[str, dict[str, str]], Awaitable[TokenResponse]]
REFUSED = {400, 401, 403, 404, 409, 410, 422}  # a refresh answered with these is refused: exchange again


def token_lifetime(token: str) -> float | None:
    """Seconds the token lives from issuance, from its unverified JWT payload; None when unknown."""
    claims = unverified_claims(token)
    if claims is None:
        return None
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(exp, (int, float)):
        return None
    lifetime = exp - iat if isinstance(iat, (int, float)) else exp - time.time()
    return lifetime if lifetime > 0 else None


def unverified_claims(token: str) -> dict[str, Any] | None:
    """The claims of a compact JWS `header.payload.signature`, unverified; None when `token` is not one."""
    segments = token.split(".")
    if len(segments) != 3:
        return None
    payload = segments[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):  # not base64url, not UTF-8, not JSON
        return None
    return claims if isinstance(claims, dict) else None


def refresh_margin(lifetime: float) -> float:
    """Refresh this long before expiry: a fifth of the lifetime, at most 30 s (so 1 s tokens still work)."""
    return min(30.0, lifetime / 5)


class TokenManager:
    """Holds the current token pair; `bearer()` hands out a valid access token."""

    def __init__(self, app_secret: SecretStr, post: PostToken) -> None:
        self._secret = app_secret
        self._post = post
        self._access: SecretStr | None = None
        self._refresh: SecretStr | None = None
        self._renew_at: float | None = None  # monotonic instant after which we renew proactively
        self._lock = asyncio.Lock()
        self._failed: SourceError | None = None  # a token request that failed for good: no caller tries again
        self.exchanges = 0
        self.refreshes = 0

    def __repr__(self) -> str:
        return f"TokenManager(has_token={self._access is not None})"

    async def bearer(self) -> str:
        """A valid access token, exchanging or refreshing first when none is held or it is about to expire."""
        self._raise_if_failed()
        if self._access is None or self._expiring():
            async with self._lock:
                self._raise_if_failed()
                if self._access is None:
                    await self._remembering(self._exchange)
                elif self._expiring():
                    await self._remembering(self._refresh_or_exchange)
        assert self._access is not None
        return self._access.get_secret_value()

    async def on_unauthorized(self, rejected: str) -> None:
        """The platform answered 401 to `rejected`: renew once, unless another request already did."""
        async with self._lock:
            self._raise_if_failed()
            if self._access is not None and self._access.get_secret_value() != rejected:
                return
            await self._remembering(self._refresh_or_exchange)

    async def _remembering(self, renew: Callable[[], Awaitable[None]]) -> None:
        try:
            await renew()
        except SourceError as failure:
            self._failed = failure
            raise

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise self._failed.with_traceback(None)  # the one failure, not a new attempt with a budget of its own

    def redact(self, text: str) -> str:
        """`text` with every secret we hold replaced by ***."""
        for secret in (self._secret, self._access, self._refresh):
            value = secret.get_secret_value() if secret is not None else ""
            if value:
                text = text.replace(value, "***")
        return text

    def _expiring(self) -> bool:
        return self._renew_at is not None and time.monotonic() >= self._renew_at

    async def _refresh_or_exchange(self) -> None:
        if self._refresh is None:
            await self._exchange()
            return
        try:
            pair = await self._post("/v1/token/refresh", {"refreshToken": self._refresh.get_secret_value()})
        except PlatformRequestError as exc:
            if exc.status not in REFUSED:
                raise
            log.info("token refresh refused (status %s); exchanging the app secret again", exc.status)
            await self._exchange()
            return
        self.refreshes += 1
        self._store(pair)

    async def _exchange(self) -> None:
        try:
            pair = await self._post("/v1/token", {"appSecret": self._secret.get_secret_value()})
        except PlatformRequestError as exc:
            if exc.status in REFUSED:
                raise PlatformAuthError(
                    f"the platform refused the app secret (POST /v1/token answered {exc.status}); "
                    "check LESSONSYNC_APP_SECRET"
                ) from None
            raise
        self.exchanges += 1
        self._store(pair)

    def _store(self, pair: TokenResponse) -> None:
        self._access, self._refresh = SecretStr(pair.access_token), SecretStr(pair.refresh_token)
        lifetime = token_lifetime(pair.access_token)
        self._renew_at = None if lifetime is None else time.monotonic() + lifetime - refresh_margin(lifetime)
