"""bucketload on Ray: Ray Data reads through bucketload's engine, native decode as a
``map_batches`` function, and sharding fanned out over Ray tasks. Inside a Ray Train worker,
``bucketload.Loader`` takes its rank and world size from ``ray.train.get_context()`` (or from
torch.distributed, which TorchTrainer initialises): nothing to pass.

::

    import ray, bucketload.ray as blr

    # Decoded and augmented inside the read tasks, as ray.data.read_images decodes:
    ds = blr.read_images("s3://bucket/train-shards", format="shards", image_size=224)
    # or the encoded bytes, decoded in a map stage of their own:
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
import logging
import os
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pyarrow as pa
import ray
from ray.data.block import BlockAccessor, BlockMetadata
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


def _read_part(uri: str, settings: dict[str, Any], decode: dict[str, Any] | None, epoch: int,
               part: int, parts: int) -> Iterator[pa.Table]:
    """The rows of slice ``part`` of ``parts`` of the dataset, in blocks: the encoded images,
    or with ``decode`` (``NativeLoader``'s decode keywords) the decoded ones."""
    if decode is not None:
        return _read_part_decoded(uri, settings, decode, epoch, part, parts)
    return _read_part_encoded(uri, settings, epoch, part, parts)


def _read_part_encoded(uri: str, settings: dict[str, Any], epoch: int, part: int,
                       parts: int) -> Iterator[pa.Table]:
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


def _read_part_decoded(uri: str, settings: dict[str, Any], decode: dict[str, Any], epoch: int,
                       part: int, parts: int) -> Iterator[pa.Table]:
    """``_read_part`` with the engine's decode pipeline: fetches and decodes overlap in the
    task, and only the decoded pixels reach Ray's object store."""
    loader = _native.NativeLoader(uri, decode=True, worker=part, num_workers=parts,
                                  batch_size=_ROWS_PER_BLOCK, drop_last=False, **settings,
                                  **decode)
    samples = loader.epoch(epoch)
    dtype = np.float32 if decode["dtype"] == "float32" else np.uint8
    skipped: list[tuple[str, str]] = []
    while True:
        try:
            images, labels, indices, left_out = samples.next_batch()
        except StopIteration:
            break
        skipped.extend(left_out)
        if len(labels) == 0:
            continue
        yield BlockAccessor.batch_to_block({
            "image": _array(images, dtype).reshape(images.shape),
            "label": _array(labels, np.int64),
            "index": _array(indices, np.int64),
        })
    _report_skipped(skipped, f"read_images, read task {part + 1} of {parts}")


_log = logging.getLogger("bucketload.ray")


def _report_skipped(skipped: list[tuple[str, str]], where: str) -> None:
    """``skip_corrupt=True`` leaves images out; say how many and which, in the log of the Ray
    worker that left them out (Ray shows it on the driver unless ``log_to_driver=False``)."""
    if skipped:
        shown = "; ".join(f"{key}: {reason}" for key, reason in skipped[:5])
        more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        _log.warning("bucketload.ray %s: skipped %d corrupt image(s) (skip_corrupt=True): %s%s",
                     where, len(skipped), shown, more)


class BucketloadDatasource(Datasource):
    """A Ray Data datasource over a bucketload dataset (one object per sample, or tar shards
    streamed or indexed). Rows: ``key``, ``label`` (-1 without labels), ``index`` (the
    sample's number in the dataset) and ``image`` (the encoded image bytes); with ``decode``
    (the decode keywords of ``bucketload._native.NativeLoader``), ``image`` (the decoded,
    augmented pixels), ``label`` and ``index``. Each read task reads a disjoint slice with
    bucketload's engine (hundreds of requests in flight); together they cover every sample
    exactly once per epoch.

    Every task opens the dataset: with a manifest (``bucketload manifest`` or ``bucketload
    shard`` wrote one) that is one GET, without one a listing. Tasks therefore get at least
    ``MIN_SAMPLES_PER_TASK`` samples each, unless ``tasks`` fixes their number.
    The n-th execution of a dataset over this source (Ray counts them: each epoch of a Train
    run, each iteration) reads epoch ``epoch + n``. ``use_manifest``, ``check_manifest`` and
    ``allow_incomplete`` as for :class:`bucketload.Loader`."""

    def __init__(self, uri: str, *, format: Format = "auto", shuffle: bool = False, seed: int = 0,
                 epoch: int = 0, concurrency: int | None = None, endpoint: str | None = None,
                 region: str | None = None, tasks: int | None = None, use_manifest: bool = True,
                 check_manifest: bool = False, allow_incomplete: bool = False,
                 decode: dict[str, Any] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if tasks is not None and tasks < 1:
            raise ValueError("tasks must be at least 1")
        self._uri = uri
        self._epoch = epoch
        self._tasks = tasks
        self._decode = decode
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

    def read_tasks(self, parallelism: int) -> int:
        """How many read tasks ``get_read_tasks(parallelism)`` makes."""
        if self._tasks is not None:
            parts = self._tasks
        else:
            parts = min(parallelism, -(-self._samples // MIN_SAMPLES_PER_TASK))
        return max(1, min(parts, self._samples))

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        parts = self.read_tasks(parallelism)
        # Ray counts the executions of a dataset (each epoch of a Train run, each iteration)
        # and its own readers reseed their shuffle with that count; the n-th execution here
        # reads epoch `epoch + n`: its own order and its own crops.
        epoch = self._epoch + int(getattr(data_context, "_execution_idx", 0) or 0)
        base, extra = divmod(self._samples, parts)
        tasks = []
        # With skip_corrupt, how many rows a decoding task yields is known only once it has
        # read them: Ray would otherwise count the left-out images (`count()` said 7 of 6).
        rows_known = not (self._decode and self._decode.get("skip_corrupt"))
        for part in range(parts):
            rows = base + (1 if part < extra else 0) if rows_known else None
            read = functools.partial(_read_part, self._uri, self._settings, self._decode, epoch,
                                     part, parts)
            metadata = BlockMetadata(num_rows=rows, size_bytes=None, exec_stats=None, input_files=None)
            tasks.append(ReadTask(read, metadata, per_task_row_limit=per_task_row_limit))
        return tasks


def _read(source: BucketloadDatasource, override_num_blocks: int | None) -> ray.data.Dataset:
    # Ray cuts each task's output into pieces until it has as many blocks as it asked for
    # tasks (200 by default): 2,000 samples in two tasks became 200 blocks of 10 rows, and
    # every later stage paid Ray's per-block work 200 times (raw reads 23-32% slower, decoded
    # 14-20%). Asking for exactly the tasks the source makes leaves its blocks whole.
    if override_num_blocks is None:
        override_num_blocks = source.read_tasks(
            ray.data.DataContext.get_current().read_op_min_num_blocks)
    dataset: ray.data.Dataset = ray.data.read_datasource(
        source, override_num_blocks=override_num_blocks)
    return dataset


def read_dataset(uri: str, *, format: Format = "auto", shuffle: bool = False, seed: int = 0,
                 epoch: int = 0, concurrency: int | None = None, endpoint: str | None = None,
                 region: str | None = None, override_num_blocks: int | None = None,
                 use_manifest: bool = True, check_manifest: bool = False,
                 allow_incomplete: bool = False) -> ray.data.Dataset:
    """A ``ray.data.Dataset`` of the samples of ``uri`` read by bucketload's engine; see
    :class:`BucketloadDatasource`. ``shuffle=True`` visits the permutation of ``(seed, epoch)``
    (each read task a slice of it; each further execution of the dataset the next epoch's).
    ``override_num_blocks`` sets the number of read tasks; by default Ray's parallelism, at
    most one task per ``MIN_SAMPLES_PER_TASK`` samples."""
    source = BucketloadDatasource(uri, format=format, shuffle=shuffle, seed=seed, epoch=epoch,
                                  concurrency=concurrency, endpoint=endpoint, region=region,
                                  tasks=override_num_blocks, use_manifest=use_manifest,
                                  check_manifest=check_manifest,
                                  allow_incomplete=allow_incomplete)
    return _read(source, override_num_blocks)


def read_images(uri: str, *, image_size: int = 224, dtype: DType = "float32",
                format: Format = "auto", shuffle: bool = False, seed: int = 0, epoch: int = 0,
                augment: Augment = "train", resize: int | None = None,
                mean: tuple[float, float, float] = IMAGENET_MEAN,
                std: tuple[float, float, float] = IMAGENET_STD,
                scale: tuple[float, float] = (0.08, 1.0),
                ratio: tuple[float, float] = (3 / 4, 4 / 3),
                jpeg_decode: JpegDecode = "region", skip_corrupt: bool = False,
                decode_threads: int | None = None, concurrency: int | None = None,
                endpoint: str | None = None, region: str | None = None,
                override_num_blocks: int | None = None, use_manifest: bool = True,
                check_manifest: bool = False, allow_incomplete: bool = False) -> ray.data.Dataset:
    """A ``ray.data.Dataset`` of the images of ``uri``, decoded and augmented inside the read
    tasks, as ``ray.data.read_images`` decodes in its own: in each task bucketload's engine
    fetches and ``decode_threads`` native threads (default: the cores) decode at once, and only
    the pixels go through Ray's object store. Rows: ``image`` (``float32`` ``[3, H, W]``
    normalised with ``mean`` and ``std``, or ``uint8`` ``[H, W, 3]``), ``label`` (-1 without
    labels) and ``index``. Each image's crop is the one ``decode_batch`` makes for the same
    ``seed``, ``epoch`` and ``index``; the epoch's order and the read tasks as for
    :func:`read_dataset`. An image that fails to decode raises ``CorruptDataError`` naming its
    key; with ``skip_corrupt=True`` it is left out, and each read task logs how many it left
    out and which. The transform keywords and ``jpeg_decode`` as for :class:`bucketload.Loader`."""
    decode = {
        "image_size": image_size, "dtype": dtype, "jpeg_decode": jpeg_decode,
        "skip_corrupt": skip_corrupt, "decode_threads": decode_threads,
        "transform": Transform(augment=augment, resize=resize, mean=mean, std=std, scale=scale,
                               ratio=ratio),
    }
    source = BucketloadDatasource(uri, format=format, shuffle=shuffle, seed=seed, epoch=epoch,
                                  concurrency=concurrency, endpoint=endpoint, region=region,
                                  tasks=override_num_blocks, use_manifest=use_manifest,
                                  check_manifest=check_manifest,
                                  allow_incomplete=allow_incomplete, decode=decode)
    return _read(source, override_num_blocks)


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
    images, labels, indices, skipped = decoder.decode(
        epoch, [bytes(b) for b in batch["image"]], [int(i) for i in batch["index"]],
        [int(label) for label in batch["label"]], keys)
    _report_skipped(skipped, "decode_batch")
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


__all__ = ["BucketloadDatasource", "decode_batch", "read_dataset", "read_images", "shard"]
