"""Writes the test corpus of bucketload-image into this folder (run from anywhere).

Small photo-like and noise images in every JPEG flavour the decoder must handle (baseline
4:4:4/4:2:2/4:2:0, progressive, grayscale, CMYK, odd sizes, restart intervals), PNGs of each
colour type, and bad inputs (truncated, garbage, empty, decompression bombs). Deterministic:
the same Pillow writes the same bytes. Requires Pillow and numpy.
"""

import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

HERE = Path(__file__).resolve().parent


def photo(rng, width, height):
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.zeros((height, width, 3), np.float32)
    for c in range(3):
        a, b, p = rng.uniform(-0.5, 0.5, 3)
        base[..., c] = 128 + 100 * np.sin(a * x / 8 + b * y / 10 + p * 6)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        r = int(rng.integers(2, max(3, width // 4)))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        draw.ellipse([x0 - r, y0 - r, x0 + r, y0 + r], fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(0.8))
    arr = np.asarray(img).astype(np.float32) + rng.normal(0, 10, (height, width, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def noise(rng, width, height):
    arr = rng.normal(128, 40, (height, width, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def png_bomb(width, height):
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    sig = b"\x89PNG\r\n\x1a\n"
    return sig + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def jpeg_bomb(src: bytes, width, height):
    """`src` with its frame header's dimensions replaced."""
    at = src.index(b"\xff\xc0")
    return src[: at + 5] + struct.pack(">HH", height, width) + src[at + 9 :]


def main():
    rng = np.random.default_rng(1)
    out = {}
    img = photo(rng, 160, 120)
    out["photo_420.jpg"] = dict(image=img, quality=90)
    out["photo_422.jpg"] = dict(image=img, quality=90, subsampling=1)
    out["photo_444.jpg"] = dict(image=img, quality=95, subsampling=0)
    out["photo_progressive.jpg"] = dict(image=img, quality=90, progressive=True)
    out["photo_restart.jpg"] = dict(image=img, quality=90, restart_marker_blocks=3)
    out["photo_restart_rows.jpg"] = dict(image=img, quality=85, restart_marker_rows=1, progressive=True)
    out["odd_97x61.jpg"] = dict(image=photo(rng, 97, 61), quality=90)
    out["odd_17x9_444.jpg"] = dict(image=photo(rng, 17, 9), quality=90, subsampling=0)
    out["tiny_1x1.jpg"] = dict(image=photo(rng, 1, 1), quality=90)
    out["tall_31x203.jpg"] = dict(image=photo(rng, 31, 203), quality=75, progressive=True)
    out["gray.jpg"] = dict(image=photo(rng, 120, 90).convert("L"), quality=90)
    out["gray_progressive.jpg"] = dict(image=photo(rng, 75, 50).convert("L"), quality=90, progressive=True)
    out["cmyk.jpg"] = dict(image=photo(rng, 64, 48).convert("CMYK"), quality=90)
    out["noise_444.jpg"] = dict(image=noise(rng, 128, 128), quality=90, subsampling=0)
    for name, spec in out.items():
        spec.pop("image").save(HERE / name, **spec)

    small = photo(rng, 48, 40)
    small.save(HERE / "rgb.png")
    small.convert("RGBA").save(HERE / "rgba.png")
    small.convert("L").save(HERE / "gray.png")
    small.convert("P", palette=Image.Palette.ADAPTIVE).save(HERE / "palette.png")
    wide = np.asarray(small.convert("L")).astype(np.uint16) * 257
    Image.fromarray(wide).save(HERE / "gray16.png")

    bad = HERE / "bad"
    bad.mkdir(exist_ok=True)
    good = (HERE / "photo_420.jpg").read_bytes()
    (bad / "truncated.jpg").write_bytes(good[: len(good) // 3])
    (bad / "header_only.jpg").write_bytes(good[:200])
    (bad / "garbage.jpg").write_bytes(bytes(rng.integers(0, 256, 2000, dtype=np.uint8)))
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "bomb.jpg").write_bytes(jpeg_bomb(good, 60000, 60000))
    (bad / "bomb.png").write_bytes(png_bomb(100000, 100000))
    png = (HERE / "rgb.png").read_bytes()
    (bad / "truncated.png").write_bytes(png[: len(png) // 2])


if __name__ == "__main__":
    main()
