"""The certificate inbox sensor. `certificate_inbox_sensor` watches the webhook inbox (read-only) and asks for a run of
the `load_certificates` job (the certificates asset, then the marts that read only it) when events past its
cursor exist. It never opens the DuckDB warehouse: the run itself loads from the warehouse's own high-water
mark, so a request the sensor makes twice, or a run that fails, loses nothing -- the next run picks up every
event not yet committed."""

# No `from __future__ import annotations`: Dagster reads the resource annotations at runtime.
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from dagster import DefaultSensorStatus, RunRequest, SensorDefinition, SensorEvaluationContext, SkipReason, sensor

from pipeline.defs.certificates.jobs import load_certificates_job
from pipeline.defs.certificates.resource import InboxResource
from pipeline.settings import OrchestrationSettings


@dataclass(frozen=True)
class InboxCursor:
    """Highest inbox sequence already requested, and which inbox it counts in (a recreated inbox
    restarts at 1 under a new id)."""

    inbox_id: str | None
    sequence: int

    @classmethod
    def parse(cls, text: str | None) -> "InboxCursor":
        if not text:
            return cls(None, 0)
        if text.isdigit():  # a bare sequence, e.g. set by hand in the UI
            return cls(None, int(text))
        data = json.loads(text)
        return cls(data.get("inbox_id"), int(data.get("sequence", 0)))

    def dump(self) -> str:
        return json.dumps({"inbox_id": self.inbox_id, "sequence": self.sequence}, sort_keys=True)

    def seen_in(self, inbox_id: str) -> int:
        """Sequence already requested for this inbox (0 for another inbox)."""
        return self.sequence if self.inbox_id in (None, inbox_id) else 0


def build_certificate_inbox_sensor(settings: OrchestrationSettings) -> SensorDefinition:
    """The sensor, ticking every Settings.certificate_sensor_interval seconds."""
    return sensor(
        name="certificate_inbox_sensor",
        job=load_certificates_job,
        minimum_interval_seconds=settings.certificate_sensor_interval,
        default_status=DefaultSensorStatus.RUNNING,
        description="Loads new certificate webhook deliveries from the inbox (every "
        "LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL s, default 30).",
    )(certificate_inbox_tick)


def certificate_inbox_tick(context: SensorEvaluationContext, inbox: InboxResource) -> RunRequest | SkipReason:
    """One tick: a run request when the inbox holds events past the cursor, else why not."""
    box = inbox.inbox()
    inbox_id = box.inbox_id()
    if inbox_id is None:
        return SkipReason(f"no inbox at {box.location} yet: the webhook receiver has not stored any delivery")
    cursor = InboxCursor.parse(context.cursor)
    backlog = box.backlog()
    high = backlog.max_sequence
    seen = cursor.seen_in(inbox_id)
    lag = backlog.oldest_unloaded_age(datetime.now(UTC))
    if high <= seen:
        return SkipReason(
            f"no new certificate events (inbox sequence {high}, already requested up to {seen}; "
            f"{backlog.depth} not loaded yet, oldest {lag:.0f} s)"
        )
    context.update_cursor(InboxCursor(inbox_id, high).dump())
    new = box.count_events_between(seen, high)
    context.log.info(
        f"certificate inbox: {new} new event(s) up to sequence {high}; "
        f"depth {backlog.depth}, oldest unloaded {lag:.0f} s"
    )
    # The inbox id in the run key keeps a recreated inbox's sequences from matching old keys. The tags carry
    # the backlog the run was asked for (run metadata an operator can filter and chart).
    return RunRequest(
        run_key=f"certificates-{inbox_id[:12]}-{high}",
        tags={
            "lessonsync/inbox_depth": str(backlog.depth),
            "lessonsync/inbox_lag_seconds": f"{lag:.0f}",
            "lessonsync/inbox_sequence": str(high),
        },
    )
