#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD
#
#  From s3torchconnector v1.5.0 (s3torchconnector/src/s3torchconnector/s3reader/protocol.py),
#  under the BSD 3-Clause License in LICENSE beside this file. Changed for bucketload: the
#  object metadata and stream types come from ._types instead of the CRT client.

import os
from collections.abc import Callable
from typing import (
    TYPE_CHECKING,
    Protocol,
    runtime_checkable,
)

from ._types import GetObjectStream, HeadObjectResult, ObjectInfo
from .dcp_optimized import ItemRange
from .s3reader import S3Reader

if TYPE_CHECKING:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import ReadItem


class GetStreamCallable(Protocol):
    def __call__(
        self, start: int | None = None, end: int | None = None
    ) -> GetObjectStream: ...


@runtime_checkable
class S3ReaderConstructorProtocol(Protocol):
    def __call__(
        self,
        bucket: str,
        key: str,
        get_object_info: Callable[[], ObjectInfo | HeadObjectResult],
        get_stream: GetStreamCallable,
    ) -> S3Reader: ...


@runtime_checkable
class DCPS3ReaderConstructorProtocol(Protocol):
    _item_ranges_by_file: dict[str, list[ItemRange]]

    def __call__(
        self,
        bucket: str,
        key: str,
        get_object_info: Callable[[], ObjectInfo | HeadObjectResult],
        get_stream: GetStreamCallable,
    ) -> S3Reader: ...

    def set_item_ranges_by_file(
        self,
        plan_items: "list[ReadItem]",
        storage_data: "dict[MetadataIndex, _StorageInfo]",
        base_path: str | os.PathLike[str],
    ) -> None: ...
