"""The source client: a typed, resilient, streaming client for the platform's read API.

    from pipeline.source import TABLES, STREAMS, PlatformClient, Batch
"""

from pipeline.source.catalog import TABLES
from pipeline.source.client import PlatformClient
from pipeline.source.errors import PlatformAuthError, PlatformRequestError, PlatformResponseError, SourceError
from pipeline.source.planner import plan_answer_requests
from pipeline.source.requests import Batch
from pipeline.source.stats import RunStats
from pipeline.source.streams import STREAMS, StreamSpec
from pipeline.source.tables import TableSpec

__all__ = [
    "STREAMS", "TABLES", "Batch", "PlatformAuthError", "PlatformClient", "PlatformRequestError",
    "PlatformResponseError", "RunStats", "SourceError", "StreamSpec", "TableSpec", "plan_answer_requests",
]
