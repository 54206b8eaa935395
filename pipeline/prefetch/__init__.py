"""Overlapped fetching within one sync run: every stream of the run fetched into its own warehouse load (lake
parts on disk) in a background thread, all through one client and so one limit on requests in flight, while
the run's steps commit one after another (docs/warehouse.md, "Overlapped fetches")."""
