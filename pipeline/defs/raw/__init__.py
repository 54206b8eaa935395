"""The raw sync as one subsettable multi-asset (assets.py) over the Dagster-free runner of pipeline/raw/."""
