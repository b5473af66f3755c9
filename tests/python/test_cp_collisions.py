"""`bucketload cp -r` of a prefix whose keys cannot all become local files: an object `d/a` beside
objects below `d/a/` (S3 holds both; a folder cannot also be a file). Every other object is
copied with its bytes, each object that cannot be is named on stderr, the exit code is the
documented partial-copy code 7, and the outcome is the same on every run. The fixture is written
with boto3 on moto's server (which, like S3, holds both keys)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import make_client
from test_cli_dataset import moto  # noqa: F401  (a fixture)

PARTIAL = 7


def cp(bucketload_bin, env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([bucketload_bin, "cp", *args], env=env, capture_output=True, text=True,
                          check=False,
                          timeout=300)


def local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_cp_down_copies_all_but_the_file_a_folder_shadows(bucketload_bin, moto, tmp_path):  # noqa: F811
    endpoint, env = moto
    s3 = make_client(endpoint, key="moto", secret="moto")
    bucket = f"collide-{os.urandom(4).hex()}"
    s3.create_bucket(Bucket=bucket)
    shadowed = {"d/a": b"the file a", "d/x": b"the file x", "d/x/": b""}
    copyable = {"d/a/b": b"below a", "d/a/c/e": b"deeper", "d/b": b"unrelated b",
                "d/z/after": b"after the collision", "d/a-b": b"a sibling", "d/x/y": b"below x"}
    for key, body in {**shadowed, **copyable}.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)

    runs = []
    for attempt in range(3):
        dst = tmp_path / f"down-{attempt}"
        done = cp(bucketload_bin, env, "-r", f"s3://{bucket}/d", str(dst))
        assert done.returncode == PARTIAL, done.stderr
        want = {k.removeprefix("d/"): v for k, v in copyable.items()}
        assert local_files(dst) == want, "every object that can be a file is copied, byte-exact"
        for key in ("d/a", "d/x"):
            assert f"s3://{bucket}/{key}" in done.stderr, done.stderr
        assert "d/a/b" not in done.stderr, "copied objects are not named as failures"
        assert "2 objects" in done.stderr, done.stderr
        runs.append((done.returncode, local_files(dst)))
    assert runs[0] == runs[1] == runs[2], "the same outcome on every run"


def test_cp_down_into_a_folder_whose_files_are_in_the_way(bucketload_bin, moto, tmp_path):  # noqa: F811
    endpoint, env = moto
    s3 = make_client(endpoint, key="moto", secret="moto")
    bucket = f"collide-{os.urandom(4).hex()}"
    s3.create_bucket(Bucket=bucket)
    objects = {"p/a/b": b"below a", "p/dir": b"a file where a folder is", "p/ok": b"fine"}
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    dst = tmp_path / "dst"
    (dst / "dir").mkdir(parents=True)
    (dst / "a").write_bytes(b"a local file")

    done = cp(bucketload_bin, env, "-r", f"s3://{bucket}/p", str(dst))
    assert done.returncode == PARTIAL, done.stderr
    assert (dst / "ok").read_bytes() == b"fine"
    assert (dst / "a").read_bytes() == b"a local file", "what was there is left alone"
    assert (dst / "dir").is_dir()
    for key in ("p/a/b", "p/dir"):
        assert f"s3://{bucket}/{key}" in done.stderr, done.stderr


def test_cp_up_beside_conflicting_keys(bucketload_bin, moto, tmp_path):  # noqa: F811
    """A local tree copied into a prefix that holds an object where the tree has a folder: S3
    keys are not files, so both are kept and the copy succeeds."""
    endpoint, env = moto
    s3 = make_client(endpoint, key="moto", secret="moto")
    bucket = f"collide-{os.urandom(4).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="up/a", Body=b"an object named like a folder")
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "b").write_bytes(b"below a")
    done = cp(bucketload_bin, env, "-r", str(src), f"s3://{bucket}/up")
    assert done.returncode == 0, done.stderr
    got = {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in ("up/a", "up/a/b")}
    assert got == {"up/a": b"an object named like a folder", "up/a/b": b"below a"}
