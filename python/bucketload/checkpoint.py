"""Checkpoints to object storage: ``save``/``load`` of any torch object, streamed writers and
readers, background saves.

A save is one multipart upload (16 MiB parts, 16 in flight, a CRC64-NVME checksum per part);
the checkpoint appears only when every part is stored, and on any error or interruption the
upload is aborted: a partial checkpoint is never visible and an older one at the same key
stays intact. Loads read with parallel ranged GETs. ``file://`` URIs and paths work the same
way (fsync and an atomic rename).
"""

from __future__ import annotations

import io
from typing import Any

from . import _native
from ._util import split_uri

_STORES: dict[tuple[Any, ...], Any] = {}


def _checkpoints(prefix: str, endpoint: str | None, region: str | None) -> Any:
    import os

    key = (os.getpid(), prefix, endpoint, region)
    store = _STORES.get(key)
    if store is None:
        store = _native.NativeCheckpoints(prefix, endpoint=endpoint, region=region)
        _STORES[key] = store
    return store


class SaveHandle:
    """A checkpoint being saved in the background."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def uri(self) -> str:
        """The checkpoint's URI."""
        return self._native.uri

    def done(self) -> bool:
        """Whether the save ended, successfully or not (``wait()`` tells which)."""
        return self._native.done()

    def wait(self) -> dict[str, Any] | None:
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
) -> SaveHandle | dict[str, Any]:
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

    prefix, name = split_uri(uri)
    data = io.BytesIO()
    torch.save(obj, data)
    store = _checkpoints(prefix, endpoint, region)
    view = data.getbuffer()
    try:
        if background:
            return SaveHandle(store.save_background(name, view))
        return store.save(name, view)
    finally:
        view.release()


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

    prefix, name = split_uri(uri)
    buffer = _checkpoints(prefix, endpoint, region).load(name)
    return torch.load(io.BytesIO(memoryview(buffer)), **torch_load_args)


def wait(prefix: str, *, endpoint: str | None = None, region: str | None = None) -> None:
    """Waits for every background save under ``prefix``; raises the first failure."""
    _checkpoints(prefix.rstrip("/"), endpoint, region).wait_background()


class Writer(io.BufferedIOBase):
    """A checkpoint being written: a write-only binary file. ``close()`` makes it visible;
    leaving a ``with`` block by an exception (or :meth:`abort`) abandons it."""

    def __init__(self, uri: str, *, endpoint: str | None = None, region: str | None = None):
        super().__init__()
        prefix, name = split_uri(uri)
        self.uri = uri
        self._native = _checkpoints(prefix, endpoint, region).writer(name)
        self.saved: dict[str, Any] | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError(f"write to a closed checkpoint writer ({self.uri})")
        return self._native.write(data)

    def tell(self) -> int:
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

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is not None:
            self.abort()
        else:
            self.close()


class Reader(io.BufferedIOBase):
    """A checkpoint opened for reading: a seekable, read-only binary file that reads ahead
    while reads go forward."""

    def __init__(self, uri: str, *, endpoint: str | None = None, region: str | None = None):
        super().__init__()
        prefix, name = split_uri(uri)
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

    def readinto(self, buffer: Any) -> int:
        return self._native.readinto(buffer)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._native.seek(offset, whence)

    def tell(self) -> int:
        return self._native.tell()

    def close(self) -> None:
        if not self.closed:
            self._native.close()
            super().close()
