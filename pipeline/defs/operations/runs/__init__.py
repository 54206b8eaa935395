"""How LessonSync's Dagster runs survive a crash: who runs where (host and pid tags), recovery of runs whose
process is gone, and an in-process run's wait for the `warehouse` pool, visible, bounded and asleep."""
