"""Runs torchvision v2 on the cases tests/image_torchvision.rs wrote, and compares.

Usage: python torchvision_compare.py CASE_DIR
CASE_DIR/cases.txt has one case per line:
  name kind rgb_file width height top left crop_h crop_w out_h out_w flip antialias shorter
where kind is `rrc` (resized_crop of the box to out_h x out_w) or `eval` (resize of the
shorter side to `shorter`, then centre crop to out_h x out_w). `rgb_file` holds the decoded
source pixels (HWC bytes) that both sides start from, and `<name>.f32` bucketload's CHW output.
Prints per case: name, the largest difference in 8-bit grey levels, the share of values
that differ at all, and the mean difference in grey levels. Exits 3 when torch or torchvision is not installed.
"""

import sys
from pathlib import Path

try:
    import numpy as np
    import torch
    from torchvision.transforms.v2 import functional as F
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"torchvision not available: {e}")
    sys.exit(3)

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def reference(kind, img, top, left, ch, cw, oh, ow, flip, antialias, shorter):
    if kind == "rrc":
        out = F.resized_crop(img, top, left, ch, cw, [oh, ow], antialias=antialias)
    else:
        out = F.resize(img, [shorter], antialias=antialias)
        out = F.center_crop(out, [oh, ow])
    if flip:
        out = F.horizontal_flip(out)
    out = F.to_dtype(out, torch.float32, scale=True)
    return F.normalize(out, MEAN, STD)


def main() -> None:
    torch.set_num_threads(1)
    case_dir = Path(sys.argv[1])
    print(f"torch {torch.__version__} torchvision cpu={torch.backends.cpu.get_cpu_capability()}")
    std = torch.tensor(STD).view(3, 1, 1)
    for line in (case_dir / "cases.txt").read_text().splitlines():
        name, kind, rgb, *nums = line.split()
        w, h, top, left, ch, cw, oh, ow, flip, aa, shorter = map(int, nums)
        pixels = np.fromfile(case_dir / rgb, dtype=np.uint8).reshape(h, w, 3)
        img = torch.from_numpy(pixels).permute(2, 0, 1).contiguous()
        want = reference(kind, img, top, left, ch, cw, oh, ow, bool(flip), bool(aa), shorter)
        got = torch.from_numpy(np.fromfile(case_dir / f"{name}.f32", dtype=np.float32))
        got = got.view(3, oh, ow)
        levels = ((got - want).abs() * std * 255).round()
        share = (levels > 0).float().mean().item()
        mean = levels.mean().item()
        print(f"{name} {int(levels.max().item())} {share:.6f} {mean:.4f}")


if __name__ == "__main__":
    main()
