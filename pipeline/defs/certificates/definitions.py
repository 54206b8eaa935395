"""The certificates domain's definitions: the asset, the inbox sensor and the job it asks for."""

from __future__ import annotations

from dagster import Definitions

from pipeline.defs.certificates.assets import certificates
from pipeline.defs.certificates.jobs import load_certificates_job
from pipeline.defs.certificates.sensors import build_certificate_inbox_sensor
from pipeline.settings import Settings


def build_defs(settings: Settings) -> Definitions:
    return Definitions(
        assets=[certificates],
        jobs=[load_certificates_job],
        sensors=[build_certificate_inbox_sensor(settings.orchestration)],
    )
