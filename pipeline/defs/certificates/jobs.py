"""The certificate load the inbox sensor asks for: the certificates asset and the marts that read only it."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from pipeline.defs.certificates.assets import CERTIFICATES_KEY, EVENTS_KEY
from pipeline.defs.lake.assets import RAW_MIRROR_SELECTION
from pipeline.defs.operations.runs.retry_policy import retry_policy_hook
from pipeline.defs.policy import WRITES_WAREHOUSE

# A certificates load and the models that read only certificate tables (their staging and the certificate marts,
# in the warehouse's `analytics` schema). Models that also read other raw tables (daily_activity reads answers
# too) and the published copy for analysts (it needs every model built) wait for the next sync: before the first
# one their other inputs do not exist, and the run would fail on them. The Iceberg mirror of the raw tables
# follows the load, as in every job that loads raw tables.
_CERTIFICATE_TABLES = AssetSelection.assets(EVENTS_KEY, CERTIFICATES_KEY)
_OTHER_RAW_TABLES = AssetSelection.key_prefixes(["lms"]) - _CERTIFICATE_TABLES
CERTIFICATES_SELECTION = (_CERTIFICATE_TABLES.downstream() - _OTHER_RAW_TABLES.downstream()) | RAW_MIRROR_SELECTION

load_certificates_job = define_asset_job(
    "load_certificates",
    selection=CERTIFICATES_SELECTION,
    description="Load the webhook inbox's new certificate events, then rebuild the certificate marts in the "
    "warehouse (published copies and daily_activity: next sync) and mirror the raw tables to Iceberg.",
    tags=WRITES_WAREHOUSE,
    hooks={retry_policy_hook},
)
