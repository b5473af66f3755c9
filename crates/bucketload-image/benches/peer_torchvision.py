"""The peer of benches/image_pipeline.rs: PIL decode + torchvision v2, one core.

Usage: python peer_torchvision.py ROUNDS FILE...
The workshop's reference pipeline: PIL decode -> v2.ToImage, ToDtype(uint8, scale=True),
RandomResizedCrop(224, antialias=False), ToDtype(float32, scale=True), Normalize(ImageNet),
batches of 64 stacked as a DataLoader's default collate does. torch runs on one thread, so
the numbers are per core. Prints one line: images/s, decode ms/img, transform ms/img,
collate ms/img.
"""

import io
import sys
import time

import torch
from PIL import Image
from torchvision.transforms import v2


def main() -> None:
    torch.set_num_threads(1)
    rounds = int(sys.argv[1])
    blobs = [open(name, "rb").read() for name in sys.argv[2:]]
    transform = v2.Compose(
        [
            v2.ToImage(),
            v2.ToDtype(torch.uint8, scale=True),
            v2.RandomResizedCrop(224, antialias=False),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )
    decode = augment = collate = 0.0
    images = 0
    for r in range(rounds + 1):
        if r == 1:  # the first round warms caches and is not counted
            decode = augment = collate = 0.0
            images = 0
        for start in range(0, len(blobs), 64):
            batch = []
            for blob in blobs[start : start + 64]:
                t0 = time.perf_counter()
                img = Image.open(io.BytesIO(blob)).convert("RGB")
                t1 = time.perf_counter()
                batch.append(transform(img))
                t2 = time.perf_counter()
                decode += t1 - t0
                augment += t2 - t1
            t3 = time.perf_counter()
            torch.stack(batch)
            collate += time.perf_counter() - t3
            images += len(batch)
    total = decode + augment + collate
    print(f"{images / total:.1f} {1e3 * decode / images:.4f} {1e3 * augment / images:.4f} {1e3 * collate / images:.4f}")


if __name__ == "__main__":
    main()
