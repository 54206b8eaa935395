"""The LessonSync code location for one `Settings`: each domain's definitions (pipeline/defs/<domain>/
definitions.py) merged with the raw-table checks and the resources, under the shared policy.

Apart from pipeline/definitions.py (whose module attribute `defs`, built at import from the environment, is
what `workspace.yaml` and `dagster dev` load) so that code with its own settings (`lessonsync sync`,
pipeline/sync.py, tests) builds the definitions once, not a second time as a side effect of the import."""

from __future__ import annotations

from dagster import Definitions

from pipeline.contract.streams import stream_links
from pipeline.defs.analytics import definitions as analytics
from pipeline.defs.certificates import definitions as certificates
from pipeline.defs.lake import definitions as lake
from pipeline.defs.operations import definitions as operations
from pipeline.defs.policy import with_policy
from pipeline.defs.progress import definitions as progress
from pipeline.defs.raw import definitions as raw
from pipeline.defs.raw.checks import build_webhook_table_checks
from pipeline.defs.resources import build_resources
from pipeline.settings import Settings


def build_definitions(settings: Settings) -> Definitions:
    """The code location for `settings` (nothing opened: files and sockets wait for a run), from the streams declared
    now (pipeline/contract/streams.py SYNC_STREAMS): their tables, groups, deps and the links their checks verify."""
    links = stream_links()
    return with_policy(
        Definitions.merge(
            raw.build_defs(settings, links),
            progress.build_defs(),
            certificates.build_defs(settings),
            analytics.build_defs(settings),
            lake.build_defs(settings),
            operations.build_defs(settings),
            Definitions(
                asset_checks=build_webhook_table_checks(settings.orchestration, links),
                resources=build_resources(settings),
            ),
        )
    )
