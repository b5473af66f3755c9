"""Small helpers shared by the package's modules."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as ``"20GiB"``, ``"256MB"`` or ``"1.5G"``."""
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"size {size} is negative")
        return size
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(size))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{size!r} is not a size; write e.g. 20GiB, 256MB or 1000000")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def split_uri(uri: str) -> tuple[str, str]:
    """``("s3://bucket/dir", "name")`` from ``"s3://bucket/dir/name"``."""
    head, sep, name = uri.rstrip("/").rpartition("/")
    if not sep or not name or head.endswith((":/", ":")):
        raise ValueError(f"{uri!r} names no object; write e.g. s3://bucket/checkpoints/epoch-1.pt")
    return head, name
