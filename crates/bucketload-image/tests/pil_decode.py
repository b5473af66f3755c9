"""Decodes images with Pillow (libjpeg-turbo) for tests/image_decode.rs.

Usage: python pil_decode.py OUT_DIR IMAGE...
Writes OUT_DIR/<file name>.rgb: the image converted to RGB, row-major, 3 bytes per pixel,
preceded by two little-endian u32 (width, height).
"""

import struct
import sys
from pathlib import Path

from PIL import Image, features


def main() -> None:
    out = Path(sys.argv[1])
    for name in sys.argv[2:]:
        with Image.open(name) as img:
            rgb = img.convert("RGB")
        header = struct.pack("<II", rgb.width, rgb.height)
        (out / (Path(name).name + ".rgb")).write_bytes(header + rgb.tobytes())
    print("libjpeg-turbo", features.version("libjpeg_turbo"))


if __name__ == "__main__":
    main()
