"""Dagster's messages as LessonSync's console writes them: a person reads them, and a log pipeline stores them."""

from __future__ import annotations

from pipeline.logs import shortened_unyielded


def test_an_op_that_yields_few_of_many_outputs_is_one_short_line() -> None:
    names = [f"'analytics__model_{i:03}_not_null__id'" for i in range(91)]
    message = f"op 'analytics_models' did not yield or return expected outputs {{{', '.join(reversed(names))}}}."
    short = shortened_unyielded(message)
    assert short == (
        "op 'analytics_models' did not yield or return 91 expected output(s): analytics__model_000_not_null__id, "
        "analytics__model_001_not_null__id, analytics__model_002_not_null__id, and 88 more."
    )


def test_a_few_outputs_are_all_named_and_other_messages_are_left_alone() -> None:
    assert shortened_unyielded("op 'x' did not yield or return expected outputs {'b', 'a'}.") == (
        "op 'x' did not yield or return 2 expected output(s): a, b."
    )
    assert shortened_unyielded('Started execution of step "lms_raw".') == 'Started execution of step "lms_raw".'
