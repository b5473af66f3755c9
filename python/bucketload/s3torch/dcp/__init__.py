"""Drop-ins for ``s3torchconnector.dcp``: PyTorch Distributed Checkpoint to S3 with the
connector's classes and arguments, on bucketload's checkpoint objects.

::

    # from s3torchconnector.dcp import S3StorageWriter, S3StorageReader
    from bucketload.s3torch.dcp import S3StorageWriter, S3StorageReader

    dcp.save(state_dict, storage_writer=S3StorageWriter("us-east-1", "s3://bucket/step-100"))
    dcp.load(state_dict, storage_reader=S3StorageReader("us-east-1", "s3://bucket/step-100"))

The objects are written under the keys the connector uses (prefix strategies included), so
each library reads checkpoints the other wrote. Differences are listed in docs/PYTHON.md.
"""

from .s3_file_system import S3FileSystem, S3StorageReader, S3StorageWriter
from .s3_prefix_strategy import (
    BinaryPrefixStrategy,
    DefaultPrefixStrategy,
    HexPrefixStrategy,
    NumericPrefixStrategy,
    S3PrefixStrategyBase,
)

__all__ = [
    "BinaryPrefixStrategy",
    "DefaultPrefixStrategy",
    "HexPrefixStrategy",
    "NumericPrefixStrategy",
    "S3FileSystem",
    "S3PrefixStrategyBase",
    "S3StorageReader",
    "S3StorageWriter",
]
