"""The operations domain: what spans every domain (schedule, sync jobs, alerts, dead runs, the executor)."""
