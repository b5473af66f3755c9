"""The native module: bindings over bucketload's Rust engine. The public API is the
pure-Python layer (``bucketload.Loader``, ``bucketload.checkpoint``, ``bucketload.s3torch``,
``bucketload.dcp``); these classes are its building blocks. Every call that waits releases the
GIL. Objects belong to the process that created them: in a forked child they raise
``RuntimeError`` (open them again there)."""

from typing import Any

__version__: str

class Buffer:
    """Rust-owned, typed, C-contiguous memory exported through the buffer protocol
    (``memoryview(buf)``, ``torch.frombuffer(buf, dtype=...)``) without a copy."""

    @property
    def shape(self) -> list[int]: ...
    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...

class NativeStore:
    """A store opened at a URI prefix (``s3://bucket/prefix``, ``file://``, a path)."""

    def __init__(self, uri: str, endpoint: str | None = None, region: str | None = None,
                 concurrency: int | None = None, *, client: Any = None) -> None:
        """``client``: any object with the attributes of ``bucketload.s3torch.S3ClientConfig``
        (``profile``, ``max_attempts``, ``unsigned``, ``force_path_style``, ``part_size``)."""
    @property
    def uri(self) -> str: ...
    def object_uri(self, key: str) -> str: ...
    def list(self) -> list[tuple[str, int]]:
        """Every object below the prefix as ``(key, size)``, sorted; folders in parallel."""
    def list_prefix(self, prefix: str) -> list[tuple[str, int]]:
        """The objects whose keys start with ``prefix`` (any string, relative to the store's
        prefix) as ``(key, size)``, in key order, keys as stored; folder markers left out."""
    def list_level(self, prefix: str) -> tuple[list[tuple[str, int]], list[str]]:
        """A delimiter listing of ``prefix``: the objects one level down and the folders
        (``prefix`` + name + ``/``)."""
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

    def __init__(self, uri: str, *, format: str = "auto", batch_size: int = 64,
                 image_size: int = 224, decode: bool = True, dtype: str = "float32",
                 shuffle: bool = True, seed: int = 0, shuffle_buffer: int | None = None,
                 cache_dir: str | None = None, cache_size: int = ...,
                 concurrency: int | None = None, decode_threads: int | None = None,
                 rank: int = 0, world_size: int = 1, worker: int = 0, num_workers: int = 1,
                 drop_last: bool = False, skip_corrupt: bool = False,
                 jpeg_decode: str = "region",
                 endpoint: str | None = None, region: str | None = None,
                 client: Any = None) -> None: ...
    def samples_per_epoch(self) -> int: ...
    def batches_per_epoch(self) -> int: ...
    def dataset_samples(self) -> int: ...
    def epoch(self, epoch: int, state: str | None = None) -> NativeEpoch:
        """Epoch ``epoch`` from its start, or from a ``NativeEpoch.state()``."""

class NativeEpoch:
    """One epoch of one worker."""

    @property
    def epoch(self) -> int: ...
    @property
    def consumed(self) -> int: ...
    def next_batch(self) -> tuple[Buffer, Buffer, Buffer, list[tuple[str, str]]]:
        """``(images, labels, indices, skipped)``; raises ``StopIteration`` at the end."""
    def next_samples(self, n: int) -> list[tuple[str, int | None, list[tuple[str, bytes]], int, bool]]:
        """Up to ``n`` raw samples ``(key, label, members, index, is_object)``; ``[]`` at the end."""
    def next_images(self, n: int) -> list[tuple[str, int | None, bytes, int]]:
        """Up to ``n`` raw samples ``(key, label, image, index)``, each with its image member."""
    def state(self) -> str:
        """JSON state after what was handed out; resumes with neither replay nor skip."""

class NativeDecoder:
    """Decodes encoded images (JPEG, PNG) into one augmented batch on native threads: the
    loader's decode, for bytes that arrive another way (``bucketload.ray.decode_batch``)."""

    def __init__(self, *, image_size: int = 224, seed: int = 0, dtype: str = "float32",
                 decode_threads: int | None = None, skip_corrupt: bool = False,
                 jpeg_decode: str = "region") -> None: ...
    def decode(self, epoch: int, images: list[bytes], indices: list[int], labels: list[int],
               keys: list[str] | None = None) -> tuple[Buffer, Buffer, Buffer, list[tuple[str, str]]]:
        """One batch ``(images, labels, indices, skipped)`` as ``NativeEpoch.next_batch`` returns
        it. ``indices`` (dataset-wide sample numbers), ``epoch`` and the seed fix each image's
        augmentation; ``keys`` name samples in errors."""

def shard(src: str, dst: str, *, shard_size: int | None = None,
          samples_per_shard: int | None = None, seed: int | None = None,
          label_from: str = "auto", part: tuple[int, int] | None = None, md5: bool = False,
          endpoint: str | None = None, region: str | None = None) -> str:
    """``bucketload shard src dst`` (slice ``part = (i, n)`` only, when given); the report as JSON."""

def merge(dst: str, *, endpoint: str | None = None, region: str | None = None) -> str:
    """``bucketload merge dst``: the slices' manifests stitched into the dataset's; the report as JSON."""

class NativeCheckpoints:
    """The checkpoints under one prefix."""

    def __init__(self, uri: str, endpoint: str | None = None, region: str | None = None,
                 part_size: int | None = None, parts_in_flight: int | None = None) -> None: ...
    def uri_of(self, name: str) -> str: ...
    def writer(self, name: str) -> NativeWriter: ...
    def reader(self, name: str) -> NativeReader: ...
    def load(self, name: str) -> Buffer: ...
    def save(self, name: str, data: Any) -> dict[str, Any]: ...
    def snapshot(self) -> NativeSnapshot: ...
    def save_background(self, name: str, data: NativeSnapshot | Any) -> NativeSaveHandle:
        """Saves a :class:`NativeSnapshot` (taken) or a copy of any bytes-like object."""
    def wait_background(self) -> None: ...
    def list(self) -> list[tuple[str, int]]: ...

class NativeSnapshot:
    """Bytes gathered in memory for ``save_background``: a write-only file for ``torch.save``."""

    def write(self, data: Any) -> int: ...
    def tell(self) -> int: ...
    def flush(self) -> None: ...

class NativeWriter:
    def write(self, data: Any) -> int: ...
    def tell(self) -> int: ...
    def close(self) -> dict[str, Any] | None: ...
    def abort(self) -> None: ...
    @property
    def closed(self) -> bool: ...

class NativeReader:
    @property
    def size(self) -> int: ...
    def read(self, n: int = -1) -> bytes: ...
    def readinto(self, target: Any) -> int: ...
    def seek(self, offset: int, whence: int = 0) -> int: ...
    def tell(self) -> int: ...
    def close(self) -> None: ...

class NativeSaveHandle:
    @property
    def uri(self) -> str: ...
    def done(self) -> bool: ...
    def wait(self) -> dict[str, Any] | None: ...
