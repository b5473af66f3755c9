"""The connector's client settings, and how the datasets reach objects with them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import _native
from ._errors import connector_errors
from .s3reader._types import ObjectInfo


@dataclass(frozen=True)
class S3ClientConfig:
    """The connector's ``S3ClientConfig``, the same fields and defaults, each mapped onto
    bucketload's setting of the same meaning:

    - ``max_attempts``: attempts per request, the first included (bucketload retries
      ``max_attempts - 1`` times).
    - ``profile``: the profile of the shared AWS config and credentials files.
    - ``unsigned``: unsigned (anonymous) requests, for public buckets.
    - ``force_path_style``: path-style addressing (``http://endpoint/bucket/key``).
    - ``part_size``: the part size of multipart checkpoint uploads (:class:`S3Checkpoint`) and
      of ranged reads, in bytes.
    - ``throughput_target_gbps``: accepted and ignored; it tunes the connector's CRT client,
      which bucketload does not use (bucketload's knob is the number of requests in flight,
      ``concurrency=``).
    """

    throughput_target_gbps: float = 10.0
    part_size: int = 8 * 1024 * 1024
    unsigned: bool = False
    force_path_style: bool = False
    max_attempts: int = 10
    profile: str | None = None


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key_prefix)`` of an ``s3://`` URI, the prefix as written."""
    if not uri or not uri.startswith("s3://"):
        raise ValueError("Only s3:// URIs are supported")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError("Bucket name must be non-empty")
    return bucket, prefix


class Stores:
    """One native store per process and bucket, opened at the bucket's root with the client
    settings (opened again after a fork or in a spawned worker)."""

    def __init__(self, endpoint: str | None, region: str | None,
                 config: S3ClientConfig | None) -> None:
        self.endpoint = endpoint
        self.region = region
        self.config = config
        self._open: dict[tuple[int, str], Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "region": self.region, "config": self.config,
                "_open": {}}

    def get(self, bucket: str) -> Any:
        key = (os.getpid(), bucket)
        store = self._open.get(key)
        if store is None:
            store = _native.NativeStore(f"s3://{bucket}", endpoint=self.endpoint,
                                        region=self.region, client=self.config)
            self._open[key] = store
        return store

    def list_prefix(self, bucket: str, prefix: str) -> list[ObjectInfo]:
        """The objects whose keys start with ``prefix`` (any string), in key order; folder
        markers left out. Errors are the connector's (a missing bucket: "Service error: The
        bucket does not exist"), as are those of the other requests here."""
        with connector_errors("list"):
            listed = self.get(bucket).list_prefix(prefix)
        return [ObjectInfo(key, size) for key, size in listed]

    def fetch(self, bucket: str, key: str) -> bytes:
        """The bytes of an object (a GET)."""
        with connector_errors("get"):
            data: bytes = self.get(bucket).get(key)
        return data

    def object_info(self, bucket: str, key: str) -> Callable[[], ObjectInfo]:
        """The ``get_object_info`` of a reader: a HEAD, when called."""
        def head() -> ObjectInfo:
            with connector_errors("head"):
                return ObjectInfo(key, self.get(bucket).size(key))
        return head

    def get_stream(self, bucket: str, key: str) -> Callable[..., Iterator[bytes]]:
        """The ``get_stream(start=None, end=None)`` of a reader: the object whole, or bytes
        ``start..end``, fetched when the stream is first advanced."""
        def get_stream(start: int | None = None, end: int | None = None) -> Iterator[bytes]:
            if start is None and end is None:
                yield self.fetch(bucket, key)
                return
            store = self.get(bucket)
            with connector_errors("get"):  # one ranged GET for the connector
                lo = start or 0
                hi = end if end is not None else store.size(key)
                data = store.get_range(key, lo, hi)
            yield data
        return get_stream


def prefetched(data: bytes) -> Callable[..., Iterator[bytes]]:
    """A ``get_stream`` over bytes already fetched (whole object)."""
    def get_stream(start: int | None = None, end: int | None = None) -> Iterator[bytes]:
        yield data if start is None and end is None else data[start or 0:end]
    return get_stream
