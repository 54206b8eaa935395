"""Fault injection settings: `error_rate=0.05,rate_limit_every=40,token_ttl=30,latency_ms=10,drift=0.01,
truncate_rate=0.01,date_offset_min=-120,read_lag_min=5,outage_s=60`. Parsed strictly so a typo is an error, not a
silently fault-free run."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FaultSpec:
    error_rate: float = 0.0  # probability of a 500/502/503 per /v1 request
    rate_limit_every: int = 0  # every Nth /v1 request answers 429 with Retry-After (0 = never)
    token_ttl: float | None = None  # seconds; overrides the access-token lifetime while set
    latency_ms: float = 0.0  # added to every /v1 request (asyncio.sleep, the loop keeps serving)
    drift: float = 0.0  # probability per list page that records of the listed collection change first
    truncate_rate: float = 0.0  # probability a 200 body is cut short (bad Content-Length or invalid JSON)
    date_offset_min: float = 0.0  # the Date header runs this many minutes ahead (negative: behind) of lastDate's clock
    read_lag_min: float = 0.0  # listings show a record only this many minutes after the lastDate it carries
    outage_s: float = 0.0  # every /v1 request answers 503 for this many (wall-clock) seconds from when it is set

    def __post_init__(self) -> None:
        for name in ("error_rate", "drift", "truncate_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"fault {name}={value} is not a probability between 0 and 1")
        if self.rate_limit_every < 0:
            raise ValueError(f"fault rate_limit_every={self.rate_limit_every} must be 0 (off) or positive")
        if self.latency_ms < 0:
            raise ValueError(f"fault latency_ms={self.latency_ms} must not be negative")
        if self.read_lag_min < 0:
            raise ValueError(f"fault read_lag_min={self.read_lag_min} must not be negative")
        if self.read_lag_min and self.drift:
            # a drifted record is stamped now, so it would vanish from the listing mid-sweep: a deletion, which
            # no client can see under offset pages (a lagging replica moves records, it does not drop them)
            raise ValueError(
                "faults drift and read_lag_min cannot be combined: a record drifted under a read "
                "lag would vanish from the listing mid-sweep"
            )
        if self.outage_s < 0:
            raise ValueError(f"fault outage_s={self.outage_s} must not be negative")
        if self.token_ttl is not None and self.token_ttl <= 0:
            raise ValueError(f"fault token_ttl={self.token_ttl} must be a positive number of seconds")

    @property
    def active(self) -> bool:
        return self != FaultSpec()

    def __str__(self) -> str:
        defaults = FaultSpec()
        parts = [
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(defaults, f.name)
        ]
        return ",".join(parts)


_PARSERS = {
    "error_rate": float,
    "rate_limit_every": int,
    "token_ttl": float,
    "latency_ms": float,
    "drift": float,
    "truncate_rate": float,
    "date_offset_min": float,
    "read_lag_min": float,
    "outage_s": float,
}


def parse_faults(spec: str | FaultSpec | None) -> FaultSpec:
    """A FaultSpec from `name=value,...` text ("" or None = no faults)."""
    if isinstance(spec, FaultSpec):
        return spec
    if spec is None or not spec.strip():
        return FaultSpec()
    values: dict[str, float | int] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or name not in _PARSERS:
            known = ", ".join(_PARSERS)
            raise ValueError(f"fault {item!r} is not understood: write name=value with name one of {known}")
        try:
            values[name] = _PARSERS[name](raw.strip())
        except ValueError:
            kind = "an integer" if _PARSERS[name] is int else "a number"
            raise ValueError(f"fault {name}={raw.strip()!r}: the value must be {kind}") from None
    return FaultSpec(**values)  # type: ignore[arg-type]
