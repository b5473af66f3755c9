"""Drop-in replacements for the Amazon S3 Connector for PyTorch (``s3torchconnector`` 1.5).

Port a script by changing one import::

    # from s3torchconnector import S3MapDataset, S3IterableDataset, S3Checkpoint
    from bucketload.s3torch import S3MapDataset, S3IterableDataset, S3Checkpoint

Every public name of ``s3torchconnector`` is here (``S3IterableDataset``, ``S3MapDataset``,
``S3Checkpoint``, ``S3Reader``, ``S3ReaderConstructor``, ``S3Writer``, ``S3Exception``,
``S3ClientConfig``, ``__version__``), and those of ``s3torchconnector.s3reader`` in
:mod:`bucketload.s3torch.s3reader`, with the connector's signatures. ``transform`` receives an
:class:`S3Reader` made by ``reader_constructor``: ``S3ReaderConstructor.sequential()`` (the
default: the whole object, fetched once) or ``range_based(buffer_size=)`` (a ranged GET per
read, through a buffer). Store errors raise :class:`S3Exception`, which is also
:class:`bucketload.StoreError` or :class:`bucketload.NotFoundError` (see
:mod:`bucketload.errors`); a missing object or bucket in the connector's words ("Service error:
The key does not exist"). Differences (also in docs/PYTHON.md, "Differences from the S3
connector"):

- ``S3ClientConfig``: ``max_attempts``, ``profile``, ``unsigned``, ``force_path_style`` and
  ``part_size`` map onto bucketload's settings; ``throughput_target_gbps`` tunes the
  connector's CRT client and is accepted and ignored.
- ``S3IterableDataset`` yields every object under the prefix as S3 lists it, whatever manifest
  the prefix holds, as the connector does; the sequential reader fetches 32 objects ahead
  (``concurrency=``; the connector reads one object at a time per worker). It can shuffle
  (``shuffle=True, seed=…``), and with ``enable_sharding=True`` gives every rank the same
  number of objects (padded).
- ``S3IterableDataset(format="shards")`` reads a tar-shard dataset (indexed or plain tars) and
  yields a :class:`Sample` per WebDataset sample; by default every object, ``.tar`` included,
  is an :class:`S3Reader`, as with the connector.
- Keys are read and written as written, ``a//b``, ``/a``, ``a/``, a tab, ``ü`` or a ``.`` or
  ``..`` segment included (``a/../b`` is its own key, as for boto3).
"""

from __future__ import annotations

from typing import Any

from .. import _native
from .._util import split_uri
from ..checkpoint import Reader as _CheckpointReader
from ..checkpoint import Writer as _CheckpointWriter
from ..errors import S3Exception
from ._client import S3ClientConfig
from ._errors import connector_errors
from .iterable_dataset import S3IterableDataset, Sample
from .map_dataset import S3MapDataset
from .s3reader import S3Reader, S3ReaderConstructor

__version__ = _native.__version__


class S3Writer(_CheckpointWriter):
    """The connector's ``S3Writer``: a checkpoint being written; visible whole on close.
    ``part_size`` (bytes) sets the multipart upload's parts, else bucketload's default. A
    missing bucket raises the connector's "Service error: The bucket does not exist"."""

    def __init__(self, uri: str, *, endpoint: str | None = None,
                 region: str | None = None, part_size: int | None = None) -> None:
        with connector_errors("put"):
            super().__init__(uri, endpoint=endpoint, region=region)
            if part_size is not None:
                self._native.abort()  # nothing written yet: the writer of the default part size
                prefix, name = split_uri(uri)
                checkpoints = _native.NativeCheckpoints(prefix, endpoint=endpoint,
                                                        region=region, part_size=part_size)
                self._native = checkpoints.writer(name)

    def write(self, data: Any) -> int:
        with connector_errors("put"):
            return super().write(data)

    def close(self) -> None:
        with connector_errors("put"):
            super().close()


class _S3CheckpointReader(_CheckpointReader):
    """A checkpoint reader whose missing object raises the connector's words for a GET
    ("Service error: The key does not exist"), the first request of the connector's reader."""

    def __init__(self, uri: str, *, endpoint: str | None = None,
                 region: str | None = None) -> None:
        with connector_errors("get"):
            super().__init__(uri, endpoint=endpoint, region=region)

    def read(self, size: int | None = -1) -> bytes:
        with connector_errors("get"):
            return super().read(size)

    def readinto(self, buffer: Any) -> int:
        with connector_errors("get"):
            return super().readinto(buffer)


class S3Checkpoint:
    """The connector's ``S3Checkpoint``: ``writer(uri)`` for ``torch.save``, ``reader(uri)``
    for ``torch.load``. Writes are parallel multipart uploads, visible only when complete;
    reads are parallel ranged GETs with read-ahead. Of ``s3client_config``, writers take
    ``part_size``; the other settings come from the environment (bucketload's checkpoint
    objects take no client settings)."""

    def __init__(self, region: str | None = None, endpoint: str | None = None,
                 s3client_config: S3ClientConfig | None = None) -> None:
        self.region = region
        self.endpoint = endpoint
        self.s3client_config = s3client_config

    def writer(self, s3_uri: str) -> S3Writer:
        config = self.s3client_config
        return S3Writer(s3_uri, endpoint=self.endpoint, region=self.region,
                        part_size=config.part_size if config is not None else None)

    def reader(self, s3_uri: str) -> Any:
        return _S3CheckpointReader(s3_uri, endpoint=self.endpoint, region=self.region)


__all__ = [
    "S3Checkpoint",
    "S3ClientConfig",
    "S3Exception",
    "S3IterableDataset",
    "S3MapDataset",
    "S3Reader",
    "S3ReaderConstructor",
    "S3Writer",
    "Sample",
    "__version__",
]
