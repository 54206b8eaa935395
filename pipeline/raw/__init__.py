"""The raw sync without Dagster: which window each stream reads (windows.py), the selected streams fetched at once
and committed one by one as their fetches end (runner.py), the answers planned from the active lessons
(answers.py, answer_versions.py). The Dagster multi-asset that runs it: pipeline/defs/raw/assets.py."""
