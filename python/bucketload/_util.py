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
    """``("s3://bucket/dir", "name")`` from ``"s3://bucket/dir/name"``, for ``NativeStore``:
    the prefix as written (``s3://b/end//.metadata`` → ``s3://b/end/``, ``.metadata``), the
    name its last segment, which a store name must be (no empty segment). Checkpoint URIs
    split differently (``_native.split_uri``: the name keeps the slashes)."""
    head, sep, name = uri.rstrip("/").rpartition("/")
    if not sep or not name or head.endswith((":/", ":")):
        raise ValueError(f"{uri!r} names no object; write e.g. s3://bucket/checkpoints/epoch-1.pt")
    return head, name
