"""The files catalog of a dataset is built once per node: processes started with ``spawn`` that
open the same dataset map one file (seen in /proc/self/maps) and read the same samples; a
damaged file is rebuilt, not used. Against a real `bucketload serve`."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import bucketload

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)


def _mapped_catalogs(directory: str) -> set[tuple[str, int]]:
    """(path, inode) of every mapping of a file in ``directory``."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip().startswith(directory):
                found.add((fields[5].strip(), int(fields[4])))
    return found


def _open_and_read(uri: str, directory: str, barrier, results) -> None:
    loader = bucketload.Loader(uri, decode=False, shuffle=False, batch_size=5)
    samples = len(loader)  # opens the dataset
    barrier.wait()  # both processes hold their loader open
    keys = [s["__key__"] for batch in loader for s in batch]
    results.put((os.getpid(), _mapped_catalogs(directory), samples, keys))


def _spawn(uri: str, directory: str, n: int) -> list[tuple]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_open_and_read, args=(uri, directory, barrier, results))
             for _ in range(n)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return got


def test_spawned_processes_map_one_catalog_and_a_damaged_one_is_rebuilt(
        bucketload_bin, env, s3, tmp_path, monkeypatch):  # noqa: F811
    bucket = "shared-catalog"
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/train"
    ok(bucketload_bin, env, "gen", uri, "--samples", "30", "--classes", "3", "--size", "2KB")
    ok(bucketload_bin, env, "manifest", uri)
    directory = str(tmp_path / "catalogs")
    monkeypatch.setenv("BUCKETLOAD_CATALOG_DIR", directory)
    listed = sorted(o["Key"].removeprefix("train/")
                    for o in s3.list_objects_v2(Bucket=bucket, Prefix="train/")["Contents"]
                    if not o["Key"].startswith("train/_bucketload/"))

    first, second = _spawn(uri, directory, 2)
    files = sorted(p for p in os.listdir(directory) if p.endswith(".files"))
    assert len(files) == 1, files
    path = os.path.join(directory, files[0])
    inode = os.stat(path).st_ino
    for _, mapped, samples, keys in (first, second):
        assert mapped == {(path, inode)}
        assert samples == 6
        assert keys == listed
    assert first[0] != second[0]

    # One flipped byte: the next process rebuilds the file (a new inode) and reads the same.
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0x40
    Path(path).write_bytes(bytes(data))
    (_, mapped, _, keys), = _spawn(uri, directory, 1)
    rebuilt = os.stat(path).st_ino
    assert mapped == {(path, rebuilt)}
    assert Path(path).read_bytes() != bytes(data)
    assert keys == listed


def test_opening_a_loader_imports_no_ray(bucketload_bin, env, s3, tmp_path):  # noqa: F811
    """Asking whether this process is a Ray Train worker must not import ray (with pyarrow and
    pydantic: ~140 MB of every DataLoader worker's memory, more than the catalog of 10⁷
    samples)."""
    import subprocess
    import sys

    bucket = "no-ray"
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/train"
    ok(bucketload_bin, env, "gen", uri, "--samples", "6", "--classes", "2", "--size", "1KB")
    ok(bucketload_bin, env, "manifest", uri)
    code = ("import sys, bucketload; loader = bucketload.Loader(sys.argv[1], decode=False); "
            "assert len(loader) > 0; print(sorted(m for m in ('ray', 'pyarrow') "
            "if m in sys.modules))")
    child_env = {**os.environ, "BUCKETLOAD_CATALOG_DIR": str(tmp_path / "catalogs")}
    out = subprocess.run([sys.executable, "-c", code, uri], env=child_env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
