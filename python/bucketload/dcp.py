"""PyTorch Distributed Checkpoint (``torch.distributed.checkpoint``) in object storage.

::

    import torch.distributed.checkpoint as dcp
    from bucketload.dcp import S3StorageReader, S3StorageWriter

    dcp.save(state_dict, storage_writer=S3StorageWriter("s3://bucket/run1/step-100"))
    dcp.load(state_dict, storage_reader=S3StorageReader("s3://bucket/run1/step-100"))

Every file of the checkpoint (one per rank, and ``.metadata``) is written as one bucketload
checkpoint object: a parallel multipart upload with per-part checksums that becomes visible
only when complete, so no rename is ever needed (object stores have none; file-system
writers write ``.metadata.tmp`` and rename it). ``.metadata`` is written last, by the
coordinator, after every rank's data is stored: a checkpoint without ``.metadata`` is
unfinished. Reads seek within each file with ranged GETs and read ahead. ``endpoint`` and
``region`` default to the AWS environment; paths and ``file://`` URIs work too.

File names join the checkpoint path as ``os.path.join`` does (the S3 connector's rule): a
key is kept as written, ``//`` and all. :mod:`bucketload.s3torch.dcp` builds the connector's
classes on the same pieces.
"""

from __future__ import annotations

import pickle
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
)
from torch.distributed.checkpoint.metadata import Metadata

from . import _native
from ._util import split_uri
from .checkpoint import Reader, Writer

_METADATA = ".metadata"
#: The DCP format version this writer declares (torch's own ``CURRENT_DCP_VERSION``).
DCP_VERSION = "1.0.0"


class _ObjectFileSystem(FileSystemBase):
    """DCP's file-system interface over bucketload's checkpoint objects."""

    def __init__(self, endpoint: str | None, region: str | None) -> None:
        self.endpoint = endpoint
        self.region = region

    @contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        uri = str(path)
        if mode == "wb":
            writer = Writer(uri, endpoint=self.endpoint, region=self.region)
            try:
                yield writer
            except BaseException:
                writer.abort()
                raise
            writer.close()
        elif mode == "rb":
            reader = Reader(uri, endpoint=self.endpoint, region=self.region)
            try:
                yield reader
            finally:
                reader.close()
        else:
            raise ValueError(f"mode {mode!r} is not 'rb' or 'wb'")

    def concat_path(self, path: Any, suffix: str) -> str:
        """``os.path.join``: one ``/`` between unless ``path`` ends with one; nothing else
        in the key changes."""
        return posixpath.join(str(path), suffix)

    def init_path(self, path: Any) -> Any:
        return path

    def mkdir(self, path: Any) -> None:
        """Object stores have no directories; local ones are made by the writer."""

    def rename(self, path: Any, new_path: Any) -> None:
        """A copy then a delete (object stores have no rename). bucketload's own writer never
        renames: objects become visible whole when written."""
        prefix, name = split_uri(str(path))
        new_prefix, new_name = split_uri(str(new_path))
        if new_prefix != prefix:
            raise ValueError(f"cannot rename {path} to another bucket ({new_path})")
        store = _native.NativeStore(prefix, endpoint=self.endpoint, region=self.region)
        store.copy(name, new_name)
        store.delete(name)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return "://" in str(checkpoint_id)

    def exists(self, path: Any) -> bool:
        prefix, name = split_uri(str(path))
        store = _native.NativeStore(prefix, endpoint=self.endpoint, region=self.region)
        try:
            store.size(name)
            return True
        except FileNotFoundError:
            return False

    def rm_file(self, path: Any) -> None:
        """Deletes the object (a missing one is no error, as in S3)."""
        prefix, name = split_uri(str(path))
        _native.NativeStore(prefix, endpoint=self.endpoint, region=self.region).delete(name)


class _ObjectWriter(FileSystemWriter):
    """A ``FileSystemWriter`` whose ``fs`` is an :class:`_ObjectFileSystem`; ``.metadata``
    is written straight to its final name (it appears whole or not at all)."""

    # torch annotates ``fs`` as its local ``FileSystem`` but uses it as a ``FileSystemBase``.
    fs: _ObjectFileSystem  # type: ignore[assignment]

    def finish(self, metadata: Metadata, results: list[list[Any]]) -> None:
        metadata.version = DCP_VERSION
        storage = {}
        for writes in results:
            storage.update({w.index: w.storage_data for w in writes})
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        # Without collectives every rank writes its own __{rank}.metadata, as torch's writer.
        rank = None if self.use_collectives else self.rank
        with self.fs.create_stream(self._get_metadata_path(rank), "wb") as stream:
            pickle.dump(metadata, stream)


class S3StorageWriter(_ObjectWriter):
    """A DCP ``StorageWriter`` to ``s3://bucket/prefix`` (one object per rank plus
    ``.metadata``), with any S3-compatible endpoint. Takes FileSystemWriter's options
    (``single_file_per_rank``, ``thread_count``…); ``sync_files`` is moot (an object is
    durable once visible)."""

    def __init__(self, path: str, *, endpoint: str | None = None, region: str | None = None,
                 **kwargs: Any) -> None:
        kwargs["sync_files"] = False
        super().__init__(path, **kwargs)
        self.fs = _ObjectFileSystem(endpoint, region)
        self.path = self.fs.init_path(path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return _ObjectFileSystem.validate_checkpoint_id(checkpoint_id)


class S3StorageReader(FileSystemReader):
    """A DCP ``StorageReader`` of a checkpoint written by :class:`S3StorageWriter` (or any
    DCP file-system checkpoint copied to object storage)."""

    def __init__(self, path: str, *, endpoint: str | None = None, region: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        # torch annotates ``fs`` as its local ``FileSystem`` but uses it as a ``FileSystemBase``.
        self.fs = _ObjectFileSystem(endpoint, region)  # type: ignore[assignment]
        self.path = self.fs.init_path(path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return _ObjectFileSystem.validate_checkpoint_id(checkpoint_id)


__all__ = ["S3StorageReader", "S3StorageWriter"]
