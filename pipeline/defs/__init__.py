"""LessonSync's Dagster definitions, one folder per domain (dagster-open-platform's `defs/<domain>/` layout).

- raw/          every raw table of the API as one subsettable multi-asset (`lms_raw`) over pipeline/raw/, each
                 table in its stream's group with its deps and the links its checks verify, from the stream
                 declarations (pipeline/contract/declarations.py); the raw-table checks (raw/checks.py), which
                 the webhooks' tables share
- progress/      the progress tables' freshness, backfill config and job, their clock-skew report
- certificates/  the webhook inbox's certificates: asset, inbox sensor and resource, load_certificates job
- analytics/     the SQL models of dbt_like_sql/ as assets, their tests as checks, the published copy
- operations/    what spans every domain: nightly schedule, sync/refresh/check jobs, failure alerts, dead runs,
                 the executor, the pool wait of in-process runs

Shared by every domain, in this folder: resources (resources.py) and the policy every asset and job follows
(policy.py). Each domain's `definitions.py` builds its part from a `Settings`; code_location.py merges them
(pipeline/definitions.py builds the `defs` Dagster loads with it). Dagster is imported here and by what runs these
definitions (the CLI, pipeline/sync.py, the instance's helpers in pipeline/instance/, the demo stack), nowhere
else: the import contract `dagster-only-in-defs` checks it.
"""
