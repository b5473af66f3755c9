"""`bucketload mount` with Python programs: torchvision's ImageFolder over a class-per-folder
dataset (PIL decoding), and torch.save / torch.load through the mount, checked with boto3.

Needs /dev/fuse and fusermount3 (scripts/setup.sh installs fuse3): the tests fail, never
skip, without them.
"""

from __future__ import annotations

import io
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import _binary


def _require_fuse() -> None:
    if not os.path.exists("/dev/fuse"):
        pytest.fail("/dev/fuse is missing: mount tests need FUSE (run the container with --device /dev/fuse)")
    try:
        subprocess.run(["fusermount3", "--version"], capture_output=True, check=False)
    except FileNotFoundError:
        pytest.fail("fusermount3 is missing: install the Debian package fuse3 (scripts/setup.sh does)")


def _mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split(" ")[1] == str(path) and "bucketload" in line for line in f)


def _wait(what: str, cond) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.01)


@pytest.fixture
def mount(server, bucket, tmp_path):
    """Mounts s3://<bucket> on a temporary directory; unmounts after the test."""
    _require_fuse()
    point = (tmp_path / "mnt").resolve()
    point.mkdir()
    done = []

    def start(*flags: str) -> Path:
        subprocess.run(
            [_binary(), "mount", f"s3://{bucket}", str(point), "--part-size", "5MiB", *flags],
            env=server.env(), check=True, capture_output=True,
        )
        assert _mounted(point)
        done.append(point)
        return point

    yield start
    for p in done:
        if _mounted(p):
            subprocess.run(["fusermount3", "-u", str(p)], check=True)
        _wait("the mount is gone", lambda: not _mounted(p))


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    img = Image.new("RGB", (32, 24), ((seed * 40) % 256, (seed * 90) % 256, 128))
    out = io.BytesIO()
    img.save(out, format="JPEG")
    return out.getvalue()


def test_image_folder_walk_reads_every_sample(s3, bucket, mount):
    classes = ["cat", "dog", "zebra"]
    expected = {}
    for c, cls in enumerate(classes):
        for i in range(7):
            key = f"train/{cls}/{c}_{i:03d}.jpg"
            body = _jpeg(c * 10 + i)
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            expected[key] = body
    root = mount("--read-only") / "train"

    # torchvision's own ImageFolder (os.scandir for the classes, os.walk for the samples,
    # PIL to open each one), then the same walk by hand to compare the bytes.
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(str(root))
    assert folder.classes == classes and len(folder) == 21
    for i in range(len(folder)):
        img, idx = folder[i]
        assert img.size == (32, 24) and img.mode == "RGB"
        path = folder.samples[i][0]
        assert classes[idx] == os.path.basename(os.path.dirname(path))
    samples = folder.samples
    for path, idx in samples:
        with open(path, "rb") as f:
            data = f.read()
        key = "train/" + os.path.relpath(path, root)
        assert data == expected[key]
    assert os.path.getsize(samples[0][0]) == len(expected["train/cat/0_000.jpg"])


def test_torch_save_through_the_mount_is_read_back_through_s3(s3, bucket, mount):
    import torch

    point = mount()
    state = {"w": torch.arange(3_000_000, dtype=torch.float32), "step": torch.tensor(7)}
    os.makedirs(point / "ckpt", exist_ok=True)
    torch.save(state, point / "ckpt" / "model.pt.tmp")
    # Checkpoint tools finalise by rename.
    os.rename(point / "ckpt" / "model.pt.tmp", point / "ckpt" / "model.pt")

    body = s3.get_object(Bucket=bucket, Key="ckpt/model.pt")["Body"].read()
    loaded = torch.load(io.BytesIO(body))
    assert torch.equal(loaded["w"], state["w"]) and int(loaded["step"]) == 7
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert listed == ["ckpt/model.pt"]

    again = torch.load(point / "ckpt" / "model.pt")
    assert torch.equal(again["w"], state["w"])


def _body(s3, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_redirections_and_dup_descriptors_write_exactly_the_bytes(s3, bucket, mount):
    s3.put_object(Bucket=bucket, Key="y.txt", Body=b"old\n")
    point = mount("--allow-overwrite")

    subprocess.run(["bash", "-c", "echo new > y.txt"], cwd=point, check=True)
    assert _body(s3, bucket, "y.txt") == b"new\n"
    # What shells do: the descriptor is duplicated and the original closed before any write.
    fd = os.open(point / "dup.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    second = os.dup(fd)
    os.close(fd)
    os.write(second, b"through the copy\n")
    os.close(second)
    assert _body(s3, bucket, "dup.txt") == b"through the copy\n"
    with open(point / "w.txt", "w") as f:
        for i in range(1000):
            print(i, file=f)
    assert _body(s3, bucket, "w.txt") == "".join(f"{i}\n" for i in range(1000)).encode()
    # Appending is refused; the object is untouched.
    appended = subprocess.run(["bash", "-c", "echo more >> y.txt"], cwd=point, capture_output=True)
    assert appended.returncode != 0 and b"Operation not supported" in appended.stderr
    with pytest.raises(OSError) as err:
        open(point / "y.txt", "a")
    assert err.value.errno == 95  # ENOTSUP
    assert _body(s3, bucket, "y.txt") == b"new\n"
