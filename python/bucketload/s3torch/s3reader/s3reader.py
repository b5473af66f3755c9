#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD
#
#  From s3torchconnector v1.5.0 (s3torchconnector/src/s3torchconnector/s3reader/s3reader.py),
#  under the BSD 3-Clause License in LICENSE beside this file. Changed for bucketload: the
#  object metadata and stream types come from ._types instead of the CRT client; writable_bytes added.

import io
from abc import ABC, abstractmethod
from io import SEEK_SET
from typing import Any


def writable_bytes(buf: Any) -> memoryview:
    """``buf`` as a writable view of bytes, whatever its item format (``readinto`` fills
    ``len(buf) * itemsize`` bytes, as ``io`` files do)."""
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(
            f"argument must be a writable bytes-like object, not {type(buf).__name__}"
        ) from None
    if view.readonly:
        raise TypeError(
            f"argument must be a writable bytes-like object, not {type(buf).__name__}"
        )
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class S3Reader(ABC, io.BufferedIOBase):
    """An abstract base class for read-only, file-like representation of a single object stored in S3.

    This class defines the interface for S3 readers. Concrete implementations (SequentialS3Reader or
    RangedS3Reader extend this class. S3ReaderConstructor creates partial functions of these
    implementations, which are then completed by S3Client with the remaining required parameters.
    """

    @property
    @abstractmethod
    def bucket(self) -> str:
        pass

    @property
    @abstractmethod
    def key(self) -> str:
        pass

    @abstractmethod
    def read(self, size: int | None = None) -> bytes:
        pass

    @abstractmethod
    def seek(self, offset: int, whence: int = SEEK_SET, /) -> int:
        pass

    @abstractmethod
    def tell(self) -> int:
        pass

    @abstractmethod
    def readinto(self, buf: Any) -> int:
        pass

    def seekable(self) -> bool:
        """
        Returns:
            bool: Return whether object supports seek operations.
        """
        return True

    def readable(self) -> bool:
        """
        Returns:
            bool: Return whether object was opened for reading.
        """
        return True

    def writable(self) -> bool:
        """
        Returns:
            bool: Return whether object was opened for writing.
        """
        return False
