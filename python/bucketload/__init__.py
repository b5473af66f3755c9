"""bucketload: keeps accelerators fed from object storage.

- :class:`Loader` — batches of decoded, augmented images from a dataset in S3 (one object per
  sample, or tar shards), as torch tensors without copies (:class:`Batch`,
  :class:`IndexedBatch`).
- :mod:`bucketload.checkpoint` — ``save``/``load`` of checkpoints with parallel multipart
  transfers, atomically, optionally in the background.
- :mod:`bucketload.s3torch` — drop-in ``S3MapDataset``, ``S3IterableDataset`` and
  ``S3Checkpoint`` for scripts written for the Amazon S3 Connector for PyTorch.
- :mod:`bucketload.errors` — the exceptions.

Credentials, region and endpoint come from the AWS environment and profile files
(``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``…) unless given as keywords.
"""

from __future__ import annotations

from . import checkpoint, errors
from ._native import __version__
from ._types import IMAGENET_MEAN, IMAGENET_STD, Batch, IndexedBatch
from .errors import (
    BucketloadError,
    ConfigError,
    CorruptDataError,
    NotFoundError,
    PermissionDeniedError,
    S3Exception,
    StoreError,
)
from .loader import Loader
from .s3torch import S3Checkpoint, S3IterableDataset, S3MapDataset, S3Reader, S3Writer

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Batch",
    "BucketloadError",
    "ConfigError",
    "CorruptDataError",
    "IndexedBatch",
    "Loader",
    "NotFoundError",
    "PermissionDeniedError",
    "S3Checkpoint",
    "S3Exception",
    "S3IterableDataset",
    "S3MapDataset",
    "S3Reader",
    "S3Writer",
    "StoreError",
    "__version__",
    "checkpoint",
    "errors",
]
