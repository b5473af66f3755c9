"""The S3 connector's DCP classes (``S3FileSystem``, ``S3StorageWriter``,
``S3StorageReader``) with its signatures, on bucketload's checkpoint objects.

Keys are the connector's: a file's URI is ``os.path.join(path, name)`` and its key is what
follows ``s3://bucket/``, unchanged. Files are bucketload checkpoint objects (parallel
multipart uploads, visible whole), so ``.metadata`` is written in place rather than as
``.metadata.tmp`` renamed; the keys left behind are the same.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.planner import LoadPlan, SavePlan

from ...dcp import _ObjectFileSystem, _ObjectWriter
from ...errors import S3Exception
from .._errors import connector_errors
from .s3_prefix_strategy import DefaultPrefixStrategy, S3PrefixStrategyBase

logger = logging.getLogger(__name__)


def _bucket_and_key(uri: str) -> tuple[str, str]:
    """``("bucket", "key")`` of ``s3://bucket/key``, the key as written."""
    if not uri or not uri.startswith("s3://"):
        raise ValueError("Only s3:// URIs are supported")
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError("Bucket name must be non-empty")
    return bucket, key


class S3FileSystem(_ObjectFileSystem):
    """DCP's ``FileSystemBase`` over S3: streams are bucketload checkpoint writers
    (multipart, visible only when closed without error) and readers (ranged GETs, read-ahead).

    ``s3client_config`` and ``reader_constructor`` are accepted for compatibility and not
    applied (bucketload's part size, parallelism and retries apply); ``endpoint`` (not in the
    connector) defaults to ``AWS_ENDPOINT_URL``, then AWS. ``rename`` is a server-side copy
    and a delete; ``rm_file`` deletes, and logs a failure as the connector does. A missing
    object or bucket raises the connector's words ("Service error: The object was not found"
    from ``rename``, "The key does not exist" from a read)."""

    def __init__(self, region: str | None, s3_client: Any = None, s3client_config: Any = None,
                 reader_constructor: Any = None, *, endpoint: str | None = None) -> None:
        if s3_client is not None:
            raise TypeError("s3_client: bucketload uses its own client; pass region (and "
                            "endpoint) instead")
        super().__init__(endpoint, region)
        self._path: str | os.PathLike[str] = ""
        self._s3client_config = s3client_config
        self._reader_constructor = reader_constructor

    def init_path(self, path: str | os.PathLike[str]) -> str | os.PathLike[str]:
        self._path = path
        return path

    @contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        with connector_errors("get" if mode == "rb" else "put"), \
                super().create_stream(path, mode) as stream:
            yield stream

    def rename(self, path: Any, new_path: Any) -> None:
        """A server-side copy, then a delete of the source."""
        with connector_errors("copy"):
            super().rename(path, new_path)

    def rm_file(self, path: Any) -> None:
        """Deletes the object; a failure is logged, not raised, as the connector does."""
        try:
            with connector_errors("delete"):
                super().rm_file(path)
        except S3Exception:
            logger.exception("Failed to remove object from S3")

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str:
        return os.path.join(os.fspath(path), suffix)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        if isinstance(checkpoint_id, Path):
            return True
        try:
            _bucket_and_key(str(checkpoint_id))
        except ValueError:
            return False
        return True


@dataclass
class StorageMetadata:
    """The storage data of one rank's save plan: the start of its file names."""

    prefix: str


class S3StorageWriter(_ObjectWriter):
    """A DCP ``StorageWriter`` to ``s3://bucket/path``: the connector's arguments
    (``region``, ``path``, ``s3client_config``, ``prefix_strategy``, ``thread_count``, then
    ``FileSystemWriter``'s keywords such as ``overwrite``), and ``endpoint``.

    ``thread_count`` files per rank are uploaded at once, each itself in parallel parts;
    ``prefix_strategy`` places each rank's files (default ``__{rank}_{n}.distcp``)."""

    def __init__(self, region: str | None, path: str, s3client_config: Any = None,
                 prefix_strategy: S3PrefixStrategyBase | None = None, thread_count: int = 1,
                 *, endpoint: str | None = None, **kwargs: Any) -> None:
        super().__init__(path=path, sync_files=False, thread_count=thread_count, **kwargs)
        self.fs = S3FileSystem(region, s3client_config=s3client_config, endpoint=endpoint)
        self.path = self.fs.init_path(path)
        self.prefix_strategy = prefix_strategy or DefaultPrefixStrategy()

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Each rank's files start with ``prefix_strategy(rank)``."""
        return [dataclasses.replace(plan, storage_data=StorageMetadata(self.prefix_strategy(i)))
                for i, plan in enumerate(plans)]

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return S3FileSystem.validate_checkpoint_id(checkpoint_id)


class S3StorageReader(FileSystemReader):
    """A DCP ``StorageReader`` of ``s3://bucket/path``: the connector's arguments (``region``,
    ``path``, ``s3client_config``, ``reader_constructor``), and ``endpoint``.

    Each rank reads its items in file-offset order, so every file is read front to back with
    read-ahead. ``reader_constructor`` is accepted and not applied."""

    def __init__(self, region: str | None, path: str | os.PathLike[str], s3client_config: Any = None,
                 reader_constructor: Any = None, *, endpoint: str | None = None) -> None:
        super().__init__(path)
        self._reader_constructor = reader_constructor
        self.fs = S3FileSystem(region, s3client_config=s3client_config,  # type: ignore[assignment]
                               reader_constructor=reader_constructor, endpoint=endpoint)
        self.path = self.fs.init_path(path)
        self.sync_files = False

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Sorts the plan's items by their offset in the checkpoint's files."""
        plan.items.sort(key=lambda item: self.storage_data[item.storage_index].offset)
        return plan

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return S3FileSystem.validate_checkpoint_id(checkpoint_id)


__all__ = ["S3FileSystem", "S3StorageReader", "S3StorageWriter"]
