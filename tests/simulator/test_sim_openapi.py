"""/openapi.json describes every operation of the spec, and schemathesis (property-based, over real HTTP)
finds no 5xx and no response that breaks the document's own schemas."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from simtools import token_pair

from simulator import SimulatorConfig, SimulatorHandle, start_simulator

SPEC_OPERATIONS = {
    ("get", "/v1/active-lessons"),
    ("get", "/v1/users/{USER_ID}/active-lessons"),
    ("get", "/v1/lessons/{LESSON_ID}/active-lessons"),
    ("get", "/v1/users/{USER_ID}/lessons/{LESSON_ID}/active-lessons"),
    ("get", "/v1/users/{USER_ID}/lessons/{LESSON_ID}/answers"),
    ("get", "/v1/lessons/{LESSON_ID}/answers"),
    ("get", "/v1/users/{USER_ID}/answers"),
    ("post", "/v1/auth/logout-by-id"),
    ("post", "/v1/callbacks/update-user-lesson-status/{CALLBACK_TOKEN}"),
    ("get", "/v1/callbacks/update-user-lesson-status/{CALLBACK_TOKEN}"),
    ("get", "/v1/categories"),
    ("get", "/v1/groups"),
    ("get", "/v1/groups/name/{uniqueName}/users"),
    ("get", "/v1/groups/name/{uniqueName}"),
    ("get", "/v1/groups/{groupId}/users"),
    ("get", "/v1/groups/{groupId}"),
    ("post", "/v1/token"),
    ("post", "/v1/token/refresh"),
    ("get", "/v1/lesson-session"),
    ("post", "/v1/lesson-session"),
    ("get", "/v1/lesson-session/{LESSON_ID}"),
    ("put", "/v1/lesson-session/{ID}"),
    ("post", "/v1/lesson-session/{LESSON_SESSION_ID}/register/{USER_ID}"),
    ("delete", "/v1/lesson-session/{LESSON_SESSION_ID}/unregister/{USER_ID}"),
    ("get", "/v1/lesson-session/{USER_ID}/registrations"),
    ("get", "/v1/lessons"),
}


@pytest.fixture(scope="module")
def schema_sim() -> Iterator[SimulatorHandle]:
    with start_simulator(SimulatorConfig(scale="tiny", seed=3)) as handle:
        yield handle


@pytest.fixture(scope="module")
def api_schema(schema_sim: SimulatorHandle):  # type: ignore[no-untyped-def]
    return schemathesis.openapi.from_url(f"{schema_sim.base_url}/openapi.json")


@pytest.fixture(scope="module")
def bearer(schema_sim: SimulatorHandle) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_pair(schema_sim.base_url)['access_token']}"}


def test_openapi_documents_every_operation_of_the_spec(schema_sim) -> None:  # type: ignore[no-untyped-def]
    import httpx

    document = httpx.get(f"{schema_sim.base_url}/openapi.json").json()
    operations = {(method, path) for path, item in document["paths"].items() for method in item}
    assert operations == SPEC_OPERATIONS
    answers = document["paths"]["/v1/lessons/{LESSON_ID}/answers"]["get"]
    assert answers["responses"]["200"]["content"]["application/json"]["schema"]["items"]["$ref"].endswith("/Answer")
    assert "422" not in answers["responses"] and "400" in answers["responses"]
    assert {"ActiveLesson", "Answer", "Lesson", "LessonSession", "UserGroup", "User", "DomainErrorModel"} <= set(
        document["components"]["schemas"]
    )


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_and_responses_match_their_schema(api_schema, bearer, mode) -> None:  # type: ignore[no-untyped-def]
    failures: list[str] = []
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @settings(
            max_examples=6,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def exercise(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=bearer, checks=CHECKS)

        try:
            exercise()
        except Unsatisfiable:
            continue  # nothing to negate (e.g. a single string path parameter): no negative case exists
        except Exception as exc:  # collect every operation's failure, then report them together
            failures.append(f"{operation.label}: {str(exc)[:800]}")
    assert not failures, "\n\n".join(failures)
