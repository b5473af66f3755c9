#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD
#
#  From s3torchconnector v1.5.0 (s3torchconnector/src/s3torchconnector/s3reader/__init__.py),
#  under the BSD 3-Clause License in LICENSE beside this file. Changed for bucketload: the
#  object metadata and stream types come from ._types instead of the CRT client.

from .s3reader import S3Reader
from .constructor import S3ReaderConstructor, DCPOptimizedConstructor
from .sequential import SequentialS3Reader
from .ranged import RangedS3Reader
from .dcp_optimized import DCPOptimizedS3Reader, ItemRange, RangeGroup
from .protocol import (
    GetStreamCallable,
    S3ReaderConstructorProtocol,
    DCPS3ReaderConstructorProtocol,
)

__all__ = [
    "S3Reader",
    "S3ReaderConstructor",
    "SequentialS3Reader",
    "RangedS3Reader",
    "DCPOptimizedS3Reader",
]
