"""Quiz questions of the catalogue and the few prepared answers each one can receive.

An answer row only varies in ids, times and which prepared variant it got, so the variants (results,
validity, validation) are built once per question and shared by every answer that uses them. Variants
0-1 are correct answers, 2-3 incorrect ones; all four AnswerResult types and position objects occur.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from simulator.names import ANSWER_WORDS

CHOICE_TYPES = ("simple", "multiple", "checkbox", "truefalse", "swipecards", "order", "label-matching")
QUESTION_TYPES = (
    *CHOICE_TYPES,
    "image-map",
    "gap-fill",
    "free-text",
    "free-text-image-b64",
    "free-number",
    "satisfaction",
    "evaluation",
)
_TINY_PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@dataclass(frozen=True)
class Variant:
    results: list[dict[str, Any]]
    is_valid: bool
    validation: dict[str, Any] | None


@dataclass(frozen=True)
class Question:
    id: str
    title: str
    type: str
    variants: tuple[Variant, Variant, Variant, Variant]
    fragments: tuple[bytes, ...] = ()  # per variant: the answer's question-dependent JSON members, pre-encoded

    def api_record(self, rng: random.Random) -> dict[str, Any]:
        """The question as the Lesson schema carries it (plus its `id`, so answers can join it)."""
        record: dict[str, Any] = {
            "type": self.type,
            "explanation": f"Explication : {self.title.lower()}",
            "title": self.title,
            "id": self.id,
            "allowedAttempts": rng.randrange(1, 4),
        }
        if self.type in CHOICE_TYPES:
            record["choicesOrderType"] = "random" if rng.random() < 0.5 else "ordered"
            record["choices"] = [
                {"title": f"Choix {k + 1}", "good": k == 0, "choiceAnswer": f"c{k + 1}", "value": k} for k in range(3)
            ]
        return record


def make_question(question_id: str, title: str, qtype: str, rng: random.Random) -> Question:
    variants = tuple(_variant(qtype, k, rng) for k in range(4))
    return Question(question_id, title, qtype, variants, tuple(_fragment(question_id, title, v) for v in variants))  # type: ignore[arg-type]


def _fragment(question_id: str, title: str, variant: Variant) -> bytes:
    members: dict[str, Any] = {
        "_questionId": question_id,
        "questionTitle": title,
        "isValid": variant.is_valid,
        "results": variant.results,
    }
    if variant.validation is not None:
        members["validation"] = variant.validation
    return orjson.dumps(members)[1:-1]  # without braces: spliced into each answer object


def _variant(qtype: str, k: int, rng: random.Random) -> Variant:
    valid = k < 2
    if qtype in CHOICE_TYPES:
        picks = 1 if qtype in ("simple", "truefalse", "swipecards") else 2
        results = []
        for p in range(picks):
            choice = 0 if valid else 1 + (k + p) % 2
            value: Any = choice if qtype == "truefalse" else f"c{choice + 1}"
            results.append({"type": "choice-ref", "value": value, "labelName": f"Choix {choice + 1}"})
        return Variant(results, valid, None)
    if qtype == "image-map":
        left, top = round(rng.uniform(0, 100), 2), round(rng.uniform(0, 100), 2)
        results = [
            {
                "type": "choice-ref",
                "value": f"zone-{k}",
                "labelName": f"Zone {'AB'[k % 2]}",
                "position": {"left": left, "top": top},
            }
        ]
        return Variant(results, valid, None)
    if qtype in ("free-number", "satisfaction", "evaluation"):
        number: float | int = rng.randrange(0, 11) if qtype != "free-number" else round(rng.gauss(42, 9), 1)
        return Variant([{"type": "number", "value": number}], valid, None)
    if qtype == "gap-fill":
        word = ANSWER_WORDS[k % len(ANSWER_WORDS)]
        return Variant([{"type": "text", "value": word, "labelName": "trou 1"}], valid, None)
    # free text and pictures are validated by a person: feedback, sometimes forced by an admin or coach
    result_type, value = (
        ("image-base-64", _TINY_PNG)
        if qtype == "free-text-image-b64"
        else ("text", f"Réponse libre n°{k} — « {ANSWER_WORDS[(k * 3) % len(ANSWER_WORDS)]} »")
    )
    validation: dict[str, Any] = {
        "feedback": {
            "status": ("valid", "valid", "invalid", "pending")[k],
            "title": ("Bravo", "Très bien", "À revoir", "")[k],
        },
    }
    if k == 1:
        validation["forcedValidationType"] = "coach"
        validation["isForcedValid"] = True
    elif k == 2:
        validation["forcedValidationType"] = "admin"
        validation["isForcedValid"] = False
    return Variant([{"type": result_type, "value": value}], valid, validation)
