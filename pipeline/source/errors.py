"""Errors of the source client. Messages name what failed and where (endpoint, parameters, status) and
what to do next; they never carry the app secret or a token (the transport redacts them first)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping


class SourceError(Exception):
    """Base of every error raised by the source client."""


class PlatformRequestError(SourceError):
    """A request failed for good: a non-retryable status, or retries exhausted."""

    def __init__(
        self,
        method: str,
        endpoint: str,
        params: Mapping[str, str],
        status: int | None,
        attempts: int,
        detail: str,
        *,
        retried_for: float | None = None,
        reason: str | None = None,
    ) -> None:
        self.method, self.endpoint, self.params = method, endpoint, dict(params)
        self.status, self.attempts, self.detail = status, attempts, detail
        self.retried_for = retried_for
        self.reason = reason or (detail if status is None else f"last status {status}")  # a few words, for one line
        shown = "no response" if status is None else f"last status {status}"
        over = "" if retried_for is None else f" over {retried_for:.0f} s"
        super().__init__(
            f"{method} {endpoint} with params {self.params} failed after {attempts} attempt(s){over}, {shown}: "
            f"{detail}. Check that LESSONSYNC_BASE_URL points at the platform and the platform is healthy; "
            f"raise LESSONSYNC_RETRY_BUDGET (seconds of retrying per request) to ride out longer outages."
        )


EARLIER_FAILURES_SHOWN = 2  # the other failures of a request's attempts named after its last one, most frequent first


def with_earlier_failures(last: str, earlier: Mapping[str, int]) -> str:
    """`last`, the failure that ended a request's retries, then the other failures of its earlier attempts: a request
    the platform answered badly five times and that then timed out is not reported as a timeout alone."""
    others = [(detail, count) for detail, count in Counter(earlier).most_common() if detail != last]
    if not others:
        return last
    said = "; ".join(
        f"{detail} ({count} attempt{'s' if count > 1 else ''})" for detail, count in others[:EARLIER_FAILURES_SHOWN]
    )
    return f"{last}; before it: {said}"


class PlatformUnavailableError(PlatformRequestError):
    """Retries exhausted on failures that may pass later (timeouts, connection errors, 429, 5xx, bodies cut short):
    the platform was unavailable for the whole retry budget. The run that fails on it may be retried."""


class PlatformUnreachableError(PlatformUnavailableError):
    """A request every stream of a run waits on (the token exchange or its refresh) failed for the whole retry budget:
    each stream fails with this one error at once, instead of each retrying it for a budget of its own. One line,
    naming the request and the platform's address (without credentials)."""

    def __init__(self, failure: PlatformRequestError, address: str) -> None:
        super().__init__(
            failure.method,
            failure.endpoint,
            failure.params,
            failure.status,
            failure.attempts,
            failure.detail,
            retried_for=failure.retried_for,
            reason=failure.reason,
        )
        spent = f" for {failure.retried_for:.0f} s" if failure.retried_for is not None else ""
        said = f"{failure.method} {failure.endpoint} at {address} failed{spent} ({self.reason})"
        if failure.status is None:  # no answer at all: most often the wrong address
            self.args = (f"platform unreachable: {said}; check LESSONSYNC_BASE_URL and that the platform is up",)
        else:
            self.args = (
                f"platform unavailable: {said}; it is down or overloaded: raise LESSONSYNC_RETRY_BUDGET to ride out "
                "longer outages",
            )


class PlatformAuthError(SourceError):
    """The platform refused our credentials (app secret, or a token it just issued)."""


class PlatformResponseError(SourceError):
    """A response that is not what the spec promises as a whole (e.g. a page that is not a JSON array)."""


class PlatformBodyTooLarge(SourceError):
    """A response body over LESSONSYNC_MAX_RESPONSE_BYTES (announced, or read so far): not retried."""

    def __init__(self, status: int, endpoint: str, limit: int, announced: int | None) -> None:
        self.status = status
        size = f"announces {announced:,} bytes" if announced is not None else "is still going"
        super().__init__(
            f"the response body of {endpoint} {size}, over LESSONSYNC_MAX_RESPONSE_BYTES ({limit:,} bytes); "
            "raise it if the platform's pages are really that large"
        )


class SourceStopped(SourceError):
    """The fetch was stopped from outside (its run ended, failed or was told to stop) before its end."""


class RetryableFailure(Exception):
    """Internal: one attempt failed in a way worth retrying (429, 5xx, transport error, truncated body)."""

    def __init__(
        self, status: int | None, detail: str, retry_after: float | None = None, reason: str | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.retry_after = status, detail, retry_after
        self.reason = reason  # the cause in a few words ("connection refused"); None: the detail says it


class TruncatedBody(Exception):
    """Internal: a 200 body that is not complete JSON; the request is retried."""


class SchemaContractError(SourceError):
    """A field the schema does not have, in a stream whose schema contract is `freeze`: the stream stops, nothing of
    it commits (contract/evolution.py)."""

    def __init__(self, stream: str, table: str, paths: list[str], where: str) -> None:
        self.stream, self.table, self.paths = stream, table, paths
        super().__init__(
            f"{stream}: the platform sent field(s) {', '.join(paths)} in {table} records ({where}), which the schema "
            f"does not have, and the stream's schema contract is freeze; set LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM="
            f"{stream}=evolve (a typed column) or {stream}=discard_value (kept in extra) to load it"
        )
