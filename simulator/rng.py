"""Deterministic randomness: seeded numpy generators for bulk generation, and a stateless integer hash
so that any answer can be re-derived on demand from (seed, active lesson, attempt slot, question)."""

from __future__ import annotations

import random

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic is the point)."""
    z = values.astype(np.uint64, copy=True) + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def hash_keys(seed: int, *keys: np.ndarray | int) -> np.ndarray:
    """One well-mixed uint64 per position of the key arrays (broadcast together)."""
    with np.errstate(over="ignore"):
        acc = mix64(np.asarray([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
        for key in keys:
            acc = mix64(acc ^ np.asarray(key).astype(np.uint64))
    return acc


def unit_floats(hashes: np.ndarray) -> np.ndarray:
    """Uniform floats in [0, 1) from hashes."""
    return (hashes >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def generator(seed: int, *stream: int) -> np.random.Generator:
    """An independent numpy Generator per (seed, stream...) so adding one stream never shifts another."""
    return np.random.default_rng([seed & 0xFFFFFFFF, *stream])


def object_id(seed_tag: int, kind: int, number: int) -> str:
    """A 24-hex-digit id in the style of the platform's object ids, unique per (kind, number)."""
    return f"{0x60 + kind:02x}{seed_tag & 0xFFFFFF:06x}{number:016x}"


def pyrandom(seed: int, *stream: int) -> random.Random:
    """A seeded stdlib Random for object-by-object generation (far cheaper per draw than numpy scalars)."""
    return random.Random(f"{seed}:{':'.join(map(str, stream))}")
