"""The peer of benches/image_pipeline.rs: PIL decode + torchvision v2, one core.

Usage: python peer_torchvision.py ROUNDS FILE...
The workshop's reference pipeline: PIL decode -> v2.ToImage, ToDtype(uint8, scale=True),
RandomResizedCrop(224, antialias=False), ToDtype(float32, scale=True), Normalize(ImageNet),
batches of 64 stacked as a DataLoader's default collate does. torch runs on one thread, so
the numbers are per core. Prints one line: images/s, decode ms/img, transform ms/img,
collate ms/img.

PEER_PIPELINE picks another way to write the same transform, to check that the reference is
not the peer's slowest: ``reference`` (the default, above; bucketload's pixels are its
pixels), ``antialias`` (the same with RandomResizedCrop's antialias on, torchvision v2's
default) or ``pil`` (RandomResizedCrop on the PIL image, then PILToTensor,
ToDtype(float32) and Normalize: torchvision's classic ImageNet recipe, antialiased by PIL).
None has the flip, which would only slow the peer.
"""

import io
import os
import sys
import time

import torch
from PIL import Image
from torchvision.transforms import v2


def main() -> None:
    torch.set_num_threads(1)
    rounds = int(sys.argv[1])
    blobs = [open(name, "rb").read() for name in sys.argv[2:]]
    normalize = v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    pipeline = os.environ.get("PEER_PIPELINE", "reference")
    if pipeline in ("reference", "antialias"):
        transform = v2.Compose(
            [
                v2.ToImage(),
                v2.ToDtype(torch.uint8, scale=True),
                v2.RandomResizedCrop(224, antialias=pipeline == "antialias"),
                v2.ToDtype(torch.float32, scale=True),
                normalize,
            ]
        )
    elif pipeline == "pil":
        transform = v2.Compose(
            [
                v2.RandomResizedCrop(224),
                v2.PILToTensor(),
                v2.ToDtype(torch.float32, scale=True),
                normalize,
            ]
        )
    else:
        sys.exit(f"PEER_PIPELINE is reference, antialias or pil, not {pipeline!r}")
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
