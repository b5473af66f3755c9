"""Ray Data rows/s over one object per sample: Ray's own readers against bucketload.ray, the
same objects on the same server (scripts/bench-ray.sh runs each in a process of its own).

    python ray_read.py --reader ray|bucketload|bucketload-map --mode raw|decoded|decoded-u8 \
        --bucket B --prefix P

- ``ray``, raw: ``ray.data.read_binary_files`` over pyarrow's S3 filesystem;
- ``ray``, decoded: ``ray.data.read_images(mode="RGB")`` (PIL), then ``map_batches`` with the
  workshop's torchvision v2 transform (RandomResizedCrop(224, antialias=False), float32,
  ImageNet normalisation) on each image, stacked, ``BATCH`` rows per call;
- ``bucketload``, raw: ``bucketload.ray.read_dataset(format="files")``;
- ``bucketload``, decoded: ``bucketload.ray.read_images(format="files")``, decoded in the read
  tasks as Ray's ``read_images`` decodes in its own;
- ``bucketload-map``, decoded: ``read_dataset`` then ``map_batches(bucketload.ray.decode_batch)``,
  ``BATCH`` rows per call, the encoded bytes passing through Ray's object store;
- ``decoded-u8``, every reader: the same crops left as ``uint8`` (no float conversion, no
  normalisation, which the accelerator then does on a quarter of the bytes): torchvision's
  transform without its last two steps, ``dtype="uint8"``.

``DECODE_THREADS`` in the environment sets bucketload's decode threads (default: the cores).

Ray runs locally with the machine's cores (``ray.init(num_cpus=os.cpu_count())``), started
before the clock. Each of ``--epochs`` epochs (default 2) is timed from building the dataset
(its listing included, as a user's epoch pays it) to the last row consumed with
``iter_batches(batch_size=64)``: the first starts Ray's worker processes, the later ones find
them running, as the epochs of a training job do. Prints one JSON line per epoch: reader,
mode, epoch, rows, seconds, rows_per_s. Credentials and the endpoint come from the AWS
environment (AWS_ENDPOINT_URL).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import warnings
from typing import Any

import numpy as np
import ray

# Rows per map_batches call, the same for both readers. Left to Ray, the batches of these
# ~100 KB images were 10 rows, and each call cost ~30 ms of Ray's own work.
BATCH = 256


def ray_dataset(args: argparse.Namespace) -> Any:
    import pyarrow.fs as pafs

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    scheme, _, host = endpoint.partition("://")
    fs = pafs.S3FileSystem(
        access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region=os.environ.get("AWS_REGION", "us-east-1"), endpoint_override=host, scheme=scheme)
    path = f"{args.bucket}/{args.prefix}"
    if args.mode == "raw":
        return ray.data.read_binary_files(path, filesystem=fs)
    return ray.data.read_images(path, filesystem=fs, mode="RGB").map_batches(
        torchvision_batch, fn_kwargs={"u8": args.mode == "decoded-u8"}, batch_format="numpy",
        batch_size=BATCH)


def torchvision_batch(batch: dict[str, np.ndarray], u8: bool = False) -> dict[str, np.ndarray]:
    """The workshop's transform on each image of a batch, as a map_batches function; with
    ``u8`` the crop alone, left as uint8."""
    import torch
    from torchvision.transforms import v2

    torch.set_num_threads(1)
    steps = [v2.ToImage(), v2.ToDtype(torch.uint8, scale=True),
             v2.RandomResizedCrop(224, antialias=False)]
    if not u8:
        steps += [v2.ToDtype(torch.float32, scale=True),
                  v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    transform = v2.Compose(steps)
    images = [transform(torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1))
              for image in batch["image"]]
    return {"image": torch.stack(images).numpy()}


def bucketload_dataset(args: argparse.Namespace) -> Any:
    import bucketload.ray as blr

    uri = f"s3://{args.bucket}/{args.prefix}"
    if args.mode == "raw":
        return blr.read_dataset(uri, format="files")
    kwargs: dict[str, Any] = {"image_size": 224,
                              "dtype": "uint8" if args.mode == "decoded-u8" else "float32"}
    if os.environ.get("DECODE_THREADS"):
        kwargs["decode_threads"] = int(os.environ["DECODE_THREADS"])
    if args.reader == "bucketload":
        return blr.read_images(uri, format="files", **kwargs)
    return blr.read_dataset(uri, format="files").map_batches(
        blr.decode_batch, fn_kwargs=kwargs, batch_format="numpy", batch_size=BATCH)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reader", choices=["ray", "bucketload", "bucketload-map"], required=True)
    ap.add_argument("--mode", choices=["raw", "decoded", "decoded-u8"], required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False
    for epoch in range(args.epochs):
        started = time.perf_counter()
        dataset = ray_dataset(args) if args.reader == "ray" else bucketload_dataset(args)
        rows = 0
        for batch in dataset.iter_batches(batch_size=64, batch_format="numpy"):
            rows += len(next(iter(batch.values())))
        seconds = time.perf_counter() - started
        print(json.dumps({"reader": args.reader, "mode": args.mode, "epoch": epoch + 1,
                          "rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}),
              flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
