"""Any data through ``bucketload.Loader``: WebDataset tar shards whose samples hold an image
(``.jpg``), a caption (``.txt``) and an array (``.npy``), read raw (``decode=False``) with
bucketload's I/O, cache, shuffle and ranks, and decoded by your own Python in DataLoader
workers.

    python examples/any_data.py s3://bucket/pairs --workers 2 --epochs 2

Credentials, region and endpoint come from the AWS environment (AWS_ENDPOINT_URL for a
local server). ``decode`` and ``collate`` are module-level functions, so they pickle for
spawned workers too.
"""

from __future__ import annotations

import argparse
import io
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms

import bucketload

PIXELS = transforms.Compose([
    transforms.Resize(32), transforms.CenterCrop(32), transforms.ToTensor(),
])


def decode(sample: dict[str, Any]) -> dict[str, Any]:
    """One raw sample (members as bytes-like buffers) into tensors and text."""
    return {
        "key": sample["__key__"],
        "label": sample["__label__"],
        "image": PIXELS(Image.open(io.BytesIO(sample["jpg"])).convert("RGB")),
        "text": bytes(sample["txt"]).decode(),
        "features": torch.from_numpy(np.load(io.BytesIO(sample["npy"]))),
    }


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch of decoded samples: tensors stacked, texts and keys in lists."""
    return {
        "key": [s["key"] for s in samples],
        "label": torch.tensor([s["label"] for s in samples]),
        "image": torch.stack([s["image"] for s in samples]),
        "text": [s["text"] for s in samples],
        "features": torch.stack([s["features"] for s in samples]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("uri", help="a dataset of tar shards (s3://bucket/prefix)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (0: none)")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()

    loader = bucketload.Loader(args.uri, decode=False, batch_size=args.batch_size,
                               transform=decode, collate_fn=collate)
    batches: Any = loader
    if args.workers:
        # batch_size=None: the loader batches; each worker reads its own part of the epoch.
        batches = DataLoader(loader, batch_size=None, num_workers=args.workers)
    for epoch in range(args.epochs):
        samples = 0
        for batch in batches:
            samples += len(batch["key"])
        print(f"epoch {epoch}: {samples} samples; last batch: images "
              f"{tuple(batch['image'].shape)}, features {tuple(batch['features'].shape)}, "
              f"text {batch['text'][0]!r}")


if __name__ == "__main__":
    main()
