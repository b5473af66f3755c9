#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD
#
#  From s3torchconnector v1.5.0 (s3torchconnector/src/s3torchconnector/s3reader/__init__.py),
#  under the BSD 3-Clause License in LICENSE beside this file. Changed for bucketload: the
#  object metadata and stream types come from ._types instead of the CRT client.

from .constructor import DCPOptimizedConstructor, S3ReaderConstructor
from .dcp_optimized import DCPOptimizedS3Reader, ItemRange, RangeGroup
from .protocol import (
    DCPS3ReaderConstructorProtocol,
    GetStreamCallable,
    S3ReaderConstructorProtocol,
)
from .ranged import RangedS3Reader
from .s3reader import S3Reader
from .sequential import SequentialS3Reader

__all__ = [
    "DCPOptimizedConstructor",
    "DCPOptimizedS3Reader",
    "DCPS3ReaderConstructorProtocol",
    "GetStreamCallable",
    "ItemRange",
    "RangeGroup",
    "RangedS3Reader",
    "S3Reader",
    "S3ReaderConstructor",
    "S3ReaderConstructorProtocol",
    "SequentialS3Reader",
]
