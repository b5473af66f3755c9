"""bucketload on Ray: Ray Data reads through bucketload's engine, native decode as a
``map_batches`` function, and sharding fanned out over Ray tasks. Inside a Ray Train worker,
``bucketload.Loader`` takes its rank and world size from ``ray.train.get_context()`` (or from
torch.distributed, which TorchTrainer initialises): nothing to pass.

::

    import ray, bucketload.ray as blr

    ds = blr.read_dataset("s3://bucket/train-shards", format="shards")
    ds = ds.map_batches(blr.decode_batch, fn_kwargs={"image_size": 224}, batch_format="numpy",
                        batch_size=256)
    # in a TorchTrainer: ray.train.get_dataset_shard("train").iter_torch_batches(batch_size=64)

    blr.shard("s3://bucket/train", "s3://bucket/train-shards", parts=8)

Credentials and endpoints come from the AWS environment of each Ray worker: on a cluster,
pass them with ``runtime_env={"env_vars": {...}}`` (docs/RAY.md).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pyarrow as pa
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from . import _native
from ._types import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Augment,
    DType,
    Format,
    JpegDecode,
    LabelFrom,
    Transform,
)

_ROWS_PER_BLOCK = 256
# Each read task opens the dataset (one GET of its manifest, or a listing without one), so a
# task gets at least this many samples unless the caller asks for a number of blocks.
MIN_SAMPLES_PER_TASK = 1000


def _read_part(uri: str, settings: dict[str, Any], epoch: int, part: int, parts: int) -> Iterator[pa.Table]:
    """The rows of slice ``part`` of ``parts`` of the dataset, in blocks."""
    loader = _native.NativeLoader(uri, decode=False, worker=part, num_workers=parts, **settings)
    samples = loader.epoch(epoch)
    while True:
        batch = samples.next_images(_ROWS_PER_BLOCK)
        if not batch:
            return
        keys, labels, indices, images = [], [], [], []
        for key, label, image, index in batch:
            keys.append(key)
            labels.append(-1 if label is None else label)
            indices.append(index)
            images.append(image)
        yield pa.table({
            "key": pa.array(keys, pa.string()),
            "label": pa.array(labels, pa.int64()),
            "index": pa.array(indices, pa.int64()),
            "image": pa.array(images, pa.binary()),
        })


class BucketloadDatasource(Datasource):
    """A Ray Data datasource over a bucketload dataset (one object per sample, or tar shards
    streamed or indexed). Rows: ``key``, ``label`` (-1 without labels), ``index`` (the
    sample's number in the dataset) and ``image`` (the encoded image bytes). Each read task
    reads a disjoint slice with bucketload's engine (hundreds of requests in flight);
    together they cover every sample exactly once per epoch.

    Every task opens the dataset: with a manifest (``bucketload manifest`` or ``bucketload
    shard`` wrote one) that is one GET, without one a listing. Tasks therefore get at least
    ``MIN_SAMPLES_PER_TASK`` samples each, unless ``tasks`` fixes their number.
    ``use_manifest``, ``check_manifest`` and ``allow_incomplete`` as for
    :class:`bucketload.Loader`."""

    def __init__(self, uri: str, *, format: Format = "auto", shuffle: bool = False, seed: int = 0,
                 epoch: int = 0, concurrency: int | None = None, endpoint: str | None = None,
                 region: str | None = None, tasks: int | None = None, use_manifest: bool = True,
                 check_manifest: bool = False, allow_incomplete: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if tasks is not None and tasks < 1:
            raise ValueError("tasks must be at least 1")
        self._uri = uri
        self._epoch = epoch
        self._tasks = tasks
        self._settings: dict[str, Any] = {
            "format": format, "shuffle": shuffle, "seed": seed, "concurrency": concurrency,
            "endpoint": endpoint, "region": region, "use_manifest": use_manifest,
            "allow_incomplete": allow_incomplete,
        }
        # The check lists the dataset once, here; the read tasks trust what it checked.
        self._samples = _native.NativeLoader(uri, decode=False, check_manifest=check_manifest,
                                             **self._settings).dataset_samples()

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        if self._tasks is not None:
            parts = self._tasks
        else:
            parts = min(parallelism, -(-self._samples // MIN_SAMPLES_PER_TASK))
        parts = max(1, min(parts, self._samples))
        base, extra = divmod(self._samples, parts)
        tasks = []
        for part in range(parts):
            rows = base + (1 if part < extra else 0)
            read = functools.partial(_read_part, self._uri, self._settings, self._epoch, part, parts)
            metadata = BlockMetadata(num_rows=rows, size_bytes=None, exec_stats=None, input_files=None)
            tasks.append(ReadTask(read, metadata, per_task_row_limit=per_task_row_limit))
        return tasks


def read_dataset(uri: str, *, format: Format = "auto", shuffle: bool = False, seed: int = 0,
                 epoch: int = 0, concurrency: int | None = None, endpoint: str | None = None,
                 region: str | None = None, override_num_blocks: int | None = None,
                 use_manifest: bool = True, check_manifest: bool = False,
                 allow_incomplete: bool = False) -> ray.data.Dataset:
    """A ``ray.data.Dataset`` of the samples of ``uri`` read by bucketload's engine; see
    :class:`BucketloadDatasource`. ``shuffle=True`` visits the permutation of ``(seed, epoch)``
    (each read task a slice of it). ``override_num_blocks`` sets the number of read tasks;
    by default Ray's parallelism, at most one task per ``MIN_SAMPLES_PER_TASK`` samples."""
    source = BucketloadDatasource(uri, format=format, shuffle=shuffle, seed=seed, epoch=epoch,
                                  concurrency=concurrency, endpoint=endpoint, region=region,
                                  tasks=override_num_blocks, use_manifest=use_manifest,
                                  check_manifest=check_manifest,
                                  allow_incomplete=allow_incomplete)
    dataset: ray.data.Dataset = ray.data.read_datasource(
        source, override_num_blocks=override_num_blocks)
    return dataset


@functools.lru_cache(maxsize=8)
def _decoder(pid: int, image_size: int, seed: int, dtype: DType, decode_threads: int | None,
             skip_corrupt: bool, jpeg_decode: JpegDecode,
             transform: tuple[Any, ...]) -> _native.NativeDecoder:
    augment, resize, mean, std, scale, ratio = transform
    return _native.NativeDecoder(
        image_size=image_size, seed=seed, dtype=dtype, decode_threads=decode_threads,
        skip_corrupt=skip_corrupt, jpeg_decode=jpeg_decode,
        transform=Transform(augment=augment, resize=resize, mean=mean, std=std, scale=scale,
                            ratio=ratio))


def decode_batch(batch: dict[str, np.ndarray], *, image_size: int = 224, seed: int = 0,
                 epoch: int = 0, dtype: DType = "float32", decode_threads: int | None = None,
                 skip_corrupt: bool = False, jpeg_decode: JpegDecode = "region",
                 augment: Augment = "train", resize: int | None = None,
                 mean: tuple[float, float, float] = IMAGENET_MEAN,
                 std: tuple[float, float, float] = IMAGENET_STD,
                 scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> dict[str, np.ndarray]:
    """bucketload's native decode and augmentation as a ``map_batches`` function
    (``batch_format="numpy"``): RandomResizedCrop to ``image_size``, flip (``augment="eval"``:
    resize of the shorter side to ``resize``, centre crop), and for ``float32`` normalisation
    with ``mean`` and ``std`` into ``[N, 3, H, W]`` (``uint8``: ``[N, H, W, 3]``).
    Returns ``image``, ``label`` and ``index``; images that fail to decode raise
    ``CorruptDataError`` naming the key, or with ``skip_corrupt=True`` are left out.
    The transform keywords and ``jpeg_decode`` as for :class:`bucketload.Loader`."""
    # Hashable, for the decoder cache.
    transform = (augment, resize, tuple(mean), tuple(std), tuple(scale), tuple(ratio))
    decoder = _decoder(os.getpid(), image_size, seed, dtype, decode_threads, skip_corrupt,
                       jpeg_decode, transform)
    keys = [str(k) for k in batch["key"]] if "key" in batch else None
    images, labels, indices, _skipped = decoder.decode(
        epoch, [bytes(b) for b in batch["image"]], [int(i) for i in batch["index"]],
        [int(label) for label in batch["label"]], keys)
    pixels = _array(images, np.float32 if dtype == "float32" else np.uint8)
    return {
        "image": pixels.reshape(images.shape),
        "label": _array(labels, np.int64),
        "index": _array(indices, np.int64),
    }


def _array(buffer: _native.Buffer, dtype: type[np.generic]) -> np.ndarray:
    """A flat array over the buffer's memory (no copy). numpy's stubs name the buffer
    types they take rather than the buffer protocol, hence the cast."""
    return np.frombuffer(cast("bytes", buffer), dtype=dtype)


@ray.remote
def _shard_part(src: str, dst: str, part: int, parts: int, options: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(_native.shard(src, dst, part=(part, parts), **options))
    return report


def shard(src: str, dst: str, *, parts: int, shard_size: int | None = None,
          samples_per_shard: int | None = None, seed: int | None = None,
          label_from: LabelFrom = "auto",
          md5: bool = False, concurrency: int | None = None, endpoint: str | None = None,
          region: str | None = None, num_cpus: float = 1,
          use_manifest: bool = True) -> dict[str, Any]:
    """``bucketload shard SRC DST --part i/N`` for every ``i`` as Ray tasks, then the merge:
    the same shards and manifest as one ``bucketload shard`` run. A failed part leaves no
    partial shard and no manifest; call again to finish (finished shards are kept).
    ``concurrency``: GETs in flight per task (default: the engine's, as the CLI's ``shard``).
    ``use_manifest=False`` lists the source even when it has a manifest (``--no-manifest``).
    Returns ``{"parts": [report, ...], "merge": report}``."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    options = {"shard_size": shard_size, "samples_per_shard": samples_per_shard, "seed": seed,
               "label_from": label_from, "md5": md5, "concurrency": concurrency,
               "endpoint": endpoint, "region": region, "use_manifest": use_manifest}
    task = _shard_part.options(num_cpus=num_cpus)
    reports = ray.get([task.remote(src, dst, i, parts, options) for i in range(parts)])
    merged = json.loads(_native.merge(dst, endpoint=endpoint, region=region))
    return {"parts": reports, "merge": merged}


__all__ = ["BucketloadDatasource", "decode_batch", "read_dataset", "shard"]
