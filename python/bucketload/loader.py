"""``bucketload.Loader``: batches of decoded, augmented images from object storage, or of raw
samples for the user's own transform."""

from __future__ import annotations

import json
import math
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from . import _env, _native
from ._epochs import Epochs
from ._types import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Augment,
    Batch,
    DType,
    Format,
    IndexedBatch,
    JpegDecode,
    Transform,
)
from ._util import parse_size
from .errors import ConfigError

try:
    import torch
except ImportError:  # the loader also works without torch: batches are buffers then
    torch = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from torch.utils.data import IterableDataset

    _Base = IterableDataset[Batch | IndexedBatch]
elif torch is not None:
    from torch.utils.data import IterableDataset as _Base
else:
    _Base = object


def _tensor(buffer: Any, dtype: Any) -> Any:
    """A tensor over the buffer's memory (no copy), shaped like it."""
    if torch is None:
        return buffer
    if buffer.nbytes == 0:
        return torch.empty(tuple(buffer.shape), dtype=dtype)
    return torch.frombuffer(buffer, dtype=dtype).view(tuple(buffer.shape))


class Loader(_Base):
    """Batches of images from a dataset in object storage, decoded and augmented natively.

    ``uri`` is a dataset root: one object per sample (``s3://bucket/train`` with class
    folders), or tar shards (with a bucketload manifest, or indexed, or plain tar). A
    bucketload manifest, when there is one, replaces the listing: objects added since it was
    written are not read, and one it lists that is gone fails the epoch with a
    :class:`NotFoundError` saying the manifest is stale. ``check_manifest=True`` lists the
    dataset once when the loader opens and raises :class:`CorruptDataError` naming what was
    added, removed or resized; ``use_manifest=False`` ignores the manifest (the dataset is
    listed, as one without a manifest). Both messages give the command that refreshes it.
    A dataset whose ``bucketload shard`` run never finished (its run record
    ``_bucketload/run.json`` without a manifest: shards are missing) raises
    :class:`ConfigError` naming the record and how many shards and samples are missing;
    ``allow_incomplete=True`` reads the shards that are there, with a warning in the log.
    With ``cache_dir``, streamed shards (which manifests list without an ETag) are checked
    against the store at every epoch, one ``HEAD`` per shard, so a shard rewritten in place is
    read anew; ``metadata_ttl`` (seconds, or ``"indefinite"``) trusts a shard's version that long
    once asked, for datasets that never change in place: a warm epoch then sends no request,
    and a shard replaced within the time is read as the version first read (or, for a block not
    cached, fails naming it). Each process keeps what it asked: DataLoader workers made anew each
    epoch ask again, persistent workers do not. ``index_cache`` (bytes: an int or a size such as
    ``"64MiB"``; default 128 MiB) bounds the shard indexes an indexed loader holds, least
    recently used out first; the index in use is kept whatever the bound.
    Iterating yields :class:`Batch` tuples ``(images, labels)``: ``images`` a ``float32`` tensor ``[N, 3, H, W]``
    normalised with ``mean`` and ``std`` (``dtype="float32"``) or a ``uint8`` tensor
    ``[N, 3, H, W]`` in ``torch.channels_last`` memory format (``dtype="uint8"``: the pixels
    as decoded, stored HWC), ``labels`` an ``int64`` tensor ``[N]`` (-1 when the
    dataset has no labels). The tensors share the memory bucketload wrote (no copy). With
    ``return_indices=True`` the batches are :class:`IndexedBatch` tuples, whose third tensor
    holds each image's sample index in the dataset (the object's position in key order; for
    shards ``shard << 32 | sample``).

    ``augment="train"`` (the default): each image is decoded, cropped with torchvision's
    ``RandomResizedCrop(image_size, scale, ratio)`` sampling, flipped with probability 0.5 and
    normalised, on ``decode_threads`` threads (default: the cores available). The
    augmentation of a sample depends only on ``(seed, epoch, sample)``. ``augment="eval"``,
    for validation: torchvision's ``Resize(resize)`` (the shorter side, antialiased as on PIL
    images; ``resize`` defaults to ``round(image_size / 0.875)``, 256 for 224) then
    ``CenterCrop(image_size)``, no flip, the same pixels every epoch; pair it with
    ``shuffle=False``. ``mean`` and ``std`` (ImageNet's by default) normalise ``float32``
    batches; ``uint8`` batches are not normalised. A transform keyword that does not apply
    (``resize`` with ``"train"``, ``scale``/``ratio`` with ``"eval"``, ``mean``/``std`` with
    ``uint8``) raises :class:`ConfigError`. JPEGs are decoded
    only where the crop box needs pixels (``jpeg_decode="region"``: the same pixels as PIL +
    torchvision); ``"region-scaled"`` also decodes at 1/2, 1/4 or 1/8 size when the box is
    that many times ``image_size`` (faster on large pictures, slightly different pixels);
    ``"whole"`` decodes every pixel.

    Mixing: ``uri`` may be a list of dataset roots, read as one weighted mixture. Each sample
    comes from dataset ``i`` with proportion ``weights[i]`` (normalised by their sum; default
    equal), in blocks of at least 128 samples that hold exactly those proportions, shuffled
    from ``(seed, epoch)``. Each dataset keeps its own epochs: a small one starts its next
    epoch (a new permutation) while a large one keeps streaming. An epoch of the mixture is
    ``samples_per_epoch`` samples over all ranks (default: the datasets' sizes added). With
    ``return_indices=True``, ``indices >> 56`` is the dataset of each image and
    ``indices & (2**56 - 1)`` its index in that dataset. All datasets must hold images.

    Partitioning: ``rank``/``world_size`` given win; else the torch.distributed process group
    initialised where the loader is built (or pickled for spawned DataLoader workers), else
    ``RANK`` and ``WORLD_SIZE``, else Ray Train's context; a process that cannot tell its rank
    raises :class:`ConfigError` (docs/PYTHON.md). Every rank gets the same number of samples
    (padded by repeating samples, or with ``drop_last=True`` trimmed; ``drop_last`` also
    drops a short last batch). For evaluation, ``pad=False`` reads every sample exactly once
    over all ranks: ranks then differ by at most one sample (and one batch), so sum metrics
    and all-reduce them, or wrap the loop in ``torch.distributed.algorithms.Join``. Inside a
    ``DataLoader`` worker (use ``batch_size=None`` there) each worker reads its own disjoint
    part of the rank's samples.

    Any data (``decode=False``): the raw-samples mode. Each batch is then a list of exactly
    ``batch_size`` samples (the last one shorter unless ``drop_last``), each a dict in
    WebDataset's convention: ``"__key__"`` (the sample's key: the object key, or the shard
    sample's WebDataset key), ``"__index__"`` (its sample index, as ``return_indices`` gives it),
    ``"__label__"`` (``int``, or ``None`` when the dataset has no labels) and one entry per member
    by extension (``"jpg"``, ``"txt"``, ``"npy"``, ``"cls"``…; a one-object-per-sample dataset's
    object under its own extension) holding a read-only ``Buffer`` over the bytes bucketload read
    (no copy: ``bytes(m)``, ``io.BytesIO(m)``, ``str(m, "utf-8")``, ``numpy.frombuffer(m)``; it
    pickles as ``bytes``). ``transform(sample)`` runs on each sample and ``collate_fn(list)`` on
    each batch, in the iterating process: in parallel through ``DataLoader(loader,
    batch_size=None, num_workers=N)``, each worker on its own part. Under the ``spawn`` start
    method they are pickled: use module-level functions, not lambdas or closures. Cache,
    shuffle, partitioning, mixing and ``state_dict`` work as for images. ``decode_members``
    (e.g. ``("jpg",)``) names members decoded and augmented natively as the image mode does
    (same pixels for the same sample, epoch and image settings: ``augment`` and its keywords,
    ``image_size``, ``dtype``, ``jpeg_decode``; every sample must have them): each becomes a
    ``[3, H, W]`` view of the batch's tensor for ``transform``/``collate_fn``, and without
    either the batch is a dict of columns: ``batch["jpg"]`` the ``[N, 3, H, W]`` tensor, every
    other key a list (``batch["txt"]``, ``batch["__key__"]``…).

    The order is a fresh permutation per epoch from ``seed`` (``shuffle=False``: dataset
    order). Each iteration reads the next epoch, also through DataLoader workers that are
    made anew every epoch; :meth:`set_epoch` chooses one. :meth:`state_dict` /
    :meth:`load_state_dict` resume mid-epoch with no sample repeated or skipped (through
    DataLoader workers: torchdata's ``StatefulDataLoader``), also at another world size: save
    rank 0's ``state_dict()`` and load it on every rank of the new job (without DataLoader
    workers; padding aside, docs/PYTHON.md). Waiting for a batch releases the GIL. The loader can
    be pickled (for spawned DataLoader workers) and is safe to use after a fork: connections
    and threads are opened again in each process.
    """

    def __init__(
        self,
        uri: str | Sequence[str],
        *,
        weights: Sequence[float] | None = None,
        samples_per_epoch: int | None = None,
        format: Format = "auto",
        batch_size: int = 64,
        image_size: int = 224,
        shuffle: bool = True,
        seed: int = 0,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int | str | None = None,
        concurrency: int | None = None,
        decode_threads: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        pad: bool = True,
        dtype: DType = "float32",
        skip_corrupt: bool = False,
        shuffle_buffer: int | None = None,
        endpoint: str | None = None,
        region: str | None = None,
        return_indices: bool = False,
        jpeg_decode: JpegDecode = "region",
        augment: Augment = "train",
        resize: int | None = None,
        mean: tuple[float, float, float] = IMAGENET_MEAN,
        std: tuple[float, float, float] = IMAGENET_STD,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        use_manifest: bool = True,
        check_manifest: bool = False,
        allow_incomplete: bool = False,
        decode: bool = True,
        decode_members: Sequence[str] = (),
        metadata_ttl: float | Literal["indefinite"] | None = None,
        index_cache: int | str | None = None,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        if (rank is None) != (world_size is None):
            raise ConfigError("give both rank and world_size, or neither")
        if dtype not in ("float32", "uint8"):
            raise ConfigError(f"dtype {dtype!r} is not 'float32' or 'uint8'")
        if decode and (transform is not None or collate_fn is not None):
            raise ConfigError("transform= and collate_fn= run on raw samples: pass decode=False "
                              "(decoded batches are tensors: transform them in your loop)")
        if not decode and (return_indices or skip_corrupt):
            raise ConfigError("with decode=False each sample holds its index (\"__index__\") "
                              "and nothing is decoded: leave out return_indices and skip_corrupt")
        if decode_members and (decode or torch is None):
            raise ConfigError("decode_members= decodes members of raw samples into tensors: "
                              "pass decode=False, with torch installed")
        if drop_last and not pad:
            raise ConfigError("pad=False reads every sample exactly once and drop_last=True "
                              "leaves some out; pass one of them")
        if augment not in ("train", "eval"):
            raise ConfigError(f"augment {augment!r} is not 'train' or 'eval'")
        ttl = _metadata_ttl(metadata_ttl)
        self._settings: dict[str, Any] = {
            "format": format, "batch_size": batch_size, "image_size": image_size,
            "shuffle": shuffle, "seed": seed,
            "cache_dir": None if cache_dir is None else os.fspath(cache_dir),
            "cache_size": (
                _native.DEFAULT_CACHE_SIZE if cache_size is None else parse_size(cache_size)
            ), "concurrency": concurrency,
            "decode_threads": decode_threads, "drop_last": drop_last, "pad": pad, "dtype": dtype,
            "skip_corrupt": skip_corrupt, "shuffle_buffer": shuffle_buffer,
            "endpoint": endpoint, "region": region, "jpeg_decode": jpeg_decode,
            "transform": Transform(augment=augment, resize=resize, mean=mean, std=std,
                                   scale=scale, ratio=ratio),
            "use_manifest": use_manifest, "check_manifest": check_manifest,
            "allow_incomplete": allow_incomplete,
            "weights": None if weights is None else [float(w) for w in weights],
            "samples_per_epoch": samples_per_epoch, "decode_members": list(decode_members),
            "metadata_ttl": ttl,
            "index_cache": _index_cache(index_cache),
        }
        self.uri: str | list[str] = uri if isinstance(uri, str) else list(uri)
        self._return_indices = return_indices
        self._decode = decode
        self._transform = transform
        self._collate_fn = collate_fn
        self._rank = rank
        self._world_size = world_size
        # The process group of the process building the loader: DataLoader workers never
        # have torch.distributed initialised, so they use this.
        self._group = _env.captured() if rank is None else None
        self._epochs = Epochs()
        self._resume: str | None = None
        self._native: _native.NativeLoader | None = None
        self._native_for: tuple[int, int, int] | None = None
        self._current: _native.NativeEpoch | None = None
        # A DataLoader worker's part of its last epoch, read to the end: (epoch, state).
        self._finished: tuple[int, str] | None = None
        self.skipped: list[tuple[str, str]] = []
        """``(key, reason)`` of every image left out with ``skip_corrupt=True``."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_native"] = None
        state["_native_for"] = None
        state["_current"] = None
        state["_finished"] = None
        for name in ("transform", "collate_fn"):
            _check_pickles(name, state[f"_{name}"])
        if self._rank is None and self._group is None:
            # Pickled for spawned DataLoader workers after init_process_group.
            state["_group"] = _env.captured()
        return state

    def _placement(self) -> tuple[int, int, int, int]:
        if self._rank is not None and self._world_size is not None:
            rank, world = self._rank, self._world_size
        elif self._group is not None:
            rank, world = self._group
        else:
            rank, world = _env.distributed()
        worker, workers = _env.worker()
        return rank, world, worker, workers

    def _open(self) -> _native.NativeLoader:
        rank, world, worker, workers = self._placement()
        key = (os.getpid(), worker, workers)
        if self._native is None or self._native_for != key:
            self._native = _native.NativeLoader(
                self.uri, rank=rank, world_size=world, worker=worker, num_workers=workers,
                decode=self._decode, **self._settings,
            )
            self._native_for = key
        return self._native

    def __len__(self) -> int:
        """Batches per epoch for this rank (and DataLoader worker)."""
        return self._open().batches_per_epoch()

    def decode_stats(self) -> dict[str, float] | None:
        """This process's image pipeline so far: ``images`` decoded, ``skipped``,
        ``decode_s`` and ``augment_s`` (thread time) and ``buffers_allocated`` (batch
        buffers made new because no batch had been freed for reuse: a loop that keeps every
        batch makes one per batch, one that lets them go a handful in all). ``None`` when the
        loader does not decode or this process has not read (DataLoader workers count in
        their own processes)."""
        if self._native is None:
            return None
        return self._native.decode_stats()

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads (also when DataLoader workers iterate)."""
        return self._epochs.next()

    def set_epoch(self, epoch: int) -> None:
        """Reads epoch ``epoch`` next (a new permutation and new augmentations), in this
        process and in DataLoader workers, persistent or not."""
        self._epochs.set(epoch)
        self._resume = None

    def __iter__(self) -> Iterator[Any]:
        """Starts the next epoch (each iteration reads a new one, also when it is left before
        the end) and returns its batches."""
        native = self._open()
        epoch = native.epoch(self._epochs.begin(), self._resume)
        self._resume = None
        self._current = epoch
        self._finished = None
        if not self._decode:
            return self._samples(epoch)
        return self._batches(epoch)

    def _samples(self, epoch: _native.NativeEpoch) -> Iterator[Any]:
        size = self._settings["batch_size"]
        while True:
            samples: list[Any]
            samples, decoded = epoch.next_sample_batch(size)
            if not samples or (len(samples) < size and self._settings["drop_last"]):
                break
            images = {ext: self._images(buffer) for ext, buffer in decoded.items()}
            if images and self._transform is None and self._collate_fn is None:
                yield _columns(samples, images)
                continue
            for ext, batch in images.items():
                for sample, image in zip(samples, batch, strict=True):
                    sample[ext] = image
            if self._transform is not None:
                samples = [self._transform(sample) for sample in samples]
            yield samples if self._collate_fn is None else self._collate_fn(samples)
        self._epoch_done(epoch)

    def _epoch_done(self, epoch: _native.NativeEpoch) -> None:
        if self._current is epoch:
            self._finished = (epoch.epoch, epoch.state())
            self._current = None
        self._epochs.end()

    def _images(self, buffer: Any) -> Any:
        """A batch's images as an ``[N, 3, H, W]`` tensor over the buffer (``uint8``:
        channels_last); the buffer itself without torch."""
        if torch is None:
            return buffer
        uint8 = self._settings["dtype"] == "uint8"
        images = _tensor(buffer, torch.uint8 if uint8 else torch.float32)
        # uint8: an NCHW view of NHWC memory (channels_last).
        return images.permute(0, 3, 1, 2) if uint8 else images

    def _batches(self, epoch: _native.NativeEpoch) -> Iterator[Batch | IndexedBatch]:
        while True:
            try:
                images, labels, _indices, skipped = epoch.next_batch()
            except StopIteration:
                break
            self.skipped.extend(skipped)
            if len(labels) == 0:
                continue
            int64 = torch.int64 if torch is not None else None
            images = self._images(images)
            if self._return_indices:
                yield IndexedBatch(images, _tensor(labels, int64), _tensor(_indices, int64))
            else:
                yield Batch(images, _tensor(labels, int64))
        self._epoch_done(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: restore it with :meth:`load_state_dict` (also in a new
        process) to continue with the next batch.

        Through DataLoader workers, use torchdata's ``StatefulDataLoader``: its
        ``state_dict()`` holds each worker's state (taken from this method in the worker,
        with the batches it had handed out). Called in the process that built the loader while
        plain DataLoader workers are reading it, this raises :class:`ConfigError`: only the
        workers know where they stand, and the DataLoader has read ahead of your batches."""
        if self._current is not None:
            return {"epoch": self._current.epoch, "state": self._current.state()}
        if _env.in_worker() and self._finished is not None:
            # This worker read its part to the end; the other workers may not have.
            return {"epoch": self._finished[0], "state": self._finished[1]}
        if self._epochs.workers_busy():
            raise ConfigError(
                "Loader.state_dict(): DataLoader workers are reading this loader and only they "
                "know where they stand (the DataLoader also reads ahead of the batches you "
                "received); use torchdata.stateful_dataloader.StatefulDataLoader and its "
                "state_dict(), which holds each worker's position, or take the state at the "
                "end of an epoch")
        return {"epoch": self._epochs.next(), "state": self._resume}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from a :meth:`state_dict`: the next iteration starts after the last
        batch that was handed out when it was taken. A state that is not one (a missing or
        unknown key, a wrong type, a negative epoch) or that another dataset, order, rank or
        worker count saved raises :class:`ConfigError` naming what is wrong, and changes
        nothing."""
        epoch, resume = _checked_state(state)
        if resume is not None:
            self._open().check_state(resume)
        self._epochs.set(epoch)
        self._resume = resume
        self._current = None
        self._finished = None


def _checked_state(state: Any) -> tuple[int, str | None]:
    """``(epoch, engine state)`` of a :meth:`Loader.state_dict`, or :class:`ConfigError`
    naming what is wrong with it."""
    what = "Loader.load_state_dict(): not a Loader.state_dict()"
    if not isinstance(state, dict):
        raise ConfigError(f"{what}: a {type(state).__name__}, not a dict with 'epoch' and "
                          "'state'")
    missing = [key for key in ("epoch", "state") if key not in state]
    unknown = sorted(str(key) for key in state if key not in ("epoch", "state"))
    if missing or unknown:
        problems = [f"no {key!r}" for key in missing] + [f"unknown key {k!r}" for k in unknown]
        raise ConfigError(f"{what}: {', '.join(problems)} (it holds 'epoch' and 'state')")
    epoch, resume = state["epoch"], state["state"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ConfigError(f"{what}: 'epoch' is {epoch!r}, not an epoch number (an int >= 0)")
    if resume is not None and not isinstance(resume, str):
        raise ConfigError(f"{what}: 'state' is a {type(resume).__name__}, not the loader's "
                          "state (a str) or None")
    if resume is not None:
        try:
            inner = json.loads(resume)
        except ValueError as e:
            raise ConfigError(f"{what}: 'state' is not the loader's state ({e})") from e
        inner_epoch = inner.get("epoch") if isinstance(inner, dict) else None
        if inner_epoch != epoch:
            raise ConfigError(f"{what}: 'epoch' is {epoch} but 'state' was taken in epoch "
                              f"{inner_epoch}")
    return epoch, resume


def _columns(samples: list[dict[str, Any]], images: dict[str, Any]) -> dict[str, Any]:
    """A batch of raw samples as columns: each decoded member's ``[N, 3, H, W]`` tensor, and a
    list per other key (``None`` where a sample lacks it)."""
    keys = dict.fromkeys(key for sample in samples for key in sample)
    return {key: images[key] if key in images else [s.get(key) for s in samples] for key in keys}


def _index_cache(size: int | str | None) -> int:
    if size is None:
        return _native.DEFAULT_INDEX_CACHE
    try:
        return parse_size(size)
    except ValueError as e:
        raise ConfigError(f"index_cache={size!r} is not a size in bytes ({e}): give an int "
                          "or a size such as \"64MiB\"") from None


def _metadata_ttl(ttl: float | str | None) -> float:
    """Seconds for the native loader: 0 when not given, ``math.inf`` for ``"indefinite"``."""
    if ttl is None:
        return 0.0
    if ttl == "indefinite":
        return math.inf
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0:
        raise ConfigError(f"metadata_ttl={ttl!r} is not a number of seconds >= 0 or "
                          "'indefinite'")
    return float(ttl)


def _check_pickles(name: str, function: Callable[..., Any] | None) -> None:
    """Raises :class:`ConfigError` naming ``name`` when ``function`` cannot be pickled (to start
    a spawned DataLoader worker, or to send the loader to another process)."""
    if function is None:
        return
    try:
        pickle.dumps(function)
    except Exception as e:
        raise ConfigError(
            f"{name}={function!r} cannot be pickled ({e}), which a spawned DataLoader worker "
            "(or any other process) needs: define it at module level, or use the 'fork' start "
            "method") from e
