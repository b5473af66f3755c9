"""Peer of `bucketload bench`: the classic PyTorch training benchmark (a DataLoader feeding a
model mock that "computes" for a fixed time per batch), reading the same dataset through a peer
loader, and writing a log with the same keys as `bucketload bench`, so `bucketload report` draws
both in the same charts.

Loaders (`--loader`):
  s3map    the Amazon S3 Connector for PyTorch, `S3MapDataset.from_prefix` over one object per
           sample, shuffled (files);
  s3iter   the connector's `S3IterableDataset.from_prefix(enable_sharding=True)` over tar shards,
           grouped into samples by WebDataset's tar iterator (shards);
  boto3    boto3 `get_object` per sample in a map-style dataset, one client per worker (files);
  wds      WebDataset alone, as its documentation reads S3: `wds.WebDataset` over
           `pipe:curl -s URL` for each shard (presigned with boto3), split across workers
           (shards).

Each sample is decoded with PIL and transformed as the reference pipeline does with
torchvision.transforms.v2 (ToImage, ToDtype(uint8), RandomResizedCrop(224, antialias=False),
ToDtype(float32), Normalize(ImageNet)), and batched by the DataLoader; `--no-decode` hands the
step only the samples' lengths (raw I/O, the peer's best case).

    .venv-bench/bin/python benchmarks/peers/train_peer.py --loader s3map \\
        --endpoint http://127.0.0.1:9000 --uri s3://demo/train/ --workers 8 \\
        --epochs 3 --log-dir logs --name s3map-files

Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import time
from pathlib import PurePosixPath
from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from peer_common import client_config

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loader", choices=["s3map", "s3iter", "boto3", "wds"], required=True)
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"),
                    help="S3 endpoint [env: AWS_ENDPOINT_URL]")
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    ap.add_argument("--uri", required=True, help="dataset prefix, s3://bucket/prefix/")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=8, help="DataLoader worker processes")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--compute-ms", type=float, default=0.0, help="emulated compute per batch")
    ap.add_argument("--no-decode", action="store_true", help="lengths only: raw I/O")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--name", default=None)
    args = ap.parse_args()
    if not args.endpoint:
        ap.error("no endpoint: pass --endpoint or set AWS_ENDPOINT_URL")
    if not args.uri.endswith("/"):
        args.uri += "/"
    args.name = args.name or f"{args.loader}{'-raw' if args.no_decode else ''}"
    return args


class Decode:
    """PIL decode and the reference torchvision.transforms.v2 pipeline; picklable for workers."""

    def __init__(self, size: int, decode: bool) -> None:
        self.size, self.decode = size, decode
        self.transform = None

    def __call__(self, data: bytes):
        if not self.decode:
            return len(data)
        if self.transform is None:
            from torchvision.transforms import v2
            self.transform = v2.Compose([
                v2.ToImage(), v2.ToDtype(torch.uint8, scale=True),
                v2.RandomResizedCrop(self.size, antialias=False),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
            ])
        from PIL import Image
        with Image.open(io.BytesIO(data)) as image:
            return self.transform(image.convert("RGB"))


def folder_label(key: str) -> str:
    return PurePosixPath(key).parent.name


class S3MapSamples(Dataset):
    """S3MapDataset whose transform decodes; items are (image, class folder)."""

    def __init__(self, args: argparse.Namespace, decode: Decode) -> None:
        from s3torchconnector import S3MapDataset
        self.decode = decode
        self.inner = S3MapDataset.from_prefix(args.uri, region=args.region, endpoint=args.endpoint,
                                              transform=self._sample, s3client_config=client_config())

    def _sample(self, reader):
        return self.decode(reader.read()), folder_label(reader.key)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int):
        return self.inner[i]


class Boto3Samples(Dataset):
    """One `get_object` per sample; the key list comes from one listing in the main process."""

    def __init__(self, args: argparse.Namespace, decode: Decode) -> None:
        import boto3
        self.args, self.decode, self.client = args, decode, None
        bucket, _, prefix = args.uri.removeprefix("s3://").partition("/")
        self.bucket = bucket
        client = boto3.client("s3", endpoint_url=args.endpoint, region_name=args.region)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        self.keys = [o["Key"] for page in pages for o in page.get("Contents", [])
                     if o["Key"].lower().endswith(IMAGE_EXTENSIONS)]

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int):
        if self.client is None:  # one client per worker process, made after the fork
            import boto3
            self.client = boto3.client("s3", endpoint_url=self.args.endpoint, region_name=self.args.region)
        key = self.keys[i]
        data = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return self.decode(data), folder_label(key)


def shard_stream(reader) -> dict:
    """The connector's transform for WebDataset: the object's key and its (unread) stream."""
    return {"url": reader.key, "stream": reader}


class ShardSamples(IterableDataset):
    """The connector's iterable dataset over `*.tar`, grouped into samples by WebDataset."""

    def __init__(self, args: argparse.Namespace, decode: Decode) -> None:
        from s3torchconnector import S3IterableDataset
        self.decode = decode
        self.shards = S3IterableDataset.from_prefix(
            args.uri, region=args.region, endpoint=args.endpoint, enable_sharding=True,
            transform=shard_stream, s3client_config=client_config())

    def __iter__(self) -> Iterator:
        import webdataset as wds
        tars = (obj for obj in self.shards if obj["url"].endswith(".tar"))
        for sample in wds.tariterators.group_by_keys(wds.tariterators.tar_file_expander(tars)):
            image = next((v for k, v in sample.items() if k.lower() in ("jpg", "jpeg", "png")), None)
            if image is None:
                raise ValueError(f"sample {sample.get('__key__')} has no image member")
            label = int(sample["cls"]) if "cls" in sample else -1
            yield self.decode(image), label


class WdsSamples(IterableDataset):
    """`wds.WebDataset` over presigned shard URLs fetched by curl, decoded by `Decode`."""

    def __init__(self, args: argparse.Namespace, decode: Decode) -> None:
        import boto3
        import webdataset as wds
        self.decode = decode
        bucket, _, prefix = args.uri.removeprefix("s3://").partition("/")
        client = boto3.client("s3", endpoint_url=args.endpoint, region_name=args.region)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        keys = sorted(o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(".tar"))
        urls = [client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": k}, ExpiresIn=3600)
                for k in keys]
        self.inner = wds.WebDataset([f"pipe:curl -s -f '{u}'" for u in urls], shardshuffle=False,
                                    empty_check=False)

    def __iter__(self) -> Iterator:
        for sample in self.inner:
            image = next((v for k, v in sample.items() if k.lower() in ("jpg", "jpeg", "png")), None)
            if image is None:
                raise ValueError(f"sample {sample.get('__key__')} has no image member")
            yield self.decode(image), int(sample["cls"]) if "cls" in sample else -1


def percentiles(waits: list[float]) -> dict:
    if not waits:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0}
    s = sorted(waits)

    def at(q: float) -> float:  # nearest rank, as `bucketload bench`
        rank = max(1, min(len(s), -int(-q * len(s) // 1)))
        return s[rank - 1]
    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": s[-1], "mean": sum(s) / len(s)}


def batch_len(batch) -> int:
    images = batch[0]
    return images.shape[0] if hasattr(images, "shape") else len(images)


def main() -> None:
    args = parse_args()
    decode = Decode(args.image_size, not args.no_decode)
    make = {"s3map": S3MapSamples, "boto3": Boto3Samples, "s3iter": ShardSamples,
            "wds": WdsSamples}[args.loader]
    dataset = make(args, decode)
    shuffle = not isinstance(dataset, IterableDataset)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=shuffle,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    compute = args.compute_ms / 1e3
    epochs, waits_all, samples_total, compute_total = [], [], 0, 0.0
    for epoch in range(args.epochs):
        started = time.monotonic()
        waits, samples, batches = [], 0, 0
        asked = time.monotonic()
        for batch in loader:
            waits.append((time.monotonic() - asked) * 1e3)
            if compute:
                time.sleep(compute)
            compute_total += compute
            samples += batch_len(batch)
            batches += 1
            asked = time.monotonic()
        seconds = time.monotonic() - started
        print(f"epoch {epoch}  {samples} samples in {batches} batches, {seconds:.2f} s: "
              f"{samples / seconds:.0f} samples/s", flush=True)
        epochs.append({"epoch": epoch, "seconds": seconds, "samples": samples, "batches": batches,
                       "samples_per_second": samples / seconds,
                       "data_wait_ms": percentiles(waits)})
        waits_all += waits
        samples_total += samples
    training_time = sum(e["seconds"] for e in epochs)
    tool = {"boto3": "boto3", "wds": "webdataset"}.get(args.loader, "s3torchconnector")
    log = {
        "schema_version": 1,
        "name": args.name,
        "tool": tool,
        "training_time": training_time,
        "samples_per_second": samples_total / training_time if training_time else 0.0,
        "samples_processed_total": samples_total,
        "accelerator_utilization": min(1.0, compute_total / training_time) if training_time else 0.0,
        "data_wait_ms": percentiles(waits_all),
        "config": {
            "dataset": args.uri, "format": "shards" if args.loader in ("s3iter", "wds") else "files",
            "cache": False, "epochs": args.epochs, "batch_size": args.batch_size,
            "image_size": args.image_size, "decode": not args.no_decode, "compute_ms": args.compute_ms,
            "concurrency": max(args.workers, 1), "workers": args.workers,
            "loader": {"s3map": "S3MapDataset", "s3iter": "S3IterableDataset + webdataset",
                       "boto3": "boto3 get_object", "wds": "webdataset + curl"}[args.loader],
            "machine": {"host": platform.node(), "cores": os.cpu_count(), "os": platform.system().lower(),
                        "arch": platform.machine()},
        },
        "epochs": epochs,
        **{f"t_epoch_{i + 1}": e["seconds"] for i, e in enumerate(epochs)},
    }
    print(f"{args.name}: {samples_total} samples in {training_time:.2f} s: "
          f"{log['samples_per_second']:.0f} samples/s", flush=True)
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
        path = os.path.join(args.log_dir, f"{args.name}.json")
        with open(path + ".partial", "w") as f:
            json.dump(log, f, indent=2)
        os.replace(path + ".partial", path)
        print(f"log: {path}")


if __name__ == "__main__":
    main()
