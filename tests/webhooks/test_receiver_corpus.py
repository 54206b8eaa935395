"""An attack corpus for the certificate receiver, over real HTTP on loopback: bad credentials, content types,
malformed and hostile JSON, wrong types for every field, date extremes, oversized bodies, unicode oddities,
unknown event types, wrong methods and paths. Each case asserts the status, that the receiver never answers
5xx, and what was stored: nothing for a refusal, exactly the event for an acceptance. Then, after the whole
corpus, a good delivery is still stored and every stored event loads into the warehouse (what the receiver
accepts, the loader reads: no dead letter).

`python tests/webhooks/test_receiver_corpus.py` prints the case table (group, case, expected answer)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from webhook_helpers import (
    API_KEY,
    BASIC_PASSWORD,
    BASIC_USER,
    BEARER,
    RunningReceiver,
    certificate,
    make_settings,
    serve_in_thread,
)

from pipeline.warehouse import Warehouse
from pipeline.webhooks.dead_letters import list_dead_letters
from pipeline.webhooks.load import load_certificate_events

MAX_BODY = 64 * 1024
EVENT_TYPE_HEADER = "X-Event-Type"
GOOD_AUTH = {"Authorization": f"Bearer {BEARER}"}
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Case:
    group: str
    name: str
    status: int
    body: bytes | Callable[[], Iterator[bytes]] = b""
    headers: dict[str, Any] = field(default_factory=lambda: {**GOOD_AUTH, **JSON})  # str, or bytes as sent
    field: str | None = None  # the field a 400 names
    stored_id: str | None = None  # the certificate id a 200 stores
    method: str = "POST"
    path: str | None = None  # None: the receiver's path

    @property
    def id(self) -> str:
        return f"{self.group}:{self.name}"


def cert(cid: str, **fields: Any) -> bytes:
    return orjson.dumps(certificate(cid, **fields))


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = {"n": leaf}
    return leaf


def deep_field(cid: str, depth: int) -> bytes:
    """A certificate with `deepField` nested `depth` objects deep (written by hand: orjson stops at 254)."""
    return cert(cid)[:-1] + b', "deepField": ' + b'{"n": ' * depth + b"1" + b"}" * depth + b"}"


def auth(headers: dict[str, Any]) -> dict[str, Any]:
    return {**JSON, **headers}


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def accepted(group: str, name: str, cid: str, body: bytes | None = None, **headers: str) -> Case:
    return Case(group, name, 200, body if body is not None else cert(cid), {**GOOD_AUTH, **JSON, **headers}, None, cid)


def refused(group: str, name: str, body: bytes, field: str = "body", **headers: str) -> Case:
    return Case(group, name, 400, body, {**GOOD_AUTH, **JSON, **headers}, field)


def wrong_type(name: str, value: Any) -> Case:
    return refused("type", f"{name}={type(value).__name__}", cert(f"type-{name}", **{name: value}), name)


def _chunked_oversize() -> Iterator[bytes]:
    yield b'{"_id": "stream", "pad": "'
    for _ in range(20):
        yield b"x" * 8192
    yield b'"}'


DEEP_2000 = b'{"_id": "d", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"
DEEP_30K = b"[" * 30_000 + b"]" * 30_000  # under the size limit

CASES: list[Case] = [
    # credentials: 401, and nothing stored, not even in the rejected-delivery quarantine
    Case("auth", "missing", 401, cert("a"), dict(JSON)),
    Case("auth", "wrong-bearer", 401, cert("a"), auth({"Authorization": "Bearer nope"})),
    Case("auth", "empty-quoted-bearer", 401, cert("a"), auth({"Authorization": 'Bearer ""'})),
    Case("auth", "scheme-only", 401, cert("a"), auth({"Authorization": "Bearer"})),
    Case("auth", "token-prefix", 401, cert("a"), auth({"Authorization": f"Bearer {BEARER[:-1]}"})),
    Case("auth", "token-longer", 401, cert("a"), auth({"Authorization": f"Bearer {BEARER}x"})),
    Case("auth", "token-without-scheme", 401, cert("a"), auth({"Authorization": BEARER})),
    Case("auth", "basic-wrong-password", 401, cert("a"), auth({"Authorization": basic(BASIC_USER, "nope")})),
    Case("auth", "basic-wrong-user", 401, cert("a"), auth({"Authorization": basic("root", BASIC_PASSWORD)})),
    Case("auth", "basic-not-base64", 401, cert("a"), auth({"Authorization": "Basic !!!not-base64!!!"})),
    Case("auth", "basic-no-colon", 401, cert("a"), auth({"Authorization": "Basic " + base64.b64encode(b"x").decode()})),
    Case("auth", "basic-password-as-bearer", 401, cert("a"), auth({"Authorization": f"Bearer {BASIC_PASSWORD}"})),
    Case("auth", "api-key-wrong", 401, cert("a"), auth({"X-Api-Key": "nope"})),
    Case("auth", "api-key-empty", 401, cert("a"), auth({"X-Api-Key": ""})),
    Case("auth", "api-key-in-authorization", 401, cert("a"), auth({"Authorization": f"ApiKey {API_KEY}"})),
    Case("auth", "bearer-as-api-key-header-name", 401, cert("a"), auth({"X-Bearer": BEARER})),
    Case("auth", "unknown-scheme", 401, cert("a"), auth({"Authorization": f"Digest {BEARER}"})),
    Case("auth", "latin1-garbage", 401, cert("a"), auth({"Authorization": b"Bearer \xe9\xff\xfe"})),
    Case(
        "auth",
        "ok-lowercase-scheme",
        200,
        cert("auth-lc"),
        auth({"Authorization": f"bearer {BEARER}"}),
        None,
        "auth-lc",
    ),
    Case(
        "auth",
        "ok-basic",
        200,
        cert("auth-basic"),
        auth({"Authorization": basic(BASIC_USER, BASIC_PASSWORD)}),
        None,
        "auth-basic",
    ),
    Case("auth", "ok-api-key", 200, cert("auth-key"), auth({"X-Api-Key": API_KEY}), None, "auth-key"),
    # content types: 415 unless JSON
    Case("type-header", "missing", 415, cert("ct"), dict(GOOD_AUTH)),
    Case("type-header", "empty", 415, cert("ct"), {**GOOD_AUTH, "Content-Type": ""}),
    Case("type-header", "text-plain", 415, cert("ct"), {**GOOD_AUTH, "Content-Type": "text/plain"}),
    Case("type-header", "form", 415, cert("ct"), {**GOOD_AUTH, "Content-Type": "application/x-www-form-urlencoded"}),
    Case("type-header", "multipart", 415, cert("ct"), {**GOOD_AUTH, "Content-Type": "multipart/form-data; boundary=x"}),
    Case("type-header", "jsonx", 415, cert("ct"), {**GOOD_AUTH, "Content-Type": "application/jsonx"}),
    Case("type-header", "text-json", 415, cert("ct"), {**GOOD_AUTH, "Content-Type": "text/json"}),
    accepted("type-header", "json-charset", "ct-charset", **{"Content-Type": "application/json; charset=utf-8"}),
    accepted("type-header", "json-suffix", "ct-suffix", **{"Content-Type": "application/merge-patch+json"}),
    accepted("type-header", "json-upper", "ct-upper", **{"Content-Type": "APPLICATION/JSON"}),
    # malformed JSON: 400 naming the body
    refused("json", "empty", b""),
    refused("json", "whitespace", b"  \n "),
    refused("json", "truncated", b'{"_id": "c'),
    refused("json", "truncated-after-comma", cert("t")[:-1] + b","),
    refused("json", "bom", b"\xef\xbb\xbf" + cert("bom")),
    refused("json", "nan", b'{"_id": "n", "__v": NaN}'),
    refused("json", "infinity", b'{"_id": "n", "__v": Infinity}'),
    refused("json", "number-overflows-double", b'{"_id": "n", "__v": 1e400}'),
    refused("json", "trailing-garbage", cert("g") + b" x"),
    refused("json", "two-documents", cert("g") + cert("h")),
    refused("json", "single-quotes", b"{'_id': 'q'}"),
    refused("json", "trailing-comma", b'{"_id": "q",}'),
    refused("json", "comment", b'{"_id": "q" /* hi */}'),
    refused("json", "invalid-utf8", b'{"_id": "\xff\xfe"}'),
    refused("json", "lone-surrogate", b'{"_id": "\\ud800"}'),
    refused("json", "raw-control-char", b'{"_id": "a\x01b"}'),
    refused("json", "utf16", '{"_id": "u"}'.encode("utf-16")),
    refused("json", "top-level-array", b'[{"_id": "a"}]'),
    refused("json", "top-level-string", b'"certificate"'),
    refused("json", "top-level-number", b"42"),
    refused("json", "top-level-null", b"null"),
    refused("json", "top-level-true", b"true"),
    refused("json", "nested-2000", DEEP_2000),
    refused("json", "nested-30000", DEEP_30K),
    refused("json", "nested-40-unknown-field", cert("deep", deepField=nested(40)), "deepField"),
    refused("json", "nested-300-unknown-field", deep_field("deep", 300), "deepField"),
    refused("json", "nested-50-in-ruleData", cert("deep", ruleData={"type": "x", "more": nested(50)}), "ruleData"),
    accepted("json", "nested-10-unknown-field", "deep-10", cert("deep-10", deepField=nested(10))),
    accepted("json", "duplicate-keys-last-wins", "dup-b", b'{"_id": "dup-a", "_id": "dup-b"}'),
    accepted("json", "huge-integer", "big-int", b'{"_id": "big-int", "__v": 123456789012345678901234567890}'),
    accepted("json", "max-double", "max-double", cert("max-double", __v=1.7976931348623157e308)),
    accepted("json", "negative-zero", "neg-zero", b'{"_id": "neg-zero", "__v": -0.0}'),
    accepted("json", "minimal-document", "minimal", b'{"_id": "minimal"}'),
    # wrong types for every field: 400 naming it
    wrong_type("_id", 7),
    wrong_type("_id", None),
    refused("type", "_id=blank", cert("   "), "_id"),
    wrong_type("_userId", 7),
    wrong_type("_ownerId", ["o"]),
    wrong_type("_badgeId", {"id": "b"}),
    wrong_type("creationDate", 1777966619),
    wrong_type("expires", True),
    wrong_type("disabled", "yes"),
    wrong_type("expiryReminderSent", 1),
    wrong_type("_lessonActiveIds", "al-1"),
    refused("type", "_lessonActiveIds=[int]", cert("t", _lessonActiveIds=[1, 2]), "_lessonActiveIds.0"),
    wrong_type("ruleData", "lesson"),
    refused(
        "type",
        "ruleData.validityDurationDays=str",
        cert("t", ruleData={"validityDurationDays": "365"}),
        "ruleData.validityDurationDays",
    ),
    refused("type", "ruleData.name=int", cert("t", ruleData={"name": 5}), "ruleData.name"),
    wrong_type("createdAt", []),
    wrong_type("updatedAt", {}),
    wrong_type("__v", "0"),
    # date extremes: what overflows once in UTC, epoch numbers and non ISO 8601 text are 400 naming the field
    refused("date", "year-1-plus-14", b'{"_id":"x","creationDate":"0001-01-01T00:00:00+14:00"}', "creationDate"),
    refused("date", "expires-year-9999-minus-14", cert("d", expires="9999-12-31T23:59:59-14:00"), "expires"),
    refused("date", "createdAt-year-9999-minus-1min", cert("d", createdAt="9999-12-31T23:59:59-00:01"), "createdAt"),
    refused("date", "updatedAt-year-1-plus-1min", cert("d", updatedAt="0001-01-01T00:00:00+00:01"), "updatedAt"),
    refused("date", "epoch-seconds", cert("d", expires=1777966619), "expires"),
    refused("date", "epoch-millis", cert("d", expires=1777966619000), "expires"),
    refused("date", "epoch-float", cert("d", updatedAt=1777966619.5), "updatedAt"),
    refused("date", "epoch-as-string", cert("d", expires="1777966619"), "expires"),
    refused("date", "empty-string", cert("d", creationDate=""), "creationDate"),
    refused("date", "date-only", cert("d", expires="2040-01-01"), "expires"),
    refused("date", "offset-25h", cert("d", expires="2040-01-01T00:00:00+25:00"), "expires"),
    refused("date", "30-february", cert("d", creationDate="2026-02-30T00:00:00Z"), "creationDate"),
    refused("date", "words", cert("d", expires="next tuesday"), "expires"),
    refused("date", "leading-space", cert("d", expires=" 2040-01-01T00:00:00Z"), "expires"),
    refused("date", "year-10000", cert("d", expires="10000-01-01T00:00:00Z"), "expires"),
    accepted("date", "year-9999-utc", "d-9999z", cert("d-9999z", createdAt="9999-12-31T23:59:59.999999Z")),
    accepted("date", "year-9999-plus-14", "d-9999p", cert("d-9999p", expires="9999-12-31T23:59:59+14:00")),
    accepted("date", "year-1-utc", "d-1z", cert("d-1z", updatedAt="0001-01-01T00:00:00Z")),
    accepted("date", "year-1-minus-14", "d-1m", cert("d-1m", creationDate="0001-01-01T00:00:00-14:00")),
    accepted("date", "no-timezone-is-utc", "d-naive", cert("d-naive", expires="2040-01-01T00:00:00")),
    accepted("date", "space-separator", "d-space", cert("d-space", expires="2040-01-01 00:00:00Z")),
    accepted("date", "null-expires", "d-null", cert("d-null", expires=None)),
    accepted("date", "date-header-year-9999", "d-hdr", cert("d-hdr"), Date="Fri, 31 Dec 9999 23:59:59 GMT"),
    accepted("date", "date-header-garbage", "d-hdr2", cert("d-hdr2"), Date="yesterday-ish"),
    # size
    Case("size", "declared-over-limit", 413, cert("big", pad="x" * (MAX_BODY + 1))),
    Case("size", "chunked-over-limit", 413, _chunked_oversize),
    accepted("size", "just-under-limit", "fits", cert("fits", pad="x" * (MAX_BODY - 600))),
    # unicode oddities: stored as sent, loadable
    accepted("unicode", "emoji-id", "🎓-cert", cert("🎓-cert")),
    accepted("unicode", "nul-in-string", "nul\u0000id", cert("nul\u0000id")),
    accepted("unicode", "rtl-override", "\u202ecert", cert("\u202ecert")),
    accepted("unicode", "zero-width", "ce\u200brt", cert("ce\u200brt")),
    accepted("unicode", "combining-accent", "cafe\u0301", cert("cafe\u0301")),
    accepted("unicode", "long-id-10k", "i" * 10_000, cert("i" * 10_000)),
    accepted("unicode", "unicode-unknown-keys", "keys", cert("keys", **{"ключ": "значение", "": "empty key", "🔑": 1})),
    accepted("unicode", "escaped-astral", "😀", b'{"_id": "\\ud83d\\ude00"}'),
    # event types named by the sender's header: known ones used, others ignored (type inferred)
    accepted("event-type", "declared-expired", "et-exp", cert("et-exp"), **{EVENT_TYPE_HEADER: "certificate_expired"}),
    accepted(
        "event-type", "unknown-type-ignored", "et-unk", cert("et-unk"), **{EVENT_TYPE_HEADER: "certificate_revoked"}
    ),
    accepted("event-type", "empty-type-ignored", "et-empty", cert("et-empty"), **{EVENT_TYPE_HEADER: ""}),
    # methods and paths
    Case("route", "get", 405, b"", dict(GOOD_AUTH), method="GET"),
    Case("route", "put", 405, cert("r"), method="PUT"),
    Case("route", "delete", 405, b"", dict(GOOD_AUTH), method="DELETE"),
    Case("route", "other-path", 404, cert("r"), path="/webhooks/other"),
    Case("route", "path-traversal", 404, cert("r"), path="/webhooks/certificates/../../etc/passwd"),
]
EXPECTED_EVENT_TYPES = {"et-exp": "certificate_expired", "et-unk": "certificate_completed"}


def _settings(tmp_path: Path):
    return make_settings(tmp_path, max_body_bytes=MAX_BODY, event_type_header=EVENT_TYPE_HEADER)


def send(receiver: RunningReceiver, case: Case) -> httpx.Response:
    url = receiver.url if case.path is None else receiver.base + case.path
    content = case.body() if callable(case.body) else case.body
    headers = {"X-Webhook-Source": "corpus", **case.headers}
    return receiver.client.request(case.method, url, content=content, headers=headers)


def check(receiver: RunningReceiver, case: Case) -> None:
    """Send the case and assert its answer and what the inbox holds afterwards."""
    events, rejected = receiver.inbox.count_events(), receiver.inbox.count_quarantined()
    response = send(receiver, case)
    assert response.status_code < 500, (case.id, response.status_code, response.text[:300])
    assert response.status_code == case.status, (case.id, response.text[:300])
    if case.status == 200:
        assert response.json()["status"] in ("stored", "duplicate")
        sequence = response.json()["sequence"]
        [event] = receiver.inbox.read_events(after_sequence=sequence - 1, up_to_sequence=sequence)
        assert event.certificate_id == case.stored_id
        if case.stored_id in EXPECTED_EVENT_TYPES:
            assert event.event_type == EXPECTED_EVENT_TYPES[case.stored_id]
        return
    assert receiver.inbox.count_events() == events, f"{case.id}: a refused delivery was stored as an event"
    if case.status == 400:
        answer = response.json()
        assert answer["error"] == "invalid_payload" and answer["field"] == case.field, (case.id, answer)
        assert case.field in answer["message"]
    if case.status == 401:
        assert receiver.inbox.count_quarantined() == rejected  # unauthenticated bodies are not kept at all
        assert BEARER not in response.text and BASIC_PASSWORD not in response.text


@pytest.fixture(scope="module")
def corpus_receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningReceiver]:
    with serve_in_thread(_settings(tmp_path_factory.mktemp("corpus"))) as running:
        yield running


def test_the_corpus_has_at_least_60_cases_with_unique_names():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_receiver_case(corpus_receiver: RunningReceiver, case: Case) -> None:
    check(corpus_receiver, case)


def test_after_the_whole_corpus_a_good_delivery_is_stored_and_every_stored_event_loads(tmp_path: Path) -> None:
    with serve_in_thread(_settings(tmp_path)) as receiver:
        for case in CASES:
            check(receiver, case)
        good = receiver.post(certificate("after-the-corpus"), headers=GOOD_AUTH)
        assert good.status_code == 200 and good.json()["status"] == "stored"
        stored = receiver.inbox.count_events()
    warehouse = Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")
    stats = load_certificate_events(warehouse, receiver.inbox)
    assert stats.dead_letters == [] and list_dead_letters(receiver.inbox) == []
    assert stats.events_read == stored == sum(1 for c in CASES if c.status == 200) + 1
    with warehouse.connect(read_only=True) as conn:
        ids = {row[0] for row in conn.execute("SELECT id FROM lms.certificate_events").fetchall()}
    assert ids == {c.stored_id for c in CASES if c.status == 200} | {"after-the-corpus"}


def test_a_body_that_breaks_the_judging_is_refused_with_a_400_and_kept_raw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No known body breaks the judging any more; should one (a bug), a retry would break it again: 400, not 5xx."""
    from pipeline.webhooks import app

    def broken(*args: object, **kwargs: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(app, "to_delivery", broken)  # the one stand-in: a judging bug cannot be made real
    with serve_in_thread(_settings(tmp_path)) as receiver:
        response = receiver.post(certificate("c"), headers=GOOD_AUTH)
        assert response.status_code == 400 and response.json()["field"] == "body"
        assert "could not be judged (RecursionError" in response.json()["message"]
        [(_, _, _, status, _, raw)] = list(receiver.inbox.read_quarantine())
        assert status == 400 and raw == orjson.dumps(certificate("c"))


if __name__ == "__main__":
    print(f"{'group':12} {'case':34} expected")
    for case in CASES:
        outcome = f"{case.status}" + (f" naming {case.field}" if case.field else "")
        outcome += " stored" if case.status == 200 else " nothing stored"
        print(f"{case.group:12} {case.name:34} {outcome}")
    print(f"{len(CASES)} cases")
