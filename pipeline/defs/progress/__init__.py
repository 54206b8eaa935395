"""The progress domain: active lessons and answers, synced by `updatedSince` cursors, and their backfills."""
