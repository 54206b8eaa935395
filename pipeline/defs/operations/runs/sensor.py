"""Under the daemon: a run whose process died without anyone seeing it exit (the machine rebooted, or `dagster dev`
was killed with its run workers) stays STARTED and keeps the `warehouse` pool and the writer run slot. Dagster's
run monitoring cannot tell (the default run launcher has no worker health check), so this sensor does what every
LessonSync run does before it starts (recovery.py): fail this host's runs whose process is gone, free their
slots. Runs on other hosts (Kubernetes run workers) are left to their launcher's own health checks."""

from __future__ import annotations

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from pipeline.defs.operations.runs.recovery import recover_dead_runs

DEAD_RUN_CHECK_SECONDS = 60


@sensor(
    name="dead_run_sensor",
    minimum_interval_seconds=DEAD_RUN_CHECK_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description="Fails runs of this host whose process is gone and frees the pool slots they hold.",
)
def dead_run_sensor(context: SensorEvaluationContext) -> SkipReason:
    messages = recover_dead_runs(context.instance, by="dead_run_sensor")
    for message in messages:
        context.log.warning(message)
    return SkipReason(" ".join(messages) if messages else "no dead run on this host")
