"""Builds large datasets for scripts/bench-scale.sh without the disk they would take.

Every shard of a shards dataset is a hard link to one real shard (and its index), every object
of a files dataset a hard link to one real JPEG, made directly in the embedded server's root
directory together with the server's sidecar (which records the shared inode, so the server
serves each link as an object of its own). Only the manifest is written through S3 (boto3), so
the server indexes it as any upload. 10^9 samples in 10^6 shards cost one shard of data and
2 x 10^6 directory entries
(and a copy every 60,000 links, as ext4 allows 65,000 links to one file).

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


# ext4 allows 65,000 links to one inode: every this many links start from a fresh copy.
LINKS_PER_COPY = 60_000


class Linker:
    """Makes `key` an object with the bytes of `source`: a hard link to the source, or, every
    LINKS_PER_COPY links, a real copy (with its own sidecar) that the next links share."""

    def __init__(self, root: Path, bucket: str, source: str) -> None:
        self.root, self.bucket = root, bucket
        self.source = source
        self.links = (root / bucket / source).stat().st_nlink

    def link(self, key: str) -> None:
        if self.links >= LINKS_PER_COPY:
            self.copy(key)
            return
        os.link(self.root / self.bucket / self.source, self.root / self.bucket / key)
        os.link(meta(self.root, self.bucket, self.source), meta(self.root, self.bucket, key))
        self.links += 1

    def copy(self, key: str) -> None:
        data = self.root / self.bucket / key
        shutil.copyfile(self.root / self.bucket / self.source, data)
        sidecar = json.loads(meta(self.root, self.bucket, self.source).read_text())
        st = data.stat()
        sidecar.update(inode=st.st_ino, mtime_ns=st.st_mtime_ns, size=st.st_size)
        meta(self.root, self.bucket, key).write_text(json.dumps(sidecar))
        self.source, self.links = key, 1


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
    shard, idx = Linker(root, bucket, a.source), Linker(root, bucket, index)
    for i, name in enumerate(names, 1):
        shard.link(f"{a.prefix}/{name}")
        idx.link(f"{a.prefix}/{name}.idx")
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
    jpeg = Linker(root, bucket, a.source)
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
        jpeg.link(f"{a.prefix}/{key}")
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
