"""Exceptions raised by bucketload.

Every error names the object (or sample) it is about and, where it helps, what to do.

- :class:`BucketloadError` — the base of all of them.
- :class:`NotFoundError` — an object, prefix or bucket does not exist; also a
  :class:`FileNotFoundError`, so ``except FileNotFoundError`` works as with files.
- :class:`ConfigError` — an invalid setting or URI; also a :class:`ValueError`.
- :class:`CorruptDataError` — bytes that cannot be used: a corrupt image, a truncated tar, a
  checksum mismatch.
- :class:`StoreError` — a request that failed after retries (network, throttling, server
  errors); also an :class:`OSError`.
- :class:`S3Exception` — the Amazon S3 Connector for PyTorch's name for an error of the object
  store: the base of :class:`NotFoundError` and :class:`StoreError` (so of
  :class:`PermissionDeniedError`), so code written for the connector (``except S3Exception``)
  catches what bucketload raises for the same failures.
- :class:`PermissionDeniedError` — the store refused the credentials; a :class:`StoreError`
  and a :class:`PermissionError`.

The class follows the same categories as the CLI's exit codes and the mount's errnos
(``docs/CLI.md``): not found (exit 3), permission (4), network or throttling (5), invalid input
(6) and corrupt data (6).
"""

from __future__ import annotations


class BucketloadError(Exception):
    """Base class of bucketload's errors."""


class S3Exception(BucketloadError):
    """An error of the object store (the connector's ``S3Exception``): a missing object or
    bucket (:class:`NotFoundError`), or a request that failed (:class:`StoreError`)."""


class NotFoundError(S3Exception, FileNotFoundError):
    """An object, prefix or bucket does not exist. Raised by a request to the store, it names
    what is missing: ``uri`` (the object's or the bucket's) and ``what`` (``"object"`` or
    ``"bucket"``); otherwise both are ``None``."""

    uri: str | None = None
    what: str | None = None


class ConfigError(BucketloadError, ValueError):
    """An invalid setting, URI or state."""


class CorruptDataError(BucketloadError):
    """Bytes that cannot be used: corrupt image, truncated tar, checksum mismatch."""


class StoreError(S3Exception, OSError):
    """A request to the object store failed after retries."""


class PermissionDeniedError(StoreError, PermissionError):
    """The store refused the credentials or does not allow the operation."""


__all__ = [
    "BucketloadError",
    "ConfigError",
    "CorruptDataError",
    "NotFoundError",
    "PermissionDeniedError",
    "S3Exception",
    "StoreError",
]
