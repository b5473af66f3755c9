"""What the cache benchmark's readers share (scripts/bench-peers.sh): the command line, the
dataset's facts from an independent listing (boto3), the PIL + torchvision decode of the peers,
and the measurement of one epoch: time to first batch, samples/s, a check that every sample was
read exactly once (and for raw reads, that the bytes add up to the dataset's), and one JSON
line per measurement.

Imported by bucketload_cache.py (.venv-bench) and streaming_cache.py (.venv-peers), with
boto3, torch, torchvision and PIL: imported here, before any clock starts, and inherited by
forked DataLoader workers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import boto3
import torch
from botocore.config import Config
from PIL import Image
from torchvision.transforms import v2

# The bytes of a dataset's images are compared against these extensions' objects only.
IMAGE_EXTENSIONS = (".jpg", ".jpeg")


def parse_args(doc: str, tools: list[str], caches: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", choices=tools, default=tools[0])
    if caches:
        ap.add_argument("--cache", choices=caches, default=caches[-1],
                        help=f"which epochs to measure [default: {caches[-1]}]")
    ap.add_argument("--mode", choices=["raw", "decoded"], required=True,
                    help="raw: bytes + label per sample; decoded: JPEG decode, RandomResizedCrop "
                         "224, flip, normalise")
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"),
                    help="S3 endpoint, e.g. http://127.0.0.1:9000 [env: AWS_ENDPOINT_URL]")
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    ap.add_argument("--source", default="s3://bench/files",
                    help="the one-object-per-sample dataset the shards were made from: its listing "
                         "gives the expected sample count and bytes [default: s3://bench/files]")
    ap.add_argument("--uri", required=True, help="the tool's shards, e.g. s3://bench/mds")
    ap.add_argument("--cache-dir", required=True,
                    help="the tool's local cache directory (emptied first)")
    ap.add_argument("--cache-limit", type=int, default=None,
                    help="the cache's bound in bytes (bucketload cache_size, MosaicML Streaming "
                         "cache_limit, LitData max_cache_size) [default: the tool's default]")
    ap.add_argument("--workers", type=int, default=None,
                    help="DataLoader worker processes (peers) [default: the best on 2 cores]")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--label", default="",
                    help="free text copied into every JSON line (the latency)")
    ap.add_argument("--run", type=int, default=1, help="repeat number, copied into every JSON line")
    args = ap.parse_args()
    if not args.endpoint:
        ap.error("no endpoint: pass --endpoint or set AWS_ENDPOINT_URL")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if var not in os.environ:
            ap.error(f"{var} is not set")
    return args


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/prefix` as (bucket, "prefix/"), the prefix empty for a whole bucket."""
    if not uri.startswith("s3://"):
        raise SystemExit(f"{uri}: not an s3:// URI")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def s3_client(endpoint: str, region: str) -> Any:
    """boto3 against the endpoint, path-style (a loopback endpoint has no per-bucket hosts)."""
    return boto3.client("s3", endpoint_url=endpoint, region_name=region,
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))


@dataclass
class Source:
    """The one-object-per-sample dataset: images in listing order, labels from class folders."""

    keys: list[str]
    sizes: list[int]
    labels: list[int]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)


def list_source(client: Any, uri: str) -> Source:
    bucket, prefix = split_uri(uri)
    found: list[tuple[str, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found += [(obj["Key"], obj["Size"]) for obj in page.get("Contents", [])
                  if obj["Key"].lower().endswith(IMAGE_EXTENSIONS)]
    found.sort()
    if not found:
        raise SystemExit(f"{uri}: no images")
    folders = sorted({PurePosixPath(key).parent.name for key, _ in found})
    return Source(keys=[key for key, _ in found], sizes=[size for _, size in found],
                  labels=[folders.index(PurePosixPath(key).parent.name) for key, _ in found])


def cache_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass  # a download's temporary file, renamed since the listing
    return total


class Decode:
    """PIL decode + torchvision.transforms.v2: RandomResizedCrop(224), flip, normalise (ImageNet).
    Picklable for DataLoader workers."""

    def __init__(self, size: int = 224) -> None:
        self.transform = v2.Compose([
            v2.ToImage(), v2.RandomResizedCrop(size), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])

    def __call__(self, data: bytes) -> torch.Tensor:
        with Image.open(io.BytesIO(data)) as image:
            image_tensor: torch.Tensor = self.transform(image.convert("RGB"))
            return image_tensor


@dataclass
class Batch:
    """What the measurement needs of one batch: the samples' indices in the source's listing
    order, their labels, their images' bytes (raw reads) and, decoded, the images' shape."""

    indices: list[int]
    labels: list[int]
    nbytes: int = 0
    shape: tuple[int, ...] | None = None


class Measurement:
    """One epoch of one tool: call `started()` before the loader is built (cold) or iterated
    (warm), `batch()` on each batch, then `report()`."""

    def __init__(self, args: argparse.Namespace, source: Source, tool: str, cache: str,
                 workers: int | None, cache_dir: str | None) -> None:
        self.args, self.source, self.tool, self.cache = args, source, tool, cache
        self.workers, self.cache_dir = workers, cache_dir
        self.start = time.monotonic()
        self.first: float | None = None
        self.seen = [0] * len(source.keys)
        self.nbytes = 0
        self.samples = 0

    def run(self, batches: Iterable[Batch]) -> dict[str, Any]:
        for batch in batches:
            if self.first is None:
                self.first = time.monotonic() - self.start
            self.samples += len(batch.indices)
            self.nbytes += batch.nbytes
            for i, label in zip(batch.indices, batch.labels, strict=True):
                self.seen[i] += 1
                if label != self.source.labels[i]:
                    raise SystemExit(f"{self.tool}: sample {i} ({self.source.keys[i]}) has label "
                                     f"{label}, its folder says {self.source.labels[i]}")
            if self.args.mode == "decoded" and batch.shape != (len(batch.indices), 3, 224, 224):
                raise SystemExit(f"{self.tool}: a decoded batch of shape {batch.shape}")
        return self.report()

    def report(self) -> dict[str, Any]:
        seconds = time.monotonic() - self.start
        expected = len(self.source.keys)
        missing = sum(1 for n in self.seen if n == 0)
        repeated = sum(1 for n in self.seen if n > 1)
        if self.samples != expected or missing or repeated:
            raise SystemExit(f"{self.tool} {self.args.mode} {self.cache}: read {self.samples} "
                             f"samples of {expected} ({missing} never, {repeated} more than once)")
        if self.args.mode == "raw" and self.nbytes != self.source.total_bytes:
            raise SystemExit(f"{self.tool} raw {self.cache}: read {self.nbytes} image bytes, the "
                             f"dataset holds {self.source.total_bytes}")
        line = {
            "tool": self.tool, "mode": self.args.mode, "cache": self.cache,
            "latency": self.args.label, "run": self.args.run, "samples": self.samples,
            "bytes": self.nbytes if self.args.mode == "raw" else None,
            "seconds": round(seconds, 3), "samples_per_s": round(self.samples / seconds, 1),
            "first_batch_s": round(self.first or 0.0, 3),
            "cache_bytes": None if self.cache_dir is None else cache_bytes(self.cache_dir),
            "workers": self.workers, "batch_size": self.args.batch_size, "uri": self.args.uri,
        }
        print(json.dumps(line), flush=True)
        return line


def empty_dir(path: str) -> str:
    """`path` made anew, empty: a cold cache."""
    import shutil
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path
