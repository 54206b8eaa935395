"""Tokens: the app secret is exchanged for a JWT access token (HS256, scope "admin", owner claim) and a
single-use opaque refresh token. Lifetimes run on the WALL clock (a client waits real seconds), not on
the simulated one. Nothing here logs or echoes a secret or a token."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable

import jwt

from simulator.errors import DomainError

ISSUER = "lessonsync-simulator"
MAX_VERIFIED = 4096


class TokenService:
    def __init__(self, app_secret: str, owner_id: str, access_ttl: Callable[[], float], refresh_ttl: float) -> None:
        self._app_secret = app_secret.encode()
        self._owner_id = owner_id
        self._access_ttl = access_ttl  # read at issue time so the token_ttl fault applies at runtime
        self._refresh_ttl = refresh_ttl
        self._key = secrets.token_bytes(32)  # per simulator instance: tokens of another instance fail
        self._refresh: dict[str, float] = {}  # refresh token -> wall-clock expiry
        self._lock = threading.Lock()
        # Tokens already verified -> their wall-clock expiry: a valid JWT is decoded once, not per request
        # (PyJWT costs ~12% of a small request's CPU). Expiry is still checked on every request.
        self._verified: dict[str, float] = {}
        self.issued = 0
        self.refreshed = 0
        self.rejected = 0

    def __repr__(self) -> str:
        return f"TokenService(owner={self._owner_id!r}, issued={self.issued})"

    def exchange(self, app_secret: str) -> dict[str, str]:
        if not hmac.compare_digest(app_secret.encode(), self._app_secret):
            self.rejected += 1
            raise DomainError(401, "appSecret is not valid for this platform: check the configured app secret")
        return self._issue()

    def refresh(self, refresh_token: str) -> dict[str, str]:
        with self._lock:
            expires = self._refresh.pop(refresh_token, None)  # single use: gone whatever happens next
        if expires is None or expires < time.time():
            self.rejected += 1
            raise DomainError(401, "refreshToken is unknown, already used or expired: exchange the app secret again")
        self.refreshed += 1
        return self._issue()

    def _issue(self) -> dict[str, str]:
        now = time.time()
        claims = {
            "iss": ISSUER,
            "sub": self._owner_id,
            "owner": self._owner_id,
            "scope": "admin",
            "iat": int(now),
            "exp": now + self._access_ttl(),
            "jti": secrets.token_hex(8),
        }
        refresh_token = secrets.token_urlsafe(32)
        with self._lock:
            self._refresh[refresh_token] = now + self._refresh_ttl
            self.issued += 1
        return {"access_token": jwt.encode(claims, self._key, algorithm="HS256"), "refresh_token": refresh_token}

    def verify(self, authorization: str | None) -> str:
        """The owner id of a valid `Authorization: Bearer <jwt>` header, else a 401 DomainError."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise self._reject("missing bearer token: send Authorization: Bearer <access_token> from POST /v1/token")
        token = token.strip()
        expires = self._verified.get(token)
        if expires is not None:
            if time.time() < expires:
                return self._owner_id
            self._verified.pop(token, None)
            raise self._reject("access token expired: refresh it with POST /v1/token/refresh")
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=["HS256"],
                issuer=ISSUER,
                options={"require": ["exp", "iat", "owner", "scope"]},
            )
        except jwt.ExpiredSignatureError:
            raise self._reject("access token expired: refresh it with POST /v1/token/refresh") from None
        except jwt.InvalidTokenError:
            raise self._reject("access token is not valid: obtain one with POST /v1/token") from None
        if "admin" not in str(claims.get("scope", "")).split() or claims.get("owner") != self._owner_id:
            raise self._reject("access token lacks the admin scope for this owner")
        with self._lock:
            if len(self._verified) >= MAX_VERIFIED:  # bounded: clients that churn tokens start it afresh
                self._verified.clear()
            self._verified[token] = float(claims["exp"])
        return self._owner_id

    def _reject(self, message: str) -> DomainError:
        self.rejected += 1
        return DomainError(401, message)
