"""The usual glue for sharding a bucket of small objects, as a peer for `bucketload shard`:
list with boto3, download with a thread pool (one boto3 client, `--threads` GETs in flight),
append to a Python `tarfile` in key order, and upload each finished shard with boto3's
managed transfer (multipart, parallel parts). Labels as `.cls` members like bucketload's.

    python shard_boto3.py --endpoint http://127.0.0.1:9302 --src s3://bench/train \
        --dst s3://bench/peer-shards --shard-size 256MiB --threads 64

Prints one line: objects, seconds, objects/s, MB/s.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import io
import tarfile
import time

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config


def parse_size(s: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    for unit, mult in units.items():
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * mult)
    return int(s)


def split(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix.rstrip("/")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--shard-size", default="256MiB")
    ap.add_argument("--threads", type=int, default=64)
    args = ap.parse_args()
    limit = parse_size(args.shard_size)
    cfg = Config(s3={"addressing_style": "path"}, max_pool_connections=args.threads + 16)
    s3 = boto3.client("s3", endpoint_url=args.endpoint, config=cfg)
    (sb, sp), (db, dp) = split(args.src), split(args.dst)
    started = time.monotonic()
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sb, Prefix=sp + "/"):
        keys += [(o["Key"], o["Size"]) for o in page.get("Contents", []) if "/_bucketload/" not in o["Key"]]
    keys.sort()
    classes = sorted({k[len(sp) + 1:].split("/")[0] for k, _ in keys})
    transfer = TransferConfig(multipart_chunksize=8 << 20, max_concurrency=8)
    total = 0

    def fetch(key: str) -> bytes:
        return s3.get_object(Bucket=sb, Key=key)["Body"].read()

    shard, buf, tar, size = 0, None, None, 0

    def flush() -> None:
        nonlocal shard, buf, tar
        tar.close()
        buf.seek(0)
        s3.upload_fileobj(buf, db, f"{dp}/shard-{shard:06d}.tar", Config=transfer)
        shard += 1
        buf, tar = None, None

    with cf.ThreadPoolExecutor(args.threads) as pool:
        for (key, _), data in zip(keys, pool.map(fetch, (k for k, _ in keys))):
            rel = key[len(sp) + 1:]
            label = str(classes.index(rel.split("/")[0])).encode()
            need = 512 + -(-len(data) // 512) * 512 + 1024
            if tar is not None and size + need > limit:
                flush()
            if tar is None:
                buf = io.BytesIO()
                tar, size = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT), 1024
            for name, body in ((rel, data), (rel.rsplit(".", 1)[0] + ".cls", label)):
                info = tarfile.TarInfo(name)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
            size += need
            total += len(data)
        if tar is not None:
            flush()
    secs = time.monotonic() - started
    print(f"peer boto3+tarfile: {len(keys)} objects, {total} bytes in {secs:.1f} s: "
          f"{len(keys) / secs:.0f} objects/s, {total / 1e6 / secs:.1f} MB/s, {shard} shards")


if __name__ == "__main__":
    main()
