"""LessonSync's Dagster definitions, one folder per domain (dagster-open-platform's `defs/<domain>/` layout).

- progress/      active lessons and answers (cursor streams), their freshness, backfill config and job
- directory/     groups, users and who belongs to which group (a snapshot)
- catalog/       lesson categories and the lesson catalogue with its questions (snapshots)
- sessions/      lesson sessions and their registrations (a snapshot)
- certificates/  the webhook inbox's certificates: asset, inbox sensor, load_certificates job
- analytics/     the SQL models of dbt_like_sql/ as assets, their tests as checks, the published copy
- operations/    what spans every domain: nightly schedule, sync/refresh/check jobs, failure alerts, dead runs,
                 the executor

Shared by every domain, in this folder: the load loop (loading.py) and the cursor rule it applies
(windows.py), snapshot assets declared as data (snapshots.py), the raw-table checks (raw_checks.py),
resources (resources.py) and the policy every asset and job follows (policy.py). Each domain's
`definitions.py` builds its part from a `Settings`; code_location.py merges them (pipeline/definitions.py
builds the `defs` Dagster loads with it).
"""
