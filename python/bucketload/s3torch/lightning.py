"""Drop-in for ``s3torchconnector.lightning``: Lightning checkpoints in S3.

::

    # from s3torchconnector.lightning import S3LightningCheckpoint
    from bucketload.s3torch.lightning import S3LightningCheckpoint

    trainer = lightning.Trainer(plugins=[S3LightningCheckpoint("us-east-1")],
                                default_root_dir="s3://bucket/run1")

Saves are bucketload checkpoint objects (parallel multipart uploads, visible only when
whole); loads are parallel ranged GETs. Needs the ``lightning`` package.
"""

from __future__ import annotations

from typing import Any

import lightning
from lightning.pytorch.plugins.io import CheckpointIO

from .. import _native
from .. import checkpoint as _checkpoint
from .._util import split_uri
from ._errors import connector_errors
from .dcp.s3_file_system import _bucket_and_key


class S3LightningCheckpoint(CheckpointIO):
    """A Lightning ``CheckpointIO`` for ``s3://`` paths, with the connector's arguments
    (``region``, ``s3client_config``, ``endpoint``). ``s3client_config`` is accepted and not
    applied; ``remove_checkpoint`` deletes the object. A missing object or bucket raises the
    connector's words ("Service error: The key does not exist")."""

    def __init__(self, region: str | None, s3client_config: Any = None,
                 endpoint: str | None = None) -> None:
        self.region = region
        self.endpoint = endpoint
        self._s3client_config = s3client_config

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str,  # type: ignore[override]
                        storage_options: Any | None = None) -> None:
        """``torch.save`` of ``checkpoint`` to the S3 URI ``path``; visible only when whole."""
        self._validate_path(path)
        with connector_errors("put"):
            _checkpoint.save(checkpoint, path, endpoint=self.endpoint, region=self.region)

    def load_checkpoint(self, path: str, map_location: Any | None = None,  # type: ignore[override]
                        weights_only: bool | None = None) -> dict[str, Any]:
        """``torch.load`` of the checkpoint at ``path``. ``weights_only=None`` lets torch
        decide (Lightning 2.6 and later), as the connector does; before 2.6 it means False."""
        self._validate_path(path)
        if weights_only is None and _lightning_before_2_6():
            weights_only = False
        with connector_errors("get"):
            loaded: dict[str, Any] = _checkpoint.load(
                path, endpoint=self.endpoint, region=self.region, map_location=map_location,
                weights_only=weights_only)
        return loaded

    def remove_checkpoint(self, path: str) -> None:  # type: ignore[override]
        """Deletes the checkpoint object at ``path``."""
        self._validate_path(path)
        prefix, name = split_uri(path)
        with connector_errors("delete"):
            _native.NativeStore(prefix, endpoint=self.endpoint, region=self.region).delete(name)

    def teardown(self) -> None:
        """Nothing to release: saves are complete when ``save_checkpoint`` returns."""

    @staticmethod
    def _validate_path(path: Any) -> None:
        if not isinstance(path, str):
            raise TypeError(f"{type(path).__name__!r} is not a supported type for 'path'. "
                            "Must be a string formatted as an S3 uri.")
        _bucket_and_key(path)


def _lightning_before_2_6() -> bool:
    from packaging.version import Version

    return Version(lightning.__version__) < Version("2.6.0")


__all__ = ["S3LightningCheckpoint"]
