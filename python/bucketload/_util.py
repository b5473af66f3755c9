"""Small helpers shared by the package's modules."""

from __future__ import annotations

from . import _native


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as ``"20GiB"``, ``"256MB"`` or ``"1.5G"``, read as
    the CLI reads ``--cache-size``: ``K``/``KB``, ``M``/``MB``, ``G``/``GB`` are powers of
    1000, ``KiB``, ``MiB``, ``GiB`` powers of 1024. Raises ``ConfigError`` (a ``ValueError``)."""
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"size {size} is negative")
        return size
    return _native.parse_size(str(size))


def split_uri(uri: str) -> tuple[str, str]:
    """``("s3://bucket/dir", "name")`` from ``"s3://bucket/dir/name"``, as the engine splits a
    checkpoint URI: prefix + ``/`` + name is the URI again, so on S3 the key is the URI's byte
    for byte (``s3://b/a//x.pt`` → ``s3://b/a``, ``/x.pt``). Raises ``ConfigError`` (a
    ``ValueError``) when the URI names a bucket or the root."""
    return _native.split_uri(uri)
