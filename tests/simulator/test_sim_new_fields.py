"""A field the platform begins to send (simulator/newfields.py), over real HTTP: absent until the advance it starts
with, then on every active lesson changed since (or a fixed share of them), served as the ground truth has it; the
option is parsed strictly, in Python and on the command line."""

from __future__ import annotations

import argparse

import pytest
from simtools import all_pages, api_client

from simulator import NewField, SimulatorConfig, cli, start_simulator
from simulator.newfields import parse_new_field

KEY = ("_ownerId", "_userId", "_lessonId")


def served(sim) -> dict[tuple[str, ...], dict]:  # type: ignore[no-untyped-def]
    with api_client(sim) as http:
        return {tuple(r[k] for k in KEY): r for page in all_pages(http, "/v1/active-lessons") for r in page}


def test_a_new_field_starts_with_its_advance_on_the_records_that_change() -> None:
    fields = [("active_lessons", "quizTimeSeconds", "int"), NewField("active_lessons", "bonus", "object", 2, 0.5)]
    with start_simulator(SimulatorConfig(seed=42, scale="tiny", new_fields=fields)) as sim:
        assert not any("quizTimeSeconds" in r for r in served(sim).values())
        start = sim.now()
        sim.advance(hours=24)
        records = served(sim)
        truth = {tuple(r[k] for k in KEY): r for r in sim.ground_truth("active_lessons")}
        assert records == truth  # pages and ground truth agree, the new field included
        changed = {k for k, r in records.items() if r["lastDate"] >= start.isoformat().replace("+00:00", "Z")}
        carrying = {k for k, r in records.items() if "quizTimeSeconds" in r}
        assert carrying == changed and changed
        assert all(isinstance(records[k]["quizTimeSeconds"], int) for k in carrying)
        assert not any("bonus" in r for r in records.values())  # starts with the second advance

        sim.advance(hours=24)
        records = served(sim)
        bonus = {k for k, r in records.items() if "bonus" in r}
        recent = {k for k, r in records.items() if "quizTimeSeconds" in r} - changed
        assert bonus and bonus < recent | changed  # a share of the records changed in the second advance
        assert all(set(records[k]["bonus"]) == {"seconds", "label"} for k in bonus)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("lessons:x:int", "resource 'lessons'"),
        ("active_lessons:quiz time:int", "plain API name"),
        ("active_lessons:q:date", "kind 'date'"),
        ("active_lessons:q:int:0", "from_advance"),
        ("active_lessons:q:int:1:1.5", "share"),
        ("active_lessons:q:int:one", "integer"),
        ("active_lessons", "resource:name"),
    ],
)
def test_a_bad_new_field_is_refused_naming_what_is_wrong(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_new_field(spec)
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--new-field", spec])


def test_the_command_line_takes_new_fields() -> None:
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    args = parser.parse_args(
        ["--new-field", "active_lessons:quizTimeSeconds:int:2:0.25", "--new-field", "active_lessons:x"]
    )
    assert args.new_fields == [
        NewField("active_lessons", "quizTimeSeconds", "int", 2, 0.25),
        NewField("active_lessons", "x", "int", 1, 1.0),
    ]
    assert SimulatorConfig(new_fields=args.new_fields).new_fields == tuple(args.new_fields)
