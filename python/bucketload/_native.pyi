"""The native module: bindings over bucketload's Rust engine. The public API is the
pure-Python layer (``bucketload.Loader``, ``bucketload.checkpoint``, ``bucketload.s3torch``,
``bucketload.dcp``); these classes are its building blocks. Every call that waits releases the
GIL. Objects belong to the process that created them: in a forked child they raise
``RuntimeError`` (open them again there)."""

import builtins
from typing import Any, Protocol, TypeAlias

from typing_extensions import Buffer as BytesLike

from ._types import DType, Format, JpegDecode, LabelFrom, Saved, Transform

__version__: str
#: The disk cache's default size in bytes (``cache_size``), as the engine and the CLI use it.
DEFAULT_CACHE_SIZE: int
DEFAULT_INDEX_CACHE: int

#: ``(key, size)`` of an object.
Object: TypeAlias = tuple[str, int]
#: ``(extension, bytes)`` of a sample's member (``("jpg", b"...")``).
Member: TypeAlias = tuple[str, bytes]
#: ``(key, reason)`` of an image a batch left out (``skip_corrupt=True``).
Skipped: TypeAlias = tuple[str, str]
#: ``(images, labels, indices, skipped)``: ``images`` float32 NCHW or uint8 NHWC, ``labels`` and
#: ``indices`` int64 ``[N]``.
BatchTuple: TypeAlias = tuple[Buffer, Buffer, Buffer, list[Skipped]]
#: An undecoded sample ``(key, label, members, index, is_object)``: ``index`` its number in the
#: dataset, ``is_object`` whether it is one object (``key`` its key) rather than a shard sample.
RawSample: TypeAlias = tuple[str, int | None, list[Member], int, bool]
#: An undecoded sample with its image member only: ``(key, label, image, index)``.
RawImage: TypeAlias = tuple[str, int | None, bytes, int]

class ClientConfig(Protocol):
    """What the native classes read from a ``client``: the attributes of
    ``bucketload.s3torch.S3ClientConfig``."""

    @property
    def profile(self) -> str | None: ...
    @property
    def max_attempts(self) -> int | None: ...
    @property
    def unsigned(self) -> bool: ...
    @property
    def force_path_style(self) -> bool: ...
    @property
    def part_size(self) -> int | None: ...

class Buffer:
    """Rust-owned, typed, C-contiguous memory exported through the buffer protocol
    (``memoryview(buf)``, ``torch.frombuffer(buf, dtype=...)``) without a copy."""

    @property
    def shape(self) -> list[int]: ...
    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __reduce__(self) -> tuple[type[bytes], tuple[bytes]]:
        """Read-only bytes (a sample's member) pickle as ``bytes``; typed memory raises
        ``TypeError``."""

class NativeStore:
    """A store opened at a URI prefix (``s3://bucket/prefix``, ``file://``, a path)."""

    def __init__(self, uri: str, endpoint: str | None = None, region: str | None = None,
                 concurrency: int | None = None, *, client: ClientConfig | None = None) -> None:
        """``client``: any object with the attributes of ``bucketload.s3torch.S3ClientConfig``
        (``profile``, ``max_attempts``, ``unsigned``, ``force_path_style``, ``part_size``)."""
    @property
    def uri(self) -> str: ...
    def object_uri(self, key: str) -> str: ...
    def list(self) -> list[Object]:
        """Every object below the prefix as ``(key, size)``, sorted; folders in parallel."""
    def list_prefix(self, prefix: str) -> builtins.list[Object]:
        """The objects whose keys start with ``prefix`` (any string, relative to the store's
        prefix) as ``(key, size)``, in key order, keys as stored; folder markers left out."""
    def get(self, key: str) -> bytes:
        """Raises ``bucketload.ConfigError`` for a key object_store cannot address (``a//b``,
        a trailing ``/``), as ``get_range`` and ``size`` do."""
    def get_range(self, key: str, start: int, end: int) -> bytes: ...
    def size(self, key: str) -> int:
        """Raises ``bucketload.NotFoundError`` when the object does not exist."""
    def delete(self, key: str) -> None: ...
    def copy(self, source: str, destination: str) -> None: ...
    def put(self, key: str, data: bytes) -> None: ...

class NativeLoader:
    """The loader of one rank and DataLoader worker (see ``bucketload.Loader``)."""

    def __init__(self, uri: str | list[str], *, weights: list[float] | None = None,
                 samples_per_epoch: int | None = None, format: Format = "auto",
                 batch_size: int = 64,
                 image_size: int = 224, decode: bool = True, dtype: DType = "float32",
                 shuffle: bool = True, seed: int = 0, shuffle_buffer: int | None = None,
                 cache_dir: str | None = None, cache_size: int = 20 << 30,
                 concurrency: int | None = None, decode_threads: int | None = None,
                 rank: int = 0, world_size: int = 1, worker: int = 0, num_workers: int = 1,
                 drop_last: bool = False, pad: bool = True, skip_corrupt: bool = False,
                 endpoint: str | None = None, region: str | None = None,
                 jpeg_decode: JpegDecode = "region",
                 client: ClientConfig | None = None, transform: Transform | None = None,
                 use_manifest: bool = True, check_manifest: bool = False,
                 decode_members: list[str] = ..., metadata_ttl: float = 0.0,
                 allow_incomplete: bool = False, index_cache: int = 128 << 20) -> None:
        """``index_cache``: bytes of shard indexes an indexed loader holds (least recently
        used first out; the index in use is kept whatever the bound). ``allow_incomplete``: read a dataset whose ``bucketload shard`` run never finished
        (its run record without a manifest) instead of raising ``ConfigError``. ``metadata_ttl``: seconds a streamed shard's version is trusted with a cache
        (``math.inf``: for the loader's life). ``decode_members`` (with ``decode=False``): extensions of members that
        ``NativeEpoch.next_sample_batch`` also decodes and augments, as ``decode=True`` would
        (with ``transform``'s augmentation)."""
    def samples_per_epoch(self) -> int: ...
    def batches_per_epoch(self) -> int: ...
    def dataset_samples(self) -> int: ...
    def decode_stats(self) -> dict[str, float] | None:
        """The image pipeline's counters (``images``, ``skipped``, ``decode_s``,
        ``augment_s``, ``buffers_allocated``), ``None`` without decoding."""
    def check_state(self, state: str) -> None:
        """Raises ``ConfigError`` naming what differs when ``state`` (a ``NativeEpoch.state()``)
        does not continue this loader's dataset as it is built."""
    def epoch(self, epoch: int, state: str | None = None) -> NativeEpoch:
        """Epoch ``epoch`` from its start, or from a ``NativeEpoch.state()``."""

class NativeEpoch:
    """One epoch of one worker."""

    @property
    def epoch(self) -> int: ...
    @property
    def consumed(self) -> int: ...
    def next_batch(self) -> BatchTuple:
        """``(images, labels, indices, skipped)``; raises ``StopIteration`` at the end."""
    def next_samples(self, n: int) -> list[RawSample]:
        """Up to ``n`` raw samples ``(key, label, members, index, is_object)``; ``[]`` at the end.
        Plain tuples, made in Rust on the per-sample path, unpacked where they are read."""
    def next_images(self, n: int) -> list[RawImage]:
        """Up to ``n`` raw samples ``(key, label, image, index)``, each with its image member."""
    def next_sample_batch(self, n: int) -> tuple[list[dict[str, Any]], dict[str, Buffer]]:
        """The next ``n`` raw samples (fewer only at the end of the epoch; ``[]`` there), each a
        dict: ``"__key__"`` (str), ``"__index__"`` (int), ``"__label__"`` (int or ``None``) and
        one read-only :class:`Buffer` per member by extension (no copy; pickles as ``bytes``);
        and by extension, the ``decode_members`` decoded into one images buffer each (as
        ``next_batch``'s). Waits for the whole batch and decodes without the GIL."""
    def state(self) -> str:
        """JSON state after what was handed out; resumes with neither replay nor skip."""

class NativeDecoder:
    """Decodes encoded images (JPEG, PNG) into one augmented batch on native threads: the
    loader's decode, for bytes that arrive another way (``bucketload.ray.decode_batch``)."""

    def __init__(self, *, image_size: int = 224, seed: int = 0, dtype: DType = "float32",
                 decode_threads: int | None = None, skip_corrupt: bool = False,
                 jpeg_decode: JpegDecode = "region", transform: Transform | None = None) -> None:
        """``transform``: the transform keywords of ``bucketload.Loader`` (``None``: training's
        defaults)."""
    def decode(self, epoch: int, images: list[bytes], indices: list[int], labels: list[int],
               keys: list[str] | None = None) -> BatchTuple:
        """One batch ``(images, labels, indices, skipped)`` as ``NativeEpoch.next_batch`` returns
        it. ``indices`` (dataset-wide sample numbers), ``epoch`` and the seed fix each image's
        augmentation; ``keys`` name samples in errors."""

def shard(src: str, dst: str, *, shard_size: int | None = None,
          samples_per_shard: int | None = None, seed: int | None = None,
          label_from: LabelFrom = "auto", part: tuple[int, int] | None = None, md5: bool = False,
          overwrite: bool = False, concurrency: int | None = None, endpoint: str | None = None,
          region: str | None = None, use_manifest: bool = True, manifest_format: int = 2) -> str:
    """``bucketload shard src dst`` (slice ``part = (i, n)`` only, when given); the report as JSON.
    ``use_manifest=False``: list the source even when it has a manifest (``--no-manifest``).
    ``manifest_format=1`` writes ``_bucketload/manifest.json`` for older readers
    (``--manifest-format 1``); the default is format 2, ``_bucketload/manifest.bin``."""

def merge(dst: str, *, endpoint: str | None = None, region: str | None = None,
          manifest_format: int = 2) -> str:
    """``bucketload merge dst``: the slices' manifests stitched into the dataset's; the report as
    JSON. ``manifest_format`` as for :func:`shard`."""

def parse_size(text: str) -> int:
    """Bytes of a size such as ``"20GiB"``, ``"256MB"`` or ``"1.5G"`` (``G``/``GB`` = 10⁹,
    ``GiB`` = 2³⁰), as ``--cache-size`` reads it; raises ``ConfigError``."""

def split_uri(uri: str) -> tuple[str, str]:
    """``(prefix, name)`` of a checkpoint URI: ``prefix + "/" + name`` is the URI again, the key
    byte for byte (``s3://b/a//x.pt`` → ``("s3://b/a", "/x.pt")``); raises ``ConfigError`` when
    the URI names a bucket or the root."""

class NativeCheckpoints:
    """The checkpoints under one prefix."""

    def __init__(self, uri: str, endpoint: str | None = None, region: str | None = None,
                 part_size: int | None = None, parts_in_flight: int | None = None) -> None: ...
    def uri_of(self, name: str) -> str: ...
    def writer(self, name: str) -> NativeWriter: ...
    def reader(self, name: str) -> NativeReader: ...
    def load(self, name: str) -> Buffer: ...
    def save(self, name: str, data: BytesLike) -> Saved: ...
    def snapshot(self) -> NativeSnapshot: ...
    def save_background(self, name: str, data: NativeSnapshot | BytesLike) -> NativeSaveHandle:
        """Saves a :class:`NativeSnapshot` (taken) or a copy of any bytes-like object."""
    def wait_background(self) -> None: ...
    def list(self) -> list[tuple[str, int]]:
        """``(name, bytes)`` of the checkpoints under the prefix."""

class NativeSnapshot:
    """Bytes gathered in memory for ``save_background``: a write-only file for ``torch.save``."""

    def write(self, data: BytesLike) -> int: ...
    def tell(self) -> int: ...
    def flush(self) -> None: ...

class NativeWriter:
    """A checkpoint being written (multipart upload); visible at ``close()``."""

    def write(self, data: BytesLike) -> int: ...
    def tell(self) -> int: ...
    def close(self) -> Saved | None:
        """What was saved; ``None`` when already closed."""
    def abort(self) -> None: ...
    @property
    def closed(self) -> bool: ...

class NativeReader:
    """A checkpoint being read, with read-ahead while reads go forward."""

    @property
    def size(self) -> int: ...
    def read(self, n: int = -1) -> bytes: ...
    def readinto(self, target: BytesLike) -> int: ...
    def seek(self, offset: int, whence: int = 0) -> int: ...
    def tell(self) -> int: ...
    def close(self) -> None: ...

class NativeSaveHandle:
    """A background save."""

    @property
    def uri(self) -> str: ...
    def done(self) -> bool: ...
    def wait(self) -> Saved | None:
        """Raises the save's error; ``None`` when called again."""
