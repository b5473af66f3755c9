"""Builds large datasets for scripts/bench-scale.sh without the disk they would take.

Every shard of a shards dataset is a hard link to one real shard (and its index), every object
of a files dataset a hard link to one real JPEG, made directly in the embedded server's root
directory together with the server's sidecar (which records the shared inode, so the server
serves each link as an object of its own). Only the manifest is written through S3 (boto3), so
the server indexes it as any upload. 10^9 samples in 10^6 shards cost one shard of data and
2 x 10^6 directory entries.

    build.py shards ROOT BUCKET PREFIX SHARDS --source one/shard-000000.tar
    build.py files ROOT BUCKET PREFIX OBJECTS --source src/class_000/000000.jpg [--classes 1000]
    build.py remove ROOT BUCKET PREFIX
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import boto3


def meta(root: Path, bucket: str, key: str) -> Path:
    return root / ".bucketload" / "meta" / bucket / key


def link(root: Path, bucket: str, source: str, key: str) -> None:
    data = root / bucket / key
    os.link(root / bucket / source, data)
    os.link(meta(root, bucket, source), meta(root, bucket, key))


def progress(done: int, total: int, started: float) -> None:
    if done == total or done % 100_000 == 0:
        rate = done / max(time.monotonic() - started, 1e-9)
        print(f"  {done:,}/{total:,} links ({rate:,.0f}/s)", file=sys.stderr, flush=True)


def s3():
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def put_manifest(bucket: str, prefix: str, write) -> None:
    """Writes the manifest (streamed by `write` into a temporary file) and uploads it."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        write(f)
    try:
        s3().upload_file(f.name, bucket, f"{prefix}/_bucketload/manifest.json")
    finally:
        os.unlink(f.name)


def header(kind: str, source: str, samples: int, size: int, classes: list[dict]) -> str:
    parameters = {
        "source": source,
        "label_policy": "folder",
        "tool_version": "bench-scale",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    head = {
        "format_version": 1,
        "kind": kind,
        "parameters": parameters,
        "samples": samples,
        "bytes": size,
        "classes": classes,
    }
    return json.dumps(head)[:-1]  # the entries follow, then "}"


def shards(a: argparse.Namespace) -> None:
    root, bucket = Path(a.root), a.bucket
    source = json.loads((meta(root, bucket, a.source)).read_text())
    index = a.source + ".idx"
    one = json.loads(
        (root / bucket / Path(a.source).parent / "_bucketload" / "manifest.json").read_text()
    )
    entry = one["shards"][0]
    for d in (root / bucket / a.prefix, meta(root, bucket, a.prefix)):
        d.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    names = [f"shard-{i:07d}.tar" for i in range(a.count)]
    for i, name in enumerate(names, 1):
        link(root, bucket, a.source, f"{a.prefix}/{name}")
        link(root, bucket, index, f"{a.prefix}/{name}.idx")
        progress(i, a.count, started)
    samples = entry["samples"]
    classes = [{"name": c["name"], "count": c["count"] * a.count} for c in one["classes"]]

    def write(f) -> None:
        f.write(
            header("shards", "bench-scale", samples * a.count, source["size"] * a.count, classes)
        )
        f.write(', "files": [], "shards": [')
        for i, name in enumerate(names):
            e = dict(entry, name=name, index=name + ".idx")
            f.write(("," if i else "") + json.dumps(e))
        f.write("]}")

    put_manifest(bucket, a.prefix, write)


def files(a: argparse.Namespace) -> None:
    root, bucket = Path(a.root), a.bucket
    source = json.loads(meta(root, bucket, a.source).read_text())
    per_class = -(-a.count // a.classes)
    keys = [f"train/class_{i // per_class:03d}/sample_{i:07d}.jpg" for i in range(a.count)]
    started = time.monotonic()
    made: set[str] = set()
    for i, key in enumerate(keys, 1):
        folder = key.rsplit("/", 1)[0]
        if folder not in made:
            for d in (
                root / bucket / a.prefix / folder,
                meta(root, bucket, f"{a.prefix}/{folder}"),
            ):
                d.mkdir(parents=True, exist_ok=True)
            made.add(folder)
        link(root, bucket, a.source, f"{a.prefix}/{key}")
        progress(i, a.count, started)
    crc = a.crc32c
    counts: dict[str, int] = {}
    for key in keys:
        name = key.split("/")[1]
        counts[name] = counts.get(name, 0) + 1
    classes = [{"name": n, "count": c} for n, c in sorted(counts.items())]

    def write(f) -> None:
        f.write(header("files", "bench-scale", a.count, source["size"] * a.count, classes))
        f.write(', "shards": [], "files": [')
        for i, key in enumerate(keys):
            e = {"key": key, "size": source["size"], "etag": source["etag"]}
            if crc:
                e["crc32c"] = crc
            f.write(("," if i else "") + json.dumps(e))
        f.write("]}")

    put_manifest(bucket, a.prefix, write)


def remove(a: argparse.Namespace) -> None:
    root = Path(a.root)
    for d in (root / a.bucket / a.prefix, meta(root, a.bucket, a.prefix)):
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    for name in ("shards", "files"):
        s = sub.add_parser(name)
        s.add_argument("root")
        s.add_argument("bucket")
        s.add_argument("prefix")
        s.add_argument("count", type=int)
        s.add_argument("--source", required=True, help="key of the object every link copies")
        s.add_argument("--classes", type=int, default=1000)
        s.add_argument("--crc32c", help="CRC32C of the source (8 hex digits), for files manifests")
    r = sub.add_parser("remove")
    r.add_argument("root")
    r.add_argument("bucket")
    r.add_argument("prefix")
    a = p.parse_args()
    {"shards": shards, "files": files, "remove": remove}[a.what](a)


if __name__ == "__main__":
    main()
