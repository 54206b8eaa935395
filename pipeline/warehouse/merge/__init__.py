"""One load's parts merged into DuckDB inside the caller's transaction (a commit, a roll-forward, a rebuild),
with the sync state that commits beside them and the checks over what the loads wrote."""
