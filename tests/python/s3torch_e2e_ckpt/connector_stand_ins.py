#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD
"""Stand-ins for the two connector internals that the vendored tests use only to check what
was written: ``S3Client.list_objects`` (here a boto3 listing, an independent client) and
``parse_s3_uri`` (the connector's, copied from ``s3torchconnector/_s3dataset_common.py``).
Nothing in bucketload is exercised through them."""

from dataclasses import dataclass
from typing import Iterator, List, Tuple

import boto3


def parse_s3_uri(uri: str) -> Tuple[str, str]:
    if not uri or not uri.startswith("s3://"):
        raise ValueError("Only s3:// URIs are supported")
    uri = uri[len("s3://") :]
    if not uri:
        raise ValueError("Bucket name must be non-empty")
    split = uri.split("/", maxsplit=1)
    if len(split) == 1:
        bucket = split[0]
        prefix = ""
    else:
        bucket, prefix = split
    if not bucket:
        raise ValueError("Bucket name must be non-empty")
    return bucket, prefix


@dataclass
class ObjectInfo:
    key: str
    size: int


@dataclass
class ListObjectResult:
    object_info: List[ObjectInfo]


class S3Client:
    """``list_objects(bucket, prefix)`` yields one ``ListObjectResult`` per page of a
    recursive listing, as the connector's client does."""

    def __init__(self, region: str):
        self._s3 = boto3.client("s3", region_name=region)

    def list_objects(self, bucket: str, prefix: str = "") -> Iterator[ListObjectResult]:
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            yield ListObjectResult(
                [ObjectInfo(o["Key"], o["Size"]) for o in page.get("Contents", [])]
            )
