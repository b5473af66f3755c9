"""The connector's words for a missing object or bucket.

The connector raises ``S3Exception("Service error: The key does not exist")`` when a GET finds
no object, and scripts (and the connector's own Lightning and DCP code) match those words. The
drop-in raises the same words, as a :class:`bucketload.NotFoundError`, which is also an
``S3Exception`` and a ``FileNotFoundError``; its ``uri`` names what is missing and its cause is
bucketload's own error, which says what to check."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from ..errors import NotFoundError

#: What the connector's client says for each operation, by what is missing (its requests'
#: errors: HeadObject and CopyObject cannot tell a missing bucket from a missing key).
Operation = Literal["get", "put", "list", "delete", "head", "copy"]
_BY_NAME = {"object": "The key does not exist", "bucket": "The bucket does not exist"}
_NOT_FOUND = {"object": "The object was not found", "bucket": "The object was not found"}
_WORDS: dict[str, dict[str, str]] = {
    "get": _BY_NAME, "put": _BY_NAME, "list": _BY_NAME, "delete": _BY_NAME,
    "head": _NOT_FOUND, "copy": _NOT_FOUND,
}
_PREFIX = "Service error: "


def not_found(error: NotFoundError, operation: Operation) -> NotFoundError:
    """``error`` in the connector's words for ``operation``."""
    if str(error).startswith(_PREFIX):
        return error
    what = error.what or "object"
    worded = NotFoundError(_PREFIX + _WORDS[operation][what])
    worded.uri, worded.what = error.uri, what
    worded.__cause__ = error
    return worded


@contextmanager
def connector_errors(operation: Operation) -> Iterator[None]:
    """Raises a not-found error of the block in the connector's words for ``operation``."""
    try:
        yield
    except NotFoundError as e:
        raise not_found(e, operation) from e
