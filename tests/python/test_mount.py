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


def mounter(server, tmp_path):
    """A function mounting `s3://<bucket>` on a temporary directory, and one unmounting what
    it mounted."""
    _require_fuse()
    point = (tmp_path / "mnt").resolve()
    point.mkdir()
    done = []

    def start(bucket: str, *flags: str) -> Path:
        subprocess.run(
            [_binary(), "mount", f"s3://{bucket}", str(point), "--part-size", "5MiB", *flags],
            env=server.env(), check=True, capture_output=True,
        )
        assert _mounted(point)
        done.append(point)
        return point

    def stop() -> None:
        for p in done:
            if _mounted(p):
                subprocess.run(["fusermount3", "-u", str(p)], check=True)
            _wait("the mount is gone", lambda p=p: not _mounted(p))

    return start, stop


@pytest.fixture
def mount(server, bucket, tmp_path):
    """Mounts s3://<bucket> on a temporary directory; unmounts after the test."""
    start, stop = mounter(server, tmp_path)
    yield lambda *flags: start(bucket, *flags)
    stop()


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
    appended = subprocess.run(["bash", "-c", "echo more >> y.txt"], cwd=point, capture_output=True,
                              check=False)
    assert appended.returncode != 0 and b"Operation not supported" in appended.stderr
    with pytest.raises(OSError) as err:
        open(point / "y.txt", "a")
    assert err.value.errno == 95  # ENOTSUP
    assert _body(s3, bucket, "y.txt") == b"new\n"


def _keys(s3, bucket: str) -> dict[str, int]:
    """Every key in the bucket with its size, listed by boto3."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["Size"] for p in pages for o in p.get("Contents", [])}


def test_files_unlinked_right_after_they_are_made_leave_nothing(s3, bucket, mount):
    import tempfile

    point = mount("--allow-delete")
    for i in range(10):
        subprocess.run(["sh", "-c", f"touch f{i} && rm f{i}"], cwd=point, check=True)
    for _ in range(10):
        with tempfile.NamedTemporaryFile(dir=point) as f:
            f.write(b"scratch")
            f.flush()
    with tempfile.NamedTemporaryFile(dir=point):
        pass
    # A file unlinked while still open: its writes and close succeed, and nothing is uploaded.
    fd = os.open(point / "open.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.unlink(point / "open.tmp")
        os.write(fd, b"gone")
    finally:
        os.close(fd)
    assert _keys(s3, bucket) == {}
    assert os.listdir(point) == []


def test_a_new_file_deleted_while_open_needs_no_allow_delete(s3, bucket, mount):
    point = mount()
    fd = os.open(point / ".probe.swx", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.unlink(point / ".probe.swx")
    finally:
        os.close(fd)
    assert _keys(s3, bucket) == {}
    assert os.listdir(point) == []


def _vim(path: Path, *commands: str) -> subprocess.CompletedProcess:
    args = ["vim", "-N", "-u", "NONE", "-i", "NONE", "-es"]
    for c in commands:
        args += ["-c", c]
    return subprocess.run([*args, str(path)], capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("backupcopy", ["yes", "no", "auto"])
def test_vim_saves_a_file_and_leaves_no_swap_or_backup(s3, bucket, mount, backupcopy):
    s3.put_object(Bucket=bucket, Key="docs/f.txt", Body=b"one\ntwo\nfoo\n")
    point = mount("--allow-delete", "--allow-overwrite")
    done = _vim(point / "docs" / "f.txt", f"set backupcopy={backupcopy}", "%s/o/0/g", "wq")
    assert done.returncode == 0, done.stderr
    assert _body(s3, bucket, "docs/f.txt") == b"0ne\ntw0\nf00\n"
    assert _keys(s3, bucket) == {"docs/f.txt": 12}
    assert (point / "docs" / "f.txt").read_bytes() == b"0ne\ntw0\nf00\n"
    # A new file, with the swap file vim keeps while editing.
    done = _vim(point / "docs" / "new.txt", "normal ihello", "wq")
    assert done.returncode == 0, done.stderr
    assert _keys(s3, bucket) == {"docs/f.txt": 12, "docs/new.txt": 6}
    assert _body(s3, bucket, "docs/new.txt") == b"hello\n"


def test_sed_in_place_and_nano_save_a_file(s3, bucket, mount, tmp_path):
    import shutil

    s3.put_object(Bucket=bucket, Key="n.txt", Body=b"alpha\nbeta\n")
    point = mount("--allow-delete", "--allow-overwrite")
    subprocess.run(["sed", "-i", "s/beta/gamma/", str(point / "n.txt")], check=True)
    assert _body(s3, bucket, "n.txt") == b"alpha\ngamma\n"
    assert _keys(s3, bucket) == {"n.txt": 12}

    # nano needs a terminal: drive it in a detached tmux session (its own server socket).
    assert shutil.which("tmux") and shutil.which("nano"), "scripts/setup.sh installs tmux and nano"
    sock = str(tmp_path / "tmux.sock")
    tmux = ["tmux", "-S", sock]
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "24",
                    f"nano --ignorercfiles {point / 'n.txt'}; echo $? > {tmp_path / 'rc'}"],
                   check=True)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True,
                                  text=True, check=True).stdout

        _wait("nano shows the file", lambda: "gamma" in screen())
        subprocess.run([*tmux, "send-keys", "M-<", "Z", "C-o"], check=True)
        _wait("nano asks for the name", lambda: "File Name to Write" in screen())
        subprocess.run([*tmux, "send-keys", "Enter"], check=True)
        _wait("nano wrote the file", lambda: "Wrote" in screen())
        subprocess.run([*tmux, "send-keys", "C-x"], check=True)
        _wait("nano exited", lambda: (tmp_path / "rc").exists())
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    assert (tmp_path / "rc").read_text().strip() == "0"
    assert _body(s3, bucket, "n.txt") == b"Zalpha\ngamma\n"
    assert _keys(s3, bucket) == {"n.txt": 13}


def test_rm_r_removes_folder_markers_and_the_directories_stay_gone(s3, bucket, mount):
    for key in ["top/", "top/a/", "top/a/x.txt", "top/empty/", "top/b/c/", "top/b/c/y.txt"]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x" if not key.endswith("/") else b"")
    point = mount("--allow-delete", "--metadata-ttl", "0")
    subprocess.run(["mkdir", "-p", str(point / "top" / "a")], check=True)
    subprocess.run(["rm", "-r", str(point / "top")], check=True)
    assert _keys(s3, bucket) == {}
    assert os.listdir(point) == []
    assert not (point / "top").exists()


def test_unaddressable_and_overlong_keys_never_fail_a_listing(s3, bucket, mount):
    long = "L" * 256
    keys = ["d/ok.txt", "d/a//b", "d/./x", "d/../y", "d/sub/..", "d/new\nline", "d/tab\tname",
            "d/cr\rname", f"d/{long}"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    assert set(_keys(s3, bucket)) == set(keys), "the server stores every key as given"
    point = mount("--metadata-ttl", "0")
    for _ in range(2):  # the first listing and one after the cache expired
        # `a//b` makes the directory `a`, `sub/..` the directory `sub`; the keys themselves
        # have no file name the mount could read them by, and are skipped with a warning.
        assert set(os.listdir(point / "d")) == {"ok.txt", "a", "sub"}
        assert os.listdir(point / "d" / "a") == [] and os.listdir(point / "d" / "sub") == []
        assert "d" in os.listdir(point)
    assert (point / "d" / "ok.txt").read_bytes() == b"x"
    with pytest.raises(OSError) as err:
        os.stat(point / "d" / long)
    assert err.value.errno == 36  # ENAMETOOLONG
    with pytest.raises(OSError) as err:
        os.mkfifo(point / "fifo")
    assert err.value.errno == 1  # EPERM, as the errno table says
