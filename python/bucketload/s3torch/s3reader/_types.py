"""What the readers are given: the object's metadata and its byte stream.

The connector takes these types from its CRT client; here they are plain Python: an
:class:`ObjectInfo` (from the listing, or a HEAD), and a stream is any iterator of ``bytes``
chunks that together make the requested range."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple


class ObjectInfo(NamedTuple):
    """An object's metadata: ``key`` and ``size`` in bytes (what the readers use), and its
    ``etag`` when known."""

    key: str
    size: int
    etag: str | None = None


# The connector's HEAD result carries the same fields the readers use.
HeadObjectResult = ObjectInfo

# The bytes of a GET, chunk by chunk.
GetObjectStream = Iterator[bytes]
