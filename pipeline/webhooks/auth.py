"""Request authentication for the receiver: bearer, HTTP basic or an API-key header, several credentials
of each accepted at once so that one can be rotated out without downtime.

Every configured credential is compared (constant time, `hmac.compare_digest` on bytes) even after a
match, so the time taken does not tell an attacker which credential or which scheme came close."""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.webhooks.settings import WebhookSettings


@dataclass(frozen=True, repr=False)
class Authenticator:
    """Holds the accepted credentials as bytes; repr never shows them."""

    bearer_tokens: tuple[bytes, ...]
    basic_pairs: tuple[tuple[bytes, bytes], ...]
    api_keys: tuple[bytes, ...]
    api_key_header: str
    allow_open: bool

    @classmethod
    def from_settings(cls, settings: WebhookSettings) -> Authenticator:
        return cls(
            bearer_tokens=tuple(t.get_secret_value().encode() for t in settings.bearer_tokens),
            basic_pairs=tuple(settings.basic_pairs()),
            api_keys=tuple(k.get_secret_value().encode() for k in settings.api_keys),
            api_key_header=settings.api_key_header.lower(),
            allow_open=settings.allow_open and not settings.has_credentials(),
        )

    def __repr__(self) -> str:
        return (
            f"Authenticator(bearer={len(self.bearer_tokens)}, basic={len(self.basic_pairs)}, "
            f"api_keys={len(self.api_keys)}, open={self.allow_open})"
        )

    def authenticate(self, headers: Mapping[str, str]) -> str | None:
        """None if the request carries an accepted credential, else why not (never echoing a value)."""
        if self.allow_open:
            return None
        # Header values are the wire bytes decoded as latin-1; encoding back gives those exact bytes.
        authorization = headers.get("authorization", "")
        scheme, _, credential = authorization.partition(" ")
        accepted = False
        if self.bearer_tokens and scheme.lower() == "bearer":
            accepted |= _any_equal(credential.strip().encode("latin-1"), self.bearer_tokens)
        if self.basic_pairs and scheme.lower() == "basic":
            accepted |= self._basic_ok(credential.strip())
        api_key = headers.get(self.api_key_header)
        if self.api_keys and api_key is not None:
            accepted |= _any_equal(api_key.encode("latin-1"), self.api_keys)
        if accepted:
            return None
        if not authorization and api_key is None:
            return "no credential in the request (Authorization header or API-key header)"
        return "the credential in the request is not accepted"

    def _basic_ok(self, encoded: str) -> bool:
        try:
            decoded = base64.b64decode(encoded.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            return False
        user, sep, password = decoded.partition(b":")
        if not sep:
            return False
        matched = False
        for good_user, good_password in self.basic_pairs:
            # `&` rather than `and`: both comparisons always run.
            matched |= hmac.compare_digest(user, good_user) & hmac.compare_digest(password, good_password)
        return matched


def _any_equal(candidate: bytes, accepted: tuple[bytes, ...]) -> bool:
    matched = False
    for good in accepted:
        matched |= hmac.compare_digest(candidate, good)
    return matched
