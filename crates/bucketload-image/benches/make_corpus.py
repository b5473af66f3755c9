"""Writes the benchmark corpus of bucketload-image: photo-like JPEGs made with Pillow.

ImageNet's typical picture is 500x375, 4:2:0, quality ~90, ~100-150 KB. Smooth gradients, soft
shapes and mild sensor-like noise give a file of that size and an entropy-coded stream with
realistic statistics (unlike pure noise, whose coefficients are nearly all non-zero).

Usage: python make_corpus.py OUT_DIR [COUNT [WIDTH HEIGHT]]
"""

import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def photo(rng: np.random.Generator, width: int = 500, height: int = 375) -> Image.Image:
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.zeros((height, width, 3), np.float32)
    for c in range(3):
        a, b, p = rng.uniform(-0.5, 0.5, 3)
        base[..., c] = 128 + 90 * np.sin(a * x / 20 + b * y / 25 + p * 6)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(40):
        x0, y0 = rng.integers(0, width), rng.integers(0, height)
        r = int(rng.integers(5, 80))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        draw.ellipse([x0 - r, y0 - r, x0 + r, y0 + r], fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(1.2))
    arr = np.asarray(img).astype(np.float32)
    arr += rng.normal(0, 18, arr.shape)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def main() -> None:
    out = Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    width, height = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (500, 375)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        photo(rng, width, height).save(out / f"photo_{i:04}.jpg", quality=90)


if __name__ == "__main__":
    main()
