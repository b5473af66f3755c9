"""``S3IterableDataset``: streams objects (or the samples of tar shards) in order."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .. import _env, _native
from .._epochs import Epochs
from .._types import DatasetFormat, Format
from ..errors import ConfigError
from ._client import S3ClientConfig, Stores, parse_s3_uri, prefetched
from .map_dataset import _from_objects, _from_prefix, identity
from .s3reader import S3Reader, S3ReaderConstructor
from .s3reader._types import ObjectInfo
from .s3reader.protocol import S3ReaderConstructorProtocol

if TYPE_CHECKING:
    from torch.utils.data import IterableDataset

    _IterBase = IterableDataset[Any]
else:
    try:
        from torch.utils.data import IterableDataset as _IterBase
    except ImportError:
        _IterBase = object

# Objects fetched ahead per DataLoader worker by the sequential reader: GETs release the GIL, so
# this many are in flight at once (``concurrency=`` sets it).
_READ_AHEAD = 32
# What ``format`` may be: the default yields one reader per object, as the connector does.
_OBJECTS = ("objects", "files")
_SAMPLES = ("auto", "shards", "indexed")


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


class S3IterableDataset(_IterBase):
    """Streams objects through ``transform``, each as an :class:`S3Reader` made by
    ``reader_constructor`` (the connector's ``S3IterableDataset``).

    Build it with :meth:`from_prefix` or :meth:`from_objects` (connector style), or
    ``S3IterableDataset(s3_uri, ...)``. Every object under the prefix is an item, as S3 lists
    it (``_bucketload/*`` and index files too, whatever manifest the prefix holds). The
    default (sequential) reader fetches objects ahead, ``concurrency`` (32) in flight; other
    readers fetch when read (ranged GETs for ``range_based``).

    ``enable_sharding=True`` splits the objects across torch.distributed ranks (equal
    counts) and DataLoader workers (disjoint); otherwise every worker reads everything, as
    the connector does. The rank is the process group's where the dataset is built (or
    pickled for spawned workers), as the connector reads it, else ``RANK``/``WORLD_SIZE``;
    a worker that cannot tell its rank raises :class:`bucketload.ConfigError`.
    ``shuffle=True`` visits a fresh permutation per epoch (``seed``); each iteration reads the
    next epoch, also through DataLoader workers made anew every epoch, and :meth:`set_epoch`
    picks one. ``format="shards"`` (or ``"indexed"``) reads a tar-shard dataset, indexed or
    plain, and yields a :class:`Sample` per WebDataset sample instead; ``"auto"`` does that
    when the folder holds shards."""

    def __init__(self, s3_uri: str | None = None, *, region: str | None = None,
                 endpoint: str | None = None, transform: Callable[[Any], Any] = identity,
                 enable_sharding: bool = False, shuffle: bool = False, seed: int = 0,
                 format: DatasetFormat = "objects", concurrency: int | None = None,
                 s3client_config: S3ClientConfig | None = None,
                 reader_constructor: S3ReaderConstructorProtocol | None = None,
                 object_uris: str | Iterable[str] | None = None, use_manifest: bool = True,
                 check_manifest: bool = False) -> None:
        if (s3_uri is None) == (object_uris is None):
            raise ValueError("give either s3_uri (a prefix) or object_uris")
        if format not in _OBJECTS + _SAMPLES:
            raise ValueError(f"format {format!r} is not one of {', '.join(_OBJECTS + _SAMPLES)}")
        if object_uris is not None and format not in _OBJECTS:
            raise ValueError(f"format={format!r} reads a prefix; from_objects yields objects")
        if check_manifest and format in _OBJECTS:
            raise ConfigError("check_manifest=True checks the manifest of a tar-shard dataset "
                              "(format='shards', 'indexed' or 'auto'); objects are listed as "
                              "S3 lists them, never read from a manifest")
        self.s3_uri = s3_uri
        self.region = region
        self.endpoint = endpoint
        self._transform = transform
        self._sharding = enable_sharding
        self._shuffle = shuffle
        self._seed = seed
        self._format = format
        self._concurrency = concurrency
        self._use_manifest = use_manifest
        self._check_manifest = check_manifest
        self._s3client_config = s3client_config
        self._reader_constructor = reader_constructor or S3ReaderConstructor.default()
        self._objects = _from_objects(object_uris) if object_uris is not None else None
        self._stores = Stores(endpoint, region, s3client_config)
        self._epochs = Epochs()
        # The process group of the process building the dataset: DataLoader workers never
        # have torch.distributed initialised, so they use this.
        self._group = _env.captured() if enable_sharding else None
        if s3_uri is not None:
            self._bucket, self._key_prefix = parse_s3_uri(s3_uri)

    @classmethod
    def from_prefix(cls, s3_uri: str, *, region: str | None = None,
                    endpoint: str | None = None, transform: Callable[[Any], Any] = identity,
                    s3client_config: S3ClientConfig | None = None,
                    enable_sharding: bool = False,
                    reader_constructor: S3ReaderConstructorProtocol | None = None,
                    **bucketload_options: Any) -> S3IterableDataset:
        """Every object whose key starts with the URI's key prefix (``s3://b/train/class_0``
        matches ``train/class_0/a.jpg`` and ``train/class_01.jpg``), in key order, folder
        markers left out, whatever manifest the prefix holds. Extra keywords: ``shuffle``,
        ``seed``, ``format``, ``concurrency``, and, for the tar-shard formats,
        ``use_manifest``/``check_manifest`` as for :class:`bucketload.Loader`."""
        return cls(s3_uri, region=region, endpoint=endpoint, transform=transform,
                   enable_sharding=enable_sharding, s3client_config=s3client_config,
                   reader_constructor=reader_constructor, **bucketload_options)

    @classmethod
    def from_objects(cls, object_uris: str | Iterable[str], *,
                     region: str | None = None, endpoint: str | None = None,
                     transform: Callable[[Any], Any] = identity,
                     s3client_config: S3ClientConfig | None = None,
                     enable_sharding: bool = False,
                     reader_constructor: S3ReaderConstructorProtocol | None = None,
                     **bucketload_options: Any) -> S3IterableDataset:
        """The objects named by ``object_uris`` (one URI or many), in that order. Extra
        keywords: ``shuffle``, ``seed``, ``concurrency``."""
        return cls(region=region, endpoint=endpoint, transform=transform,
                   enable_sharding=enable_sharding, s3client_config=s3client_config,
                   reader_constructor=reader_constructor, object_uris=object_uris,
                   **bucketload_options)

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

    def _placement(self) -> tuple[int, int, int, int]:
        """``(rank, world_size, worker, num_workers)`` this iteration reads as."""
        if not self._sharding:
            rank, world = 0, 1
        elif self._group is not None:
            rank, world = self._group
        else:
            rank, world = _env.distributed()
        worker, workers = _env.worker() if self._sharding else (0, 1)
        return rank, world, worker, workers

    def _loader(self) -> Any:
        """The engine's loader, or a :class:`_Listed` when the dataset lists objects itself."""
        engine_uri = self._engine_uri()
        if engine_uri is None:
            return _Listed(self)
        rank, world, worker, workers = self._placement()
        return _native.NativeLoader(
            engine_uri, format=_engine_format(self._format), decode=False, shuffle=self._shuffle,
            seed=self._seed, rank=rank, world_size=world, worker=worker, num_workers=workers,
            concurrency=self._concurrency, endpoint=self.endpoint, region=self.region,
            client=self._s3client_config, use_manifest=self._use_manifest,
            check_manifest=self._check_manifest,
        )

    def _engine_uri(self) -> str | None:
        """The folder URI the engine reads, for the tar-shard formats; ``None`` for objects,
        which are listed here: every object under the prefix, as S3 lists it and the connector
        yields it (``_bucketload/*`` and index files included, whatever manifest the prefix
        holds)."""
        return self.s3_uri if self._format in _SAMPLES else None

    def __iter__(self) -> Iterator[Any]:
        """Starts the next epoch (each iteration reads a new one, also through DataLoader
        workers made anew every epoch) and returns its items."""
        return self._items(self._loader().epoch(self._epochs.begin()))

    def _items(self, epoch: Any) -> Iterator[Any]:
        if isinstance(epoch, _ListedEpoch):
            for reader in epoch:
                yield self._transform(reader)
            self._epochs.end()
            return
        while True:
            batch = epoch.next_samples(64)
            if not batch:
                self._epochs.end()
                return
            for key, label, members, _index, is_object in batch:
                if is_object:
                    item: Any = self._reader(key, members[0][1])
                else:
                    item = Sample(key, label, members)
                yield self._transform(item)

    def _reader(self, key: str, data: bytes) -> S3Reader:
        """The reader of an object the engine fetched (``key`` relative to the folder)."""
        prefix = self._key_prefix
        full = (prefix if prefix.endswith("/") or not prefix else prefix + "/") + key
        info = ObjectInfo(full, len(data))
        return self._reader_constructor(self._bucket, full, lambda: info, prefetched(data))


def _engine_format(format: DatasetFormat) -> Format:
    """The engine's name of ``format``: ``"objects"`` is its ``"files"``."""
    return "files" if format == "objects" else format


class _Listed:
    """The objects of a list of URIs or of a key prefix, listed here, with this rank's and
    worker's share: positions ``rank, rank + world, ...`` of the (shuffled) order, padded from
    its start to equal counts, as the engine shares them; then every ``num_workers``-th."""

    def __init__(self, dataset: S3IterableDataset) -> None:
        self.dataset = dataset

    def epoch(self, epoch: int) -> _ListedEpoch:
        ds = self.dataset
        if ds._objects is not None:
            objects = ds._objects(ds._stores)
        else:
            assert ds.s3_uri is not None  # the constructor takes s3_uri or object_uris
            objects = _from_prefix(ds.s3_uri)(ds._stores)
        order = list(range(len(objects)))
        if ds._shuffle:
            random.Random(ds._seed * 1_000_003 + epoch).shuffle(order)
        rank, world, worker, workers = ds._placement()
        if world > 1 and order:
            padded = -(-len(order) // world) * world
            order = [order[p % len(order)] for p in range(rank, padded, world)]
        mine = [objects[i] for i in order[worker::workers]]
        return _ListedEpoch(ds, mine)


class _ListedEpoch:
    """Readers of listed objects, in order. With the sequential reader the objects are fetched
    ahead (``_READ_AHEAD`` in flight); other readers fetch when read."""

    def __init__(self, dataset: S3IterableDataset, objects: list[tuple[str, ObjectInfo]]) -> None:
        self.dataset = dataset
        self.objects = objects

    def __iter__(self) -> Iterator[S3Reader]:
        ds = self.dataset
        kind = S3ReaderConstructor.get_reader_type_string(ds._reader_constructor)
        if kind != "sequential":
            for bucket, info in self.objects:
                yield ds._reader_constructor(bucket, info.key, self._info(bucket, info),
                                             ds._stores.get_stream(bucket, info.key))
            return
        in_flight = ds._concurrency or _READ_AHEAD
        pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="bucketload-get")
        try:
            ahead: list[Future[bytes]] = []
            for n, (bucket, info) in enumerate(self.objects):
                while len(ahead) < in_flight and n + len(ahead) < len(self.objects):
                    b, i = self.objects[n + len(ahead)]
                    ahead.append(pool.submit(ds._stores.fetch, b, i.key))
                data = ahead.pop(0).result()
                got = ObjectInfo(info.key, len(data))
                yield ds._reader_constructor(bucket, info.key, _constant(got), prefetched(data))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _info(self, bucket: str, info: ObjectInfo) -> Callable[[], ObjectInfo]:
        if info.size >= 0:
            return _constant(info)
        return self.dataset._stores.object_info(bucket, info.key)


def _constant(info: ObjectInfo) -> Callable[[], ObjectInfo]:
    """A ``get_object_info`` that answers ``info`` without a request."""
    return lambda: info
