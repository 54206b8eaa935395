"""The one error type of the analytics layer: something in dbt_like_sql/ (or in the data it reads) is wrong,
and the message names the file, the model or the table, and what to do next."""

from __future__ import annotations


class ModelError(ValueError):
    """A model, its YAML or a reference in it is invalid, or a model failed to build."""
