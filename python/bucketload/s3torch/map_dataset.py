"""``S3MapDataset``: random access to objects, one reader per item."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ._client import S3ClientConfig, Stores, parse_s3_uri
from .s3reader import S3Reader, S3ReaderConstructor
from .s3reader._types import ObjectInfo
from .s3reader.protocol import S3ReaderConstructorProtocol

if TYPE_CHECKING:
    from torch.utils.data import Dataset

    _MapBase = Dataset[Any]
else:
    try:
        from torch.utils.data import Dataset as _MapBase
    except ImportError:
        _MapBase = object


def identity(obj: S3Reader) -> S3Reader:
    return obj


class S3MapDataset(_MapBase):
    """A map-style dataset of S3 objects (the connector's ``S3MapDataset``): ``dataset[i]`` is
    ``transform`` of the ``i``-th object as an :class:`S3Reader` made by
    ``reader_constructor`` (sequential by default). Build it with :meth:`from_prefix` or
    :meth:`from_objects`; objects are listed on first use, in key order."""

    def __init__(self, region: str | None,
                 get_dataset_objects: Callable[[Stores], Iterable[tuple[str, ObjectInfo]]],
                 endpoint: str | None = None, transform: Callable[[S3Reader], Any] = identity,
                 s3client_config: S3ClientConfig | None = None,
                 reader_constructor: S3ReaderConstructorProtocol | None = None) -> None:
        self._get_dataset_objects = get_dataset_objects
        self._transform = transform
        self._region = region
        self._endpoint = endpoint
        self._s3client_config = s3client_config
        self._reader_constructor = reader_constructor or S3ReaderConstructor.default()
        self._stores = Stores(endpoint, region, s3client_config)
        self._objects: list[tuple[str, ObjectInfo]] | None = None

    @property
    def region(self) -> str | None:
        return self._region

    @property
    def endpoint(self) -> str | None:
        return self._endpoint

    @classmethod
    def from_objects(cls, object_uris: str | Iterable[str], *,
                     region: str | None = None, endpoint: str | None = None,
                     transform: Callable[[S3Reader], Any] = identity,
                     s3client_config: S3ClientConfig | None = None,
                     reader_constructor: S3ReaderConstructorProtocol | None = None,
                     ) -> S3MapDataset:
        """The objects named by ``object_uris`` (one URI or many), in that order."""
        return cls(region, _from_objects(object_uris), endpoint, transform=transform,
                   s3client_config=s3client_config, reader_constructor=reader_constructor)

    @classmethod
    def from_prefix(cls, s3_uri: str, *, region: str | None = None,
                    endpoint: str | None = None,
                    transform: Callable[[S3Reader], Any] = identity,
                    s3client_config: S3ClientConfig | None = None,
                    reader_constructor: S3ReaderConstructorProtocol | None = None,
                    ) -> S3MapDataset:
        """Every object whose key starts with the URI's key prefix (``s3://b/train/class_0``
        matches ``train/class_0/a.jpg`` and ``train/class_01.jpg``), folder markers left out."""
        return cls(region, _from_prefix(s3_uri), endpoint, transform=transform,
                   s3client_config=s3client_config, reader_constructor=reader_constructor)

    @property
    def _dataset_objects(self) -> list[tuple[str, ObjectInfo]]:
        if self._objects is None:
            self._objects = list(self._get_dataset_objects(self._stores))
        return self._objects

    def _get_object(self, i: int) -> S3Reader:
        bucket, info = self._dataset_objects[i]
        get_info = (lambda: info) if info.size >= 0 else self._stores.object_info(bucket, info.key)
        return self._reader_constructor(bucket, info.key, get_info,
                                        self._stores.get_stream(bucket, info.key))

    def __getitem__(self, i: int) -> Any:
        return self._transform(self._get_object(i))

    def __len__(self) -> int:
        return len(self._dataset_objects)


class _from_objects:
    """The objects of a list of URIs (picklable, for spawned DataLoader workers); sizes are
    unknown (-1) until a reader asks."""

    def __init__(self, object_uris: str | Iterable[str]) -> None:
        uris = [object_uris] if isinstance(object_uris, str) else list(object_uris)
        self.pairs = [parse_s3_uri(uri) for uri in uris]

    def __call__(self, stores: Stores) -> list[tuple[str, ObjectInfo]]:
        return [(bucket, ObjectInfo(key, -1)) for bucket, key in self.pairs]


class _from_prefix:
    """The objects under a key prefix, listed when called (picklable)."""

    def __init__(self, s3_uri: str) -> None:
        self.bucket, self.prefix = parse_s3_uri(s3_uri)

    def __call__(self, stores: Stores) -> list[tuple[str, ObjectInfo]]:
        return [(self.bucket, info) for info in stores.list_prefix(self.bucket, self.prefix)]
