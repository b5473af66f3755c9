"""Small helpers shared by the package's modules."""

from __future__ import annotations

from . import _native
from .errors import ConfigError


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as ``"20GiB"``, ``"256MB"`` or ``"1.5G"``, read as
    the CLI reads ``--cache-size``: ``K``/``KB``, ``M``/``MB``, ``G``/``GB`` are powers of
    1000, ``KiB``, ``MiB``, ``GiB`` powers of 1024. Raises ``ConfigError`` (a ``ValueError``)."""
    if isinstance(size, int):
        if size < 0:
            raise ConfigError(f"size {size} is negative: give a number of bytes >= 0")
        return size
    return _native.parse_size(str(size))


def split_uri(uri: str) -> tuple[str, str]:
    """``("s3://bucket/dir", "name")`` from ``"s3://bucket/dir/name"``, for ``NativeStore``:
    split as checkpoint URIs are (``_native.split_uri``), so that the prefix, ``/`` and the
    name are the URI again and the key is the URI's byte for byte (``s3://b/end//.metadata``
    → ``s3://b/end``, ``/.metadata``). Raises ``ConfigError`` (a ``ValueError``) for a URI
    that names no object."""
    return _native.split_uri(uri)
