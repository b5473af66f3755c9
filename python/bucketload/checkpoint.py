"""Checkpoints to object storage: ``save``/``load`` of any torch object, streamed writers and
readers, background saves.

A save is one multipart upload (16 MiB parts, 16 in flight, a CRC64-NVME checksum per part)
that ``torch.save`` streams into: each part is uploaded as soon as it fills, so the state is
never serialised whole in memory. The checkpoint appears only when every part is stored, and
on any error or interruption the upload is aborted: a partial checkpoint is never visible and
an older one at the same key stays intact. Loads read ahead with parallel ranged GETs and
``torch.load`` copies each tensor straight out of the downloaded parts. ``file://`` URIs and
paths work the same way (fsync and an atomic rename).

The object's key is exactly what follows ``s3://bucket/`` (``s3://b/a//x.pt`` is the key
``a//x.pt``, ``s3://b/x/`` the key ``x/``), as for boto3 and the Amazon S3 Connector for
PyTorch.
"""

from __future__ import annotations

import errno
import io
import operator
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, cast

from . import _native
from ._types import Saved

if TYPE_CHECKING:  # typing_extensions is only needed to check types, never imported to run
    from typing_extensions import Buffer

_STORES: dict[tuple[int, str, str | None, str | None], _native.NativeCheckpoints] = {}


def _checkpoints(
    prefix: str, endpoint: str | None, region: str | None
) -> _native.NativeCheckpoints:
    import os

    key = (os.getpid(), prefix, endpoint, region)
    store = _STORES.get(key)
    if store is None:
        store = _native.NativeCheckpoints(prefix, endpoint=endpoint, region=region)
        _STORES[key] = store
    return store


class SaveHandle:
    """A checkpoint being saved in the background."""

    def __init__(self, native: _native.NativeSaveHandle) -> None:
        self._native = native

    @property
    def uri(self) -> str:
        """The checkpoint's URI."""
        return self._native.uri

    def done(self) -> bool:
        """Whether the save ended, successfully or not (``wait()`` tells which)."""
        return self._native.done()

    def wait(self) -> Saved | None:
        """Waits until the checkpoint is visible; raises the save's error. Returns
        ``{"uri", "bytes", "seconds", ...}`` (``None`` when called again)."""
        return self._native.wait()


def save(
    obj: Any,
    uri: str,
    *,
    background: bool = False,
    endpoint: str | None = None,
    region: str | None = None,
) -> SaveHandle | Saved:
    """Saves ``obj`` with ``torch.save`` at ``uri`` (``s3://bucket/run/epoch-3.pt``, a
    ``file://`` URI or a path).

    With ``background=True`` the call returns once the serialised bytes are copied (the
    training loop may change the tensors right away) and the upload runs on bucketload's
    threads; it returns a :class:`SaveHandle`. At most two background saves run at once per
    prefix (another waits for a slot); a failed background save that nobody waited for is
    raised by the next save to the same prefix. Otherwise it returns when the checkpoint is
    visible.
    """
    import torch

    if background:
        prefix, name = _native.split_uri(uri)
        store = _checkpoints(prefix, endpoint, region)
        # The snapshot: torch.save's bytes, copied once into memory bucketload owns.
        snapshot = store.snapshot()
        torch.save(obj, cast("IO[bytes]", snapshot))
        return SaveHandle(store.save_background(name, snapshot))
    with Writer(uri, endpoint=endpoint, region=region) as writer:
        torch.save(obj, cast("IO[bytes]", writer))
    assert writer.saved is not None  # closed without an exception
    return writer.saved


def load(
    uri: str,
    *,
    endpoint: str | None = None,
    region: str | None = None,
    **torch_load_args: Any,
) -> Any:
    """Loads what :func:`save` (or ``torch.save`` into any writer) stored at ``uri``, read with
    parallel ranged GETs; extra keyword arguments go to ``torch.load`` (``map_location``,
    ``weights_only``…)."""
    import torch

    with Reader(uri, endpoint=endpoint, region=region) as reader:
        return torch.load(cast("IO[bytes]", reader), **torch_load_args)


def wait(prefix: str, *, endpoint: str | None = None, region: str | None = None) -> None:
    """Waits for every background save under ``prefix``; raises the first failure."""
    _checkpoints(prefix.rstrip("/"), endpoint, region).wait_background()


class Writer(io.BufferedIOBase):
    """A checkpoint being written: a write-only binary file. ``close()`` makes it visible;
    leaving a ``with`` block by an exception (or :meth:`abort`) abandons it."""

    def __init__(self, uri: str, *, endpoint: str | None = None, region: str | None = None):
        super().__init__()
        prefix, name = _native.split_uri(uri)
        self.uri = uri
        self._native = _checkpoints(prefix, endpoint, region).writer(name)
        self.saved: Saved | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        if self.closed:
            raise ValueError(f"write to a closed checkpoint writer ({self.uri})")
        return self._native.write(data)

    def tell(self) -> int:
        if self.closed:
            raise ValueError(f"tell on a closed checkpoint writer ({self.uri})")
        return self._native.tell()

    def flush(self) -> None:
        """Nothing to do: parts are uploaded as they fill; the data is durable at close."""

    def close(self) -> None:
        if not self.closed:
            try:
                self.saved = self._native.close()
            finally:
                super().close()

    def abort(self) -> None:
        """Abandons the checkpoint: nothing becomes visible."""
        if not self.closed:
            try:
                self._native.abort()
            finally:
                super().close()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is not None:
            self.abort()
        else:
            self.close()


class Reader(io.BufferedIOBase):
    """A checkpoint opened for reading: a seekable, read-only binary file that reads ahead
    while reads go forward."""

    def __init__(self, uri: str, *, endpoint: str | None = None, region: str | None = None):
        super().__init__()
        prefix, name = _native.split_uri(uri)
        self.uri = uri
        self._native = _checkpoints(prefix, endpoint, region).reader(name)

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self._native.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self._native.read(-1 if size is None else size)

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def readinto(self, buffer: Buffer) -> int:
        return self._native.readinto(buffer)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Moves to ``offset`` from the start, the current position or the end, as files do:
        a float is a ``TypeError``, a negative position from the start or an unknown
        ``whence`` a ``ValueError``, and a position before the start an ``OSError``."""
        offset, whence = operator.index(offset), operator.index(whence)
        if whence == io.SEEK_SET:
            if offset < 0:
                raise ValueError(f"negative seek value {offset}")
            return self._native.seek(offset)
        if whence not in (io.SEEK_CUR, io.SEEK_END):
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        base = self.tell() if whence == io.SEEK_CUR else self.size
        if base + offset < 0:
            raise OSError(errno.EINVAL, f"seek to {base + offset}, before the start of {self.uri}")
        return self._native.seek(base + offset)

    def tell(self) -> int:
        return self._native.tell()

    def close(self) -> None:
        if not self.closed:
            self._native.close()
            super().close()
