"""Drop-in replacements for the Amazon S3 Connector for PyTorch (``s3torchconnector``).

Port a script by changing one import::

    # from s3torchconnector import S3MapDataset, S3IterableDataset, S3Checkpoint
    from bucketload.s3torch import S3MapDataset, S3IterableDataset, S3Checkpoint

The classes take the connector's arguments (``region``, ``endpoint``, ``transform``,
``enable_sharding``) and hand ``transform`` an :class:`S3Reader` with ``bucket``, ``key``,
``read``, ``readinto``, ``seek`` and ``tell``, as the connector does. Differences (also in
docs/PYTHON.md):

- ``s3client_config`` and ``reader_constructor`` are accepted and ignored; bucketload's own
  settings (requests in flight, retries) apply, from the environment or keywords.
- ``S3IterableDataset`` reads with hundreds of requests in flight (the connector reads one
  object at a time per worker), can shuffle (``shuffle=True, seed=…``; the connector never
  does), and with ``enable_sharding=True`` gives every rank the same number of samples.
- ``S3IterableDataset`` over a tar-shard dataset yields a :class:`Sample` per WebDataset
  sample (key, label and members), so shard datasets need no WebDataset pipeline.
- ``S3MapDataset`` lists the prefix once in parallel (the connector lists page by page).
"""

from __future__ import annotations

import io
import os
from typing import Any, Callable, Iterable, Iterator

from .. import _env, _native
from .._epochs import Epochs
from ..checkpoint import Reader as _CheckpointReader
from ..checkpoint import Writer as _CheckpointWriter

try:
    from torch.utils.data import Dataset as _MapBase
    from torch.utils.data import IterableDataset as _IterBase
except ImportError:
    _MapBase = object
    _IterBase = object


def _split(uri: str) -> tuple[str, str]:
    """``("s3://bucket", "prefix/")`` parts of an S3 URI."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an S3 URI (s3://bucket/prefix)")
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, key


def identity(obj: Any) -> Any:
    return obj


class S3Reader(io.BufferedIOBase):
    """One object, as a read-only, seekable binary file (the connector's ``S3Reader``).

    ``bucket`` and ``key`` name it. Bytes are fetched on the first read (whole, or the
    requested range after a seek), or were fetched ahead by the dataset."""

    def __init__(self, bucket: str, key: str, *, fetch: Callable[[], bytes] | None = None,
                 data: bytes | None = None) -> None:
        super().__init__()
        self.bucket = bucket
        self.key = key
        self._fetch = fetch
        self._data = data
        self._pos = 0

    def _bytes(self) -> bytes:
        if self._data is None:
            assert self._fetch is not None
            self._data = self._fetch()
        return self._data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        data = self._bytes()
        end = len(data) if size is None or size < 0 else min(len(data), self._pos + size)
        out = data[self._pos:end]
        self._pos = max(self._pos, end)
        return out

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        chunk = self.read(len(view))
        view[: len(chunk)] = chunk
        return len(chunk)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = len(self._bytes()) + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos


class _Stores:
    """One native store per process and bucket (opened again after a fork)."""

    def __init__(self, endpoint: str | None, region: str | None) -> None:
        self.endpoint = endpoint
        self.region = region
        self._open: dict[tuple[int, str], Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "region": self.region, "_open": {}}

    def get(self, bucket: str) -> Any:
        key = (os.getpid(), bucket)
        store = self._open.get(key)
        if store is None:
            store = _native.NativeStore(f"s3://{bucket}", endpoint=self.endpoint, region=self.region)
            self._open[key] = store
        return store


class S3MapDataset(_MapBase):  # type: ignore[misc,valid-type]
    """Random access to the objects under a prefix: ``dataset[i]`` is ``transform`` of the
    ``i``-th object (sorted by key) as an :class:`S3Reader`."""

    def __init__(self, region: str | None, objects: list[tuple[str, str]], *,
                 endpoint: str | None = None, transform: Callable[[S3Reader], Any] = identity):
        self.region = region
        self.endpoint = endpoint
        self._objects = objects
        self._transform = transform
        self._stores = _Stores(endpoint, region)

    @classmethod
    def from_prefix(cls, s3_uri: str, *, region: str | None = None, endpoint: str | None = None,
                    transform: Callable[[S3Reader], Any] = identity,
                    s3client_config: Any = None, reader_constructor: Any = None) -> "S3MapDataset":
        """Every object under ``s3_uri``, listed once (folders in parallel)."""
        bucket, prefix = _split(s3_uri)
        store = _native.NativeStore(s3_uri, endpoint=endpoint, region=region)
        base = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        objects = [(bucket, base + key) for key, _size in store.list()
                   if not key.startswith("_bucketload/")]
        return cls(region, objects, endpoint=endpoint, transform=transform)

    @classmethod
    def from_objects(cls, object_uris: str | Iterable[str], *, region: str | None = None,
                     endpoint: str | None = None, transform: Callable[[S3Reader], Any] = identity,
                     s3client_config: Any = None, reader_constructor: Any = None) -> "S3MapDataset":
        """The objects named by ``object_uris``, in that order."""
        uris = [object_uris] if isinstance(object_uris, str) else list(object_uris)
        return cls(region, [_split(u) for u in uris], endpoint=endpoint, transform=transform)

    def __len__(self) -> int:
        return len(self._objects)

    def __getitem__(self, i: int) -> Any:
        bucket, key = self._objects[i]
        store = self._stores.get(bucket)
        return self._transform(S3Reader(bucket, key, fetch=lambda: store.get(key)))


class Sample:
    """One sample of a tar-shard dataset: its WebDataset key, label (or ``None``) and members
    by extension (``sample["jpg"]`` is bytes)."""

    def __init__(self, key: str, label: int | None, members: list[tuple[str, bytes]]) -> None:
        self.key = key
        self.label = label
        self.members = dict(members)

    def __getitem__(self, ext: str) -> bytes:
        return self.members[ext]

    def __repr__(self) -> str:
        return f"Sample({self.key!r}, label={self.label}, members={sorted(self.members)})"


class S3IterableDataset(_IterBase):  # type: ignore[misc,valid-type]
    """Streams the objects under a prefix through ``transform``, read ahead with many
    requests in flight by bucketload's engine.

    ``enable_sharding=True`` splits the objects across torch.distributed ranks (equal
    counts) and DataLoader workers (disjoint); otherwise every worker reads everything, as
    the connector does. The rank is the process group's where the dataset is built (or
    pickled for spawned workers), as the connector reads it, else ``RANK``/``WORLD_SIZE``;
    a worker that cannot tell its rank raises :class:`bucketload.ConfigError`.
    ``shuffle=True`` visits a fresh permutation per epoch (``seed``); each iteration reads the
    next epoch, also through DataLoader workers made anew every epoch, and :meth:`set_epoch`
    picks one. Over a tar-shard dataset (``format="shards"``, or
    detected) each item is a :class:`Sample` passed to ``transform``."""

    def __init__(self, s3_uri: str, *, region: str | None = None, endpoint: str | None = None,
                 transform: Callable[[Any], Any] = identity, enable_sharding: bool = False,
                 shuffle: bool = False, seed: int = 0, format: str = "auto",
                 concurrency: int | None = None) -> None:
        self.s3_uri = s3_uri
        self.region = region
        self.endpoint = endpoint
        self._transform = transform
        self._sharding = enable_sharding
        self._shuffle = shuffle
        self._seed = seed
        self._format = format
        self._concurrency = concurrency
        self._epochs = Epochs()
        # The process group of the process building the dataset: DataLoader workers never
        # have torch.distributed initialised, so they use this.
        self._group = _env.captured() if enable_sharding else None
        self._bucket, prefix = _split(s3_uri)
        self._prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"

    @classmethod
    def from_prefix(cls, s3_uri: str, *, region: str | None = None, endpoint: str | None = None,
                    transform: Callable[[Any], Any] = identity, s3client_config: Any = None,
                    enable_sharding: bool = False, reader_constructor: Any = None,
                    **bucketload_options: Any) -> "S3IterableDataset":
        """Every object under ``s3_uri``. Extra keywords: ``shuffle``, ``seed``, ``format``,
        ``concurrency``."""
        return cls(s3_uri, region=region, endpoint=endpoint, transform=transform,
                   enable_sharding=enable_sharding, **bucketload_options)

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next iteration (its permutation when shuffling), also in
        DataLoader workers."""
        self._epochs.set(epoch)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._sharding and self._group is None:
            # Pickled for spawned DataLoader workers after init_process_group.
            state["_group"] = _env.captured()
        return state

    def _loader(self) -> Any:
        if not self._sharding:
            rank, world = 0, 1
        elif self._group is not None:
            rank, world = self._group
        else:
            rank, world = _env.distributed()
        worker, workers = _env.worker() if self._sharding else (0, 1)
        return _native.NativeLoader(
            self.s3_uri, format=self._format, decode=False, shuffle=self._shuffle,
            seed=self._seed, rank=rank, world_size=world, worker=worker, num_workers=workers,
            concurrency=self._concurrency, endpoint=self.endpoint, region=self.region,
        )

    def __iter__(self) -> Iterator[Any]:
        """Starts the next epoch (each iteration reads a new one, also through DataLoader
        workers made anew every epoch) and returns its items."""
        return self._items(self._loader().epoch(self._epochs.begin()))

    def _items(self, epoch: Any) -> Iterator[Any]:
        while True:
            batch = epoch.next_samples(64)
            if not batch:
                self._epochs.end()
                return
            for key, label, members, _index, is_object in batch:
                if is_object:
                    item: Any = S3Reader(self._bucket, self._prefix + key, data=members[0][1])
                else:
                    item = Sample(key, label, members)
                yield self._transform(item)


class S3Writer(_CheckpointWriter):
    """The connector's ``S3Writer``: a checkpoint being written; visible whole on close."""


class S3Checkpoint:
    """The connector's ``S3Checkpoint``: ``writer(uri)`` for ``torch.save``, ``reader(uri)``
    for ``torch.load``. Writes are parallel multipart uploads, visible only when complete;
    reads are parallel ranged GETs with read-ahead."""

    def __init__(self, region: str | None = None, endpoint: str | None = None,
                 s3client_config: Any = None) -> None:
        self.region = region
        self.endpoint = endpoint

    def writer(self, s3_uri: str) -> S3Writer:
        return S3Writer(s3_uri, endpoint=self.endpoint, region=self.region)

    def reader(self, s3_uri: str) -> _CheckpointReader:
        return _CheckpointReader(s3_uri, endpoint=self.endpoint, region=self.region)


__all__ = ["S3Checkpoint", "S3IterableDataset", "S3MapDataset", "S3Reader", "S3Writer", "Sample"]
