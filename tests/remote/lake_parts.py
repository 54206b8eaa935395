"""The lake's parts in a bucket: those its manifests name, and those stored (the Iceberg mirror's data files under
`<lake>/iceberg/` are not lake parts)."""

from __future__ import annotations

import json

import s3fs

from pipeline.warehouse.lake.lake import list_manifests
from pipeline.warehouse.lake.lakestore import ObjectLake


def named_parts(lake: ObjectLake) -> set[str]:
    return {
        lake.readable(part["path"]).removeprefix("s3://")
        for _, ref in list_manifests(lake)
        for table in json.loads(lake.read_manifest(ref.name))["tables"]
        for part in table["parts"]
    }


def stored_parts(lake: ObjectLake) -> set[str]:
    mirror = f"{lake.location.removeprefix('s3://')}/iceberg/"
    found = s3fs.S3FileSystem(skip_instance_cache=True).find(lake.location)
    return {key for key in found if key.endswith(".parquet") and not key.startswith(mirror)}
