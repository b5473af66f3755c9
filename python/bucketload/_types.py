"""The types of the package's options and results, shared by the Python layer and the
native module's stubs (``_native.pyi``)."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, TypedDict

#: ImageNet's channel means (R, G, B) of pixels scaled to [0, 1]: the default ``mean``.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
#: ImageNet's channel standard deviations (R, G, B): the default ``std``.
IMAGENET_STD = (0.229, 0.224, 0.225)

#: How a dataset is laid out: one object per sample (``"files"``), tar shards read in sequence
#: (``"shards"``) or by their indexes (``"indexed"``); ``"auto"`` finds out.
Format = Literal["auto", "files", "shards", "indexed"]
#: The pixels of a batch: normalised ``float32`` NCHW (``mean``, ``std``), or ``uint8`` as decoded
#: (NHWC).
DType = Literal["float32", "uint8"]
#: What ``S3IterableDataset`` yields: a reader per object (``"objects"``, or its engine name
#: ``"files"``), or a ``Sample`` per sample of a tar-shard dataset (the other formats).
DatasetFormat = Literal["objects", "files", "auto", "shards", "indexed"]
#: The transform of each image: training's random crop and flip (``"train"``), or evaluation's
#: resize of the shorter side and centre crop (``"eval"``).
Augment = Literal["train", "eval"]
#: How JPEGs are decoded: the crop box's pixels only (``"region"``), also at a reduced DCT
#: scale (``"region-scaled"``), or every pixel (``"whole"``).
JpegDecode = Literal["region", "region-scaled", "whole"]
#: Where ``shard`` takes labels from: the class folder when there is one (``"auto"``), always
#: the folder (``"folder"``), or nowhere (``"none"``).
LabelFrom = Literal["auto", "folder", "none"]


class Batch(NamedTuple):
    """What iterating a :class:`bucketload.Loader` yields: ``images, labels = batch``."""

    #: ``[N, 3, H, W]`` tensor (a ``Buffer`` without torch).
    images: Any
    #: ``[N]`` ``int64`` tensor; -1 for samples without a label.
    labels: Any


class IndexedBatch(NamedTuple):
    """A batch of a :class:`bucketload.Loader` made with ``return_indices=True``:
    ``images, labels, indices = batch``."""

    #: ``[N, 3, H, W]`` tensor (a ``Buffer`` without torch).
    images: Any
    #: ``[N]`` ``int64`` tensor; -1 for samples without a label.
    labels: Any
    #: ``[N]`` ``int64`` tensor: each image's sample index in the dataset.
    indices: Any


class Transform(TypedDict):
    """The transform of decoded images, as ``bucketload.Loader`` and
    ``bucketload.ray.decode_batch`` hand it to the native module; see their keywords."""

    augment: Augment
    resize: int | None
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    scale: tuple[float, float]
    ratio: tuple[float, float]


class Saved(TypedDict):
    """A checkpoint that became visible: what ``save``, ``Writer.close`` and
    ``SaveHandle.wait`` return."""

    name: str
    uri: str
    bytes: int
    seconds: float
