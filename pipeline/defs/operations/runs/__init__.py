"""How LessonSync's Dagster runs survive a crash: who runs where (host and pid tags), recovery of runs whose
process is gone, and an executor whose wait for the `warehouse` pool is visible, bounded and asleep."""
