"""The workshop's training benchmark, on bucketload's Python API.

A model mock "trains" on batches from ``bucketload.Loader``: each step waits ``--compute-ms``
(0: as fast as the input allows; the step only touches the batch), and every
``--ckpt-steps`` steps the mock's state (``--ckpt-size-mb`` of float32 weights) is saved
with ``bucketload.checkpoint.save`` — in the background with ``--async-ckpt``. The JSON log
has the workshop's keys (``training_time``, ``samples_per_second``,
``samples_processed_total``, ``t_epoch_1``…, ``t_ckpt_1``…, ``t_ckpt_ave``) plus the
accelerator utilisation, so ``bucketload report`` draws it next to ``bucketload bench``.

    python examples/benchmark.py --uri s3://demo/train --epochs 3 --compute-ms 0 \\
        --log-dir logs --name python-files

Credentials, region and endpoint come from the AWS environment (AWS_ENDPOINT_URL for a
local server). Run one process per GPU with torchrun, or inside Ray Train: the loader takes
its rank and world size from there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

import bucketload
from bucketload import checkpoint


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's flags, shared with examples/ray_train_benchmark.py."""
    ap.add_argument("--uri", required=True, help="dataset root, e.g. s3://demo/train")
    ap.add_argument("--format", default="auto", choices=["auto", "files", "shards", "indexed"])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--compute-ms", type=float, default=0.0, help="emulated compute per batch")
    ap.add_argument("--concurrency", type=int, default=None, help="requests in flight")
    ap.add_argument("--decode-threads", type=int, default=None)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--ckpt-steps", type=int, default=0, help="checkpoint every N steps (0: never)")
    ap.add_argument("--ckpt-uri", default=None, help="checkpoint prefix, e.g. s3://demo/ckpt")
    ap.add_argument("--ckpt-size-mb", type=int, default=100, help="size of the model mock's state")
    ap.add_argument("--async-ckpt", action="store_true", help="save checkpoints in the background")
    ap.add_argument("--log-dir", default=None)


def finish_log(log: dict, ckpts: list[float], log_dir: str | None, name: str) -> None:
    """Adds the checkpoint times to ``log`` and writes it to ``log_dir/name.json``."""
    log.update({f"t_ckpt_{i + 1}": t for i, t in enumerate(ckpts)})
    if ckpts:
        log["t_ckpt_ave"] = sum(ckpts) / len(ckpts)
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        path = os.path.join(log_dir, f"{name}.json")
        with open(path, "w") as f:
            json.dump(log, f, indent=2)
        print(f"log: {path}")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.add_argument("--name", default="python")
    args = ap.parse_args()
    if args.ckpt_steps and not args.ckpt_uri:
        ap.error("--ckpt-steps needs --ckpt-uri")
    return args


def main() -> None:
    args = parse_args()
    cpu_start = time.process_time()
    loader = bucketload.Loader(
        args.uri, format=args.format, batch_size=args.batch_size, image_size=args.image_size,
        concurrency=args.concurrency, decode_threads=args.decode_threads, cache_dir=args.cache_dir,
    )
    weights = {"w": torch.zeros(args.ckpt_size_mb * (1 << 20) // 4)} if args.ckpt_steps else {}
    epochs: list[float] = []
    ckpts: list[float] = []
    pending: list[checkpoint.SaveHandle] = []
    samples = steps = 0
    compute_s = 0.0
    start = time.perf_counter()
    for _ in range(args.epochs):
        epoch_start = time.perf_counter()
        for images, labels in loader:
            # The step only touches the batch, then "computes".
            _ = images[0, 0, 0, 0].item() + labels[0].item()
            if args.compute_ms > 0:
                time.sleep(args.compute_ms / 1000)
                compute_s += args.compute_ms / 1000
            samples += len(labels)
            steps += 1
            if args.ckpt_steps and steps % args.ckpt_steps == 0:
                t = time.perf_counter()
                uri = f"{args.ckpt_uri.rstrip('/')}/step-{steps:06d}.pt"
                saved = checkpoint.save(weights, uri, background=args.async_ckpt)
                if args.async_ckpt:
                    pending.append(saved)
                ckpts.append(time.perf_counter() - t)
        epochs.append(time.perf_counter() - epoch_start)
    for handle in pending:
        handle.wait()
    total = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    log = {
        "schema_version": 1,
        "name": args.name,
        "tool": "bucketload-python",
        "training_time": total,
        "samples_per_second": samples / total,
        "samples_processed_total": samples,
        "accelerator_utilization": min(1.0, compute_s / total),
        # CPU of every thread of the process (decode, fetch, the loop) from opening the loader.
        "cpu_seconds": cpu,
        "config": {
            "dataset": args.uri, "format": args.format, "cache": args.cache_dir is not None,
            "epochs": args.epochs, "batch_size": args.batch_size, "image_size": args.image_size,
            "decode": True, "compute_ms": args.compute_ms, "concurrency": args.concurrency,
            "loader": "bucketload.Loader",
            "machine": {"host": platform.node(), "cores": os.cpu_count(),
                        "os": platform.system().lower(), "arch": platform.machine()},
        },
        **{f"t_epoch_{i + 1}": t for i, t in enumerate(epochs)},
    }
    print(f"{args.name}: {samples} samples in {total:.1f} s, {samples / total:.0f} samples/s; "
          f"epochs {', '.join(f'{t:.1f}' for t in epochs)} s")
    finish_log(log, ckpts, args.log_dir, args.name)


if __name__ == "__main__":
    main()
