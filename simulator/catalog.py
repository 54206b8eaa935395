"""The owner's catalogue: categories and lessons (notions, contents, entry and exit quizzes).

Besides the API records, keeps per-lesson arrays the progress and answer code index by lesson number:
question counts, version, validation threshold, whether a lesson awards a badge.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator import names
from simulator.questions import QUESTION_TYPES, Question, make_question
from simulator.rng import object_id, pyrandom

KIND_CATEGORY, KIND_LESSON, KIND_QUESTION, KIND_TRACK, KIND_BADGE = 1, 2, 3, 4, 5
LESSON_STATUSES = ("online",) * 12 + ("draft", "saved", "submit", "refused", "deleted")
CONTENT_TYPES = ("standard", "flashCards", "video", "infographic")
IMAGE_TYPES = ("original", "site", "site-low-res", "mobile", "small", "tiny", "specific")


@dataclass
class Catalog:
    categories: list[dict[str, Any]]
    lessons: list[dict[str, Any]]  # API Lesson records, in listing order
    lesson_ids: list[str]
    lesson_titles: list[str]
    entry_questions: list[list[Question]]  # per lesson; empty when the lesson has no entry quiz
    exit_questions: list[list[Question]]
    version: np.ndarray  # int16 per lesson
    threshold: np.ndarray  # int16 per lesson: stats.validationThreshold (percent)
    badge_ids: list[str | None]  # per lesson: the badge its success awards, if any

    @property
    def n_entry(self) -> np.ndarray:
        return np.array([len(q) for q in self.entry_questions], dtype=np.int16)

    @property
    def n_exit(self) -> np.ndarray:
        return np.array([len(q) for q in self.exit_questions], dtype=np.int16)

    def lesson_number(self, lesson_id: str) -> int | None:
        return self._index.get(lesson_id)

    def __post_init__(self) -> None:
        self._index = {lesson_id: n for n, lesson_id in enumerate(self.lesson_ids)}


def build_catalog(seed: int, n_lessons: int, n_categories: int, owner_id: str) -> Catalog:
    rng = pyrandom(seed, 2)
    categories = _categories(seed, n_categories, owner_id, rng)
    track_ids = [object_id(seed, KIND_TRACK, k) for k in range(max(2, n_lessons // 6))]
    lesson_ids = [object_id(seed, KIND_LESSON, n) for n in range(n_lessons)]
    # awkward ids replace ordinary ones near the start so every scale has them, answered and not
    for offset, special in enumerate(names.SPECIAL_LESSON_IDS):
        lesson_ids[min(1 + 3 * offset, n_lessons - 1)] = special
    question_counter = 0
    lessons, titles, entries, exits = [], [], [], []
    versions = np.array([rng.randrange(1, 6) for _ in range(n_lessons)], dtype=np.int16)
    thresholds = np.array([rng.choice((50, 60, 70, 75, 80)) for _ in range(n_lessons)], dtype=np.int16)
    badges: list[str | None] = []
    for n in range(n_lessons):
        title = f"{names.LEVEL_WORDS[n % len(names.LEVEL_WORDS)]} {names.TOPICS[n % len(names.TOPICS)]} n°{n + 1}"
        n_entry = rng.randrange(3, 7) if rng.random() < 0.5 else 0
        n_exit = rng.randrange(6, 15)
        entry, exit_ = [], []
        for quiz, count in ((entry, n_entry), (exit_, n_exit)):
            for k in range(count):
                qtype = rng.choice(QUESTION_TYPES)
                qid = object_id(seed, KIND_QUESTION, question_counter)
                question_counter += 1
                quiz.append(make_question(qid, f"Question {k + 1} · {title}", qtype, rng))
        badges.append(object_id(seed, KIND_BADGE, n) if rng.random() < 0.4 else None)
        lessons.append(_lesson_record(lesson_ids[n], title, entry, exit_, categories, track_ids, rng))
        titles.append(title)
        entries.append(entry)
        exits.append(exit_)
    return Catalog(categories, lessons, lesson_ids, titles, entries, exits, versions, thresholds, badges)


def _categories(seed: int, count: int, owner_id: str, rng: random.Random) -> list[dict[str, Any]]:
    records = []
    for k in range(count):
        record: dict[str, Any] = {
            "name": names.CATEGORY_NAMES[k % len(names.CATEGORY_NAMES)] + ("" if k < 16 else f" {k // 16 + 1}"),
            "ownerID": owner_id,
            "id": names.SPECIAL_CATEGORY_ID if k == 1 else object_id(seed, KIND_CATEGORY, k),
        }
        if rng.random() < 0.7:  # description is optional in the schema: sometimes absent
            record["description"] = f"Formations « {record['name']} »"
        records.append(record)
    return records


def _images(rng: random.Random, stem: str) -> list[dict[str, str]]:
    kinds = rng.sample(IMAGE_TYPES, rng.randrange(1, 4))
    return [{"type": kind, "url": f"https://cdn.example.com/{stem}/{kind}.png"} for kind in kinds]


def _lesson_record(
    lesson_id: str,
    title: str,
    entry: list[Question],
    exit_: list[Question],
    categories: list[dict[str, Any]],
    track_ids: list[str],
    rng: random.Random,
) -> dict[str, Any]:
    stem = f"l{rng.getrandbits(30):08x}"
    n_notions = rng.randrange(1, 4)
    notions = []
    for k in range(n_notions):
        notion: dict[str, Any] = {
            "contents": [_content(rng, stem, c) for c in range(rng.randrange(1, 4))],
            "description": f"Notion {k + 1} de « {title} »",
            "title": f"Notion {k + 1}",
            "iconsPreview": _images(rng, f"{stem}/n{k}"),
        }
        if k == 0 and entry:
            notion["entryQuizz"] = {"type": "diagnostic", "questions": [q.api_record(rng) for q in entry]}
        if k == n_notions - 1:
            notion["exitQuizz"] = {
                "type": "evaluation",
                "lifeNumber": 3,
                "questions": [q.api_record(rng) for q in exit_],
            }
        notions.append(notion)
    n_cats = min(len(categories), rng.randrange(1, 3))
    return {
        "status": rng.choice(LESSON_STATUSES),
        "visibility": "public" if rng.random() < 0.7 else "private",
        "summary": f"Ce que vous saurez faire après « {title} ».",
        "title": title,
        "id": lesson_id,
        "playMode": rng.choice(("standard", "standard", "battle", "adaptive")),
        "categoryIds": [c["id"] for c in rng.sample(categories, n_cats)],
        "trackIds": rng.sample(track_ids, rng.randrange(0, 3)),
        "level": rng.choice(("beginning", "intermediary", "expert")),
        "images": _images(rng, stem),
        "image": f"https://cdn.example.com/{stem}/cover.jpg",
        "notions": notions,
    }


def _content(rng: random.Random, stem: str, k: int) -> dict[str, Any]:
    ctype = rng.choice(CONTENT_TYPES)
    content: dict[str, Any] = {"type": ctype, "name": f"Contenu {k + 1}", "duration": rng.randrange(30, 900)}
    if ctype == "standard":
        content["standardContent"] = "## À retenir\n\n- **Sécurité** d'abord\n- Puis l'*efficacité*"
    elif ctype == "video":
        content["videoContent"] = {
            "url": f"https://video.example.com/{stem}/{k}.mp4",
            "thumbnail": f"https://cdn.example.com/{stem}/{k}.jpg",
        }
    elif ctype == "flashCards":
        content["flashCardContent"] = [
            {"frontContent": {"text": f"Recto {c}"}, "backContent": {"text": f"Verso {c}"}} for c in range(2)
        ]
    else:
        content["icons"] = _images(rng, f"{stem}/c{k}")
    return content
