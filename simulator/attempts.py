"""What each answer of an attempt is, derived (never stored) from (seed, active lesson, slot, question):
whether it is correct and which prepared variant it used. Generation, activity and serving all call
these functions, so an answer served today is bit-for-bit the answer counted into yesterday's score."""

from __future__ import annotations

import numpy as np

from simulator.rng import hash_keys, unit_floats

_ANSWER_SALT = 0xA5A5_0001


def ragged_arange(counts: np.ndarray) -> np.ndarray:
    """[0..c0-1, 0..c1-1, ...] for non-negative counts, without a Python loop."""
    counts = counts.astype(np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def answer_outcomes(seed: int, al: np.ndarray, slot: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is_valid, variant 0-3) per answer. Later exit attempts are more often right than first ones."""
    h = hash_keys(seed ^ _ANSWER_SALT, al, slot, q)
    p_valid = np.where(slot == 0, 0.45, 0.55 + 0.1 * (slot.astype(np.float64) - 1.0))
    valid = unit_floats(h) < p_valid
    variant = np.where(valid, 0, 2) + ((h >> np.uint64(7)) & np.uint64(1)).astype(np.int64)
    return valid, variant


def correct_counts(seed: int, al: np.ndarray, slot: int, answered: np.ndarray) -> np.ndarray:
    """Correct answers per active lesson for one slot, given how many questions each answered."""
    q = ragged_arange(answered)
    owner = np.repeat(np.arange(len(al)), answered.astype(np.int64))
    valid, _ = answer_outcomes(seed, al[owner], np.full(len(q), slot, dtype=np.int64), q)
    return np.bincount(owner, weights=valid, minlength=len(al)).astype(np.int16)


def answer_times(
    att_start: np.ndarray, att_end: np.ndarray, answered: np.ndarray, q: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(begin, end) ms of answer q of an attempt: the attempt's span split evenly, the last ending at att_end."""
    span = att_end - att_start
    count = np.maximum(answered.astype(np.int64), 1)
    begin = att_start + span * q // count
    end = att_start + span * (q + 1) // count
    return begin, end
