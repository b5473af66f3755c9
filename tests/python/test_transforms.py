"""The evaluation transform of ``bucketload.Loader`` against torchvision: every image of a
dataset on `bucketload serve`, read with ``augment="eval"``, must equal torchvision's
``Resize`` + ``CenterCrop`` + ``Normalize`` of the PIL-decoded pixels, within the tolerance the
training path is held to (crates/bucketload-image/tests/image_torchvision.rs: at most one 8-bit
grey level, on at most 1% of the values, here of the dataset's values), as that test does on
tensors. One image may differ on more of its values (``MAX_SHARE_ONE_IMAGE``): torchvision's
antialiased resize of 8-bit pixels (like PIL's) rounds to 8 bits between its horizontal and
vertical passes, where bucketload's kernel keeps floats; small images upscaled show it most.
And torchvision's
classic PIL pipeline (``Resize`` of the PIL image, ``ToTensor``, ``Normalize``) within one grey
level: PIL's fixed-point antialiasing and torchvision's tensor resize disagree by one level on
up to a fifth of the values themselves. Needs torchvision: the test fails, never skips,
without it."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms
from torchvision.transforms import v2

import bucketload
from bucketload.errors import ConfigError

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

#: Largest difference from torchvision, in 8-bit grey levels before normalisation.
MAX_LEVELS = 1
#: Share of the dataset's output values allowed to differ by that one level.
MAX_SHARE_DIFFERENT = 0.01
#: Share of one image's values allowed to differ by one level (see the module's docs).
MAX_SHARE_ONE_IMAGE = 0.06
#: Width x height of the images: landscape, portrait, square, odd sizes, up- and downscaled.
SIZES = [(97, 61), (160, 120), (61, 200), (300, 200), (64, 64), (251, 250), (40, 33), (120, 90)]
IMAGE_SIZE = 32


def _picture(width: int, height: int, seed: int) -> bytes:
    """A JPEG with gradients, edges and some noise: structure a resize can get wrong."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    r = (x * 255 // max(width - 1, 1)).astype(np.int32)
    g = (y * 255 // max(height - 1, 1)).astype(np.int32)
    b = (((x // 7) + (y // 5)) % 2 * 200).astype(np.int32)
    pixels = np.stack([r, g, b], axis=-1) + rng.integers(-20, 21, (height, width, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="module")
def dataset(env, s3):  # noqa: F811
    """JPEGs of many shapes in two class folders, written by boto3: their URI and the encoded
    bytes in key order (the loader's sample indices)."""
    bucket = "transforms-eval"
    s3.create_bucket(Bucket=bucket)
    objects = {f"val/c{i % 2}/{i:03d}.jpg": _picture(w, h, i) for i, (w, h) in enumerate(SIZES)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    return f"s3://{bucket}/val", [(k, objects[k]) for k in sorted(objects)]


def _read(uri: str, **kw) -> dict[int, torch.Tensor]:
    """Every image of one epoch by its sample index."""
    loader = bucketload.Loader(uri, batch_size=3, image_size=IMAGE_SIZE, augment="eval",
                               shuffle=False, return_indices=True, **kw)
    images = {}
    for batch, _labels, indices in loader:
        for image, index in zip(batch, indices.tolist(), strict=True):
            assert index not in images
            images[index] = image.clone()
    return images


def _levels(got: torch.Tensor, want: torch.Tensor, std) -> torch.Tensor:
    """The differences in 8-bit grey levels of two normalised CHW tensors."""
    return ((got - want).abs() * torch.tensor(std).view(3, 1, 1) * 255).round()


def _check(levels: torch.Tensor, what: str, max_share: float = MAX_SHARE_ONE_IMAGE) -> None:
    share = (levels > 0).float().mean().item()
    worst = int(levels.max().item())
    assert worst <= MAX_LEVELS and share <= max_share, (
        f"{what}: {worst} levels, {share:.4f} of values differ")


def _check_all(levels: list[torch.Tensor]) -> None:
    _check(torch.stack(levels), "the dataset", max_share=MAX_SHARE_DIFFERENT)


def _decoded(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


@pytest.mark.parametrize("resize, mean, std", [
    (None, bucketload.IMAGENET_MEAN, bucketload.IMAGENET_STD),
    (48, (0.5, 0.25, 0.75), (0.2, 0.3, 0.4)),
], ids=["imagenet-default-resize", "own-statistics"])
def test_eval_batches_match_torchvision(dataset, resize, mean, std):
    uri, encoded = dataset
    shorter = round(IMAGE_SIZE / 0.875) if resize is None else resize
    on_tensors = v2.Compose([
        v2.PILToTensor(), v2.Resize(shorter, antialias=True), v2.CenterCrop(IMAGE_SIZE),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std),
    ])
    on_pil = transforms.Compose([
        transforms.Resize(shorter), transforms.CenterCrop(IMAGE_SIZE), transforms.ToTensor(),
        transforms.Normalize(mean, std),
    ])
    kw = {} if resize is None else {"resize": resize}
    got = _read(uri, mean=mean, std=std, **kw)
    assert sorted(got) == list(range(len(encoded)))
    differences = []
    for index, (key, data) in enumerate(encoded):
        want = on_tensors(_decoded(data))
        assert got[index].shape == want.shape == (3, IMAGE_SIZE, IMAGE_SIZE)
        differences.append(_levels(got[index], want, std))
        _check(differences[-1], key)
        _check(_levels(got[index], on_pil(_decoded(data)), std), f"{key} (PIL)", max_share=1.0)
    _check_all(differences)
    # Evaluation has no randomness: the next epoch and another seed give the same pixels.
    again = _read(uri, mean=mean, std=std, seed=9, **kw)
    assert all(torch.equal(got[i], again[i]) for i in got)


def test_eval_uint8_batches_match_torchvision(dataset):
    uri, encoded = dataset
    reference = v2.Compose([
        v2.PILToTensor(), v2.Resize(40, antialias=True), v2.CenterCrop(IMAGE_SIZE),
    ])
    got = _read(uri, resize=40, dtype="uint8")
    differences = []
    for index, (key, data) in enumerate(encoded):
        want = reference(_decoded(data))
        image = got[index]
        assert image.dtype == torch.uint8 and image.shape == (3, IMAGE_SIZE, IMAGE_SIZE)
        differences.append((image.int() - want.int()).abs())
        _check(differences[-1], key)
    _check_all(differences)


@pytest.mark.parametrize("kw, said", [
    ({"augment": "test"}, "augment 'test'"),
    ({"augment": "eval", "resize": 16}, "`resize` 16 is smaller than `image_size` 32"),
    ({"resize": 64}, "`resize` applies to `augment` eval"),
    ({"augment": "eval", "scale": (0.5, 1.0)}, "`scale` and `ratio` apply to `augment` train"),
    ({"scale": (0.5, 0.1)}, "`scale` (0.5, 0.1)"),
    ({"std": (0.2, 0.0, 0.2)}, "`std`"),
    ({"dtype": "uint8", "mean": (0.5, 0.5, 0.5)}, "`mean` and `std` apply to float32 batches"),
])
def test_transform_settings_that_cannot_work_raise_config_errors(dataset, kw, said):
    uri, _ = dataset
    with pytest.raises(ConfigError, match=None) as err:
        loader = bucketload.Loader(uri, image_size=IMAGE_SIZE, **kw)
        next(iter(loader))
    assert said in str(err.value)


def test_the_training_example_validates_every_image_each_epoch(dataset, bucketload_bin, env,  # noqa: F811
                                                               s3):
    val, _ = dataset
    s3.create_bucket(Bucket="transforms-train")
    ok(bucketload_bin, env, "gen", "s3://transforms-train/train", "--samples", "24", "--classes",
       "2", "--size", "2KB", "--seed", "2")
    example = Path(__file__).resolve().parents[2] / "examples" / "train_with_validation.py"
    out = subprocess.run(
        [sys.executable, str(example), "--train", "s3://transforms-train/train", "--val", val,
         "--classes", "2", "--epochs", "2", "--batch-size", "8", "--image-size", "32"],
        capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1"], out.stdout
    assert all(f"/{len(SIZES)})" in line for line in lines), out.stdout
