"""Receiver settings, from the environment with prefix `LESSONSYNC_WEBHOOK_` (see docs/webhooks.md).

Credential lists are comma-separated so that several can be valid at once while one is rotated out.
Every credential is a SecretStr: it never shows in a repr, a log line or an error message."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pipeline.settings import SettingsError, load_settings, settings_problems
from pipeline.settings_checks import MAX_RECEIVER_TIMEOUT, MIN_TIMEOUT
from pipeline.webhooks.inbox_backend import InboxBackend
from pipeline.webhooks.inbox_open import open_inbox

MIB = 1024 * 1024
ENV_PREFIX = "LESSONSYNC_WEBHOOK_"


class WebhookConfigError(ValueError):
    """The receiver configuration cannot be served safely (e.g. no credential and not explicitly open)."""


def _split_list(value: object) -> object:
    """`"a,b"` -> `["a", "b"]`; blanks dropped so a trailing comma is harmless."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class WebhookSettings(BaseSettings):
    """How the certificate webhook receiver authenticates, validates and stores deliveries."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=".env", extra="ignore")

    bearer_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Accepted `Authorization: Bearer <token>` values, comma-separated."
    )
    basic_credentials: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Accepted HTTP basic `user:password` pairs, comma-separated."
    )
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Accepted values of the API-key header, comma-separated."
    )
    api_key_header: str = Field("X-Api-Key", min_length=1, description="Header that carries an API key.")
    path: str = Field("/webhooks/certificates", pattern=r"^/\S*$", description="POST path of the receiver.")
    max_body_bytes: int = Field(
        MIB, ge=1024, le=256 * MIB, description="Larger bodies get 413 (checked while streaming)."
    )
    allow_open: bool = Field(False, description="Serve without any credential (local experiments only).")
    inbox_path: Path | None = Field(None, description="SQLite inbox; default <LESSONSYNC_DATA_DIR>/inbox.sqlite3.")
    source_header: str = Field("X-Webhook-Source", min_length=1, description="Header naming the sender.")
    expiry_clock: Literal["sender", "receipt"] = Field(
        "sender",
        description="Instant 'expires' is judged against: the request's Date header when present ('sender'), "
        "or always the receipt time ('receipt').",
    )
    event_type_header: str | None = Field(
        None, description="Header naming the event type, used when it holds a known type (default: infer only)."
    )
    commit_max_batch: int = Field(
        512, ge=1, le=10_000, description="Most deliveries made durable by one inbox transaction."
    )
    # Limits on what any client, authenticated or not, may hold (pipeline/webhooks/server.py, docs/deploy.md).
    # Each is finite (a timer of `inf` never fires; a cap of 10^12 caps nothing) and its floor leaves a sender on a
    # real network room to deliver (a head due within nanoseconds is answered 408 every time).
    max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        le=MIB,
        description="Largest request line plus headers; larger heads get 431 and a close.",
    )
    max_header_count: int = Field(
        100, ge=8, le=1000, description="Most request header lines; more get 431 and a close."
    )
    header_timeout: float = Field(
        5.0,
        ge=MIN_TIMEOUT,
        le=MAX_RECEIVER_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds a request head may take to arrive (else 408).",
    )
    body_timeout: float = Field(
        10.0,
        ge=MIN_TIMEOUT,
        le=MAX_RECEIVER_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds a body may take beyond its minimum rate (else 408).",
    )
    min_body_rate: float = Field(
        1024.0,
        ge=1,
        le=1024 * MIB,
        allow_inf_nan=False,
        description="Bytes per second a body must average after body_timeout's grace.",
    )
    keep_alive_timeout: float = Field(
        5.0,
        ge=MIN_TIMEOUT,
        le=MAX_RECEIVER_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds an idle keep-alive connection stays open.",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        le=65_536,
        description="Open connections; beyond it the longest-idle one is closed, or the new one gets 503.",
    )

    @field_validator("bearer_tokens", "basic_credentials", "api_keys", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split_list(value)

    def resolved_inbox_path(self) -> Path:
        """The inbox file: explicit setting, else the data directory of the main settings."""
        return self.inbox_path if self.inbox_path is not None else load_settings().receiver.inbox_path

    def resolved_inbox(self) -> InboxBackend:
        """The receiver's inbox: LESSONSYNC_INBOX_URL (PostgreSQL) when set, else the SQLite file."""
        receiver = load_settings().receiver
        if receiver.inbox_url is not None:
            return open_inbox(receiver.inbox_url.get_secret_value())
        return open_inbox(self.resolved_inbox_path())

    def basic_pairs(self) -> list[tuple[bytes, bytes]]:
        """Configured basic credentials as (user, password) bytes, split on the first colon (RFC 7617)."""
        pairs = []
        for value in self.basic_credentials:
            user, _, password = value.get_secret_value().partition(":")
            pairs.append((user.encode(), password.encode()))
        return pairs

    def has_credentials(self) -> bool:
        return bool(self.bearer_tokens or self.basic_credentials or self.api_keys)

    def check_servable(self) -> None:
        """Refuse an unauthenticated or malformed configuration. Checked here rather than in a field
        validator because pydantic's errors echo the input value, which here is a secret."""
        for position, value in enumerate(self.basic_credentials, start=1):
            user, sep, _ = value.get_secret_value().partition(":")
            if not sep or not user:
                raise WebhookConfigError(
                    f"LESSONSYNC_WEBHOOK_BASIC_CREDENTIALS entry #{position} is not 'user:password' "
                    "(value hidden); separate several pairs with commas"
                )
        if not self.has_credentials() and not self.allow_open:
            raise WebhookConfigError(
                "no webhook credential configured: set LESSONSYNC_WEBHOOK_BEARER_TOKENS, "
                "LESSONSYNC_WEBHOOK_BASIC_CREDENTIALS or LESSONSYNC_WEBHOOK_API_KEYS "
                "(or LESSONSYNC_WEBHOOK_ALLOW_OPEN=true to accept unauthenticated deliveries)"
            )

    def auth_summary(self) -> str:
        """What is configured, by count only, for the startup log line."""
        return (
            f"bearer tokens: {len(self.bearer_tokens)}, basic credentials: {len(self.basic_credentials)}, "
            f"API keys: {len(self.api_keys)} (header {self.api_key_header}), open: {self.allow_open}"
        )


def load_webhook_settings(**overrides: object) -> WebhookSettings:
    """Receiver settings from the environment, with explicit overrides (the CLI's options); SettingsError naming
    every bad LESSONSYNC_WEBHOOK_* setting in one line when some do not validate (never a credential's value)."""
    try:
        return WebhookSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise SettingsError(settings_problems(error, ENV_PREFIX)) from None
