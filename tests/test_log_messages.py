"""Dagster's messages as LessonSync's console writes them: a person reads them, and a log pipeline stores them."""

from __future__ import annotations

import logging

import pytest

from pipeline.logs import Console, ConsoleHandler, shortened_unyielded


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


def test_a_library_logging_the_interrupt_of_a_stop_writes_nothing_and_its_errors_still_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SQLAlchemy logs "Exception closing connection" with the KeyboardInterrupt a SIGTERM raised in the main thread:
    the stopped command's FAILED line says what happened; a real error keeps its traceback."""
    library = logging.getLogger("sqlalchemy.pool.impl.NullPool.test")
    library.propagate = False
    library.addHandler(ConsoleHandler(Console("text"), of_runs=False))
    for raised in (KeyboardInterrupt(), OSError("disk I/O error")):
        try:
            raise raised
        except BaseException:
            library.error("Exception closing connection <sqlite3.Connection>", exc_info=True)
    written = capsys.readouterr().err
    assert written.count("Exception closing connection") == 1
    assert "OSError: disk I/O error" in written and "KeyboardInterrupt" not in written
