"""Writes the streaming peers' datasets from a one-object-per-sample dataset (`bucketload gen`),
each with the tool's own writer, for the cache benchmark (scripts/bench-peers.sh):

  mosaic   MosaicML Streaming's `MDSWriter`, columns `jpg` (bytes), `label` (int), `idx` (int),
           shards of --shard-size (its `size_limit`), uploaded to --mosaic-uri;
  litdata  `litdata.optimize`, samples {"jpg": bytes, "label": int, "idx": int}, chunks of
           --shard-size (its `chunk_bytes`), uploaded to --litdata-uri.

`idx` is the sample's position in the source's sorted listing, so a reader can check that it
read every sample exactly once. The images are fetched with boto3 into a local staging
directory, each tool writes locally, and the files are uploaded with boto3 (each tool can also
upload by itself, but only to endpoints it can reach: see streaming_cache.py).

    .venv-peers/bin/python benchmarks/peers/streaming_write.py --endpoint http://127.0.0.1:9000 \\
        --source s3://bench/files --mosaic-uri s3://bench/mds --litdata-uri s3://bench/litdata \\
        --work /tmp/w

Prints one JSON line per tool: shards, bytes, seconds to write and upload.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cache_common import list_source, s3_client, split_uri

# The writers' inputs: one staged image per sample, named by its index.
STAGED = "{}.jpg"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"),
                    help="S3 endpoint [env: AWS_ENDPOINT_URL]")
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    ap.add_argument("--source", default="s3://bench/files",
                    help="the images [default: s3://bench/files]")
    ap.add_argument("--mosaic-uri", default="s3://bench/mds")
    ap.add_argument("--litdata-uri", default="s3://bench/litdata")
    ap.add_argument("--tools", default="mosaic,litdata", help="which to write [default: both]")
    ap.add_argument("--shard-size", type=int, default=64_000_000,
                    help="largest shard or chunk in bytes [default: 64000000: 64MB]")
    ap.add_argument("--work", required=True, help="a scratch directory")
    args = ap.parse_args()
    if not args.endpoint:
        ap.error("no endpoint: pass --endpoint or set AWS_ENDPOINT_URL")
    return args


def stage(client: Any, source_uri: str, directory: str) -> tuple[list[str], list[int]]:
    """Every image of the source into `directory` as `<idx>.jpg`; the paths and labels."""
    source = list_source(client, source_uri)
    bucket, _ = split_uri(source_uri)
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, STAGED.format(i)) for i in range(len(source.keys))]

    def fetch(i: int) -> None:
        client.download_file(bucket, source.keys[i], paths[i])

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(fetch, range(len(paths))))
    return paths, source.labels


def upload(client: Any, directory: str, uri: str) -> tuple[int, int]:
    """Every file under `directory` to `uri`, keeping relative paths; (files, bytes)."""
    bucket, prefix = split_uri(uri)
    files = [os.path.join(root, name) for root, _, names in os.walk(directory) for name in names]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda path: client.upload_file(
            path, bucket, prefix + os.path.relpath(path, directory)), files))
    return len(files), sum(os.path.getsize(path) for path in files)


def write_mosaic(paths: list[str], labels: list[int], out: str, shard_size: int) -> None:
    from streaming import MDSWriter
    columns = {"jpg": "bytes", "label": "int", "idx": "int"}
    with MDSWriter(out=out, columns=columns, size_limit=shard_size) as writer:
        for i, (path, label) in enumerate(zip(paths, labels, strict=True)):
            with open(path, "rb") as f:
                writer.write({"jpg": f.read(), "label": label, "idx": i})


class LitSample:
    """`litdata.optimize`'s function: one input (index, path, label) to one sample."""

    def __call__(self, item: tuple[int, str, int]) -> dict:
        i, path, label = item
        with open(path, "rb") as f:
            return {"jpg": f.read(), "label": label, "idx": i}


def write_litdata(paths: list[str], labels: list[int], out: str, shard_size: int) -> None:
    from litdata import optimize
    inputs = [(i, path, label) for i, (path, label) in enumerate(zip(paths, labels, strict=True))]
    # One worker keeps the samples in input order in one sequence of chunks.
    optimize(fn=LitSample(), inputs=inputs, output_dir=out, chunk_bytes=shard_size, num_workers=1,
             mode="overwrite")


def main() -> None:
    args = parse_args()
    client = s3_client(args.endpoint, args.region)
    paths, labels = stage(client, args.source, os.path.join(args.work, "images"))
    writers = {"mosaic": (write_mosaic, args.mosaic_uri),
               "litdata": (write_litdata, args.litdata_uri)}
    for tool in args.tools.split(","):
        write, uri = writers[tool]
        out = os.path.join(args.work, tool)
        shutil.rmtree(out, ignore_errors=True)
        start = time.monotonic()
        write(paths, labels, out, args.shard_size)
        written = time.monotonic() - start
        files, nbytes = upload(client, out, uri)
        print(json.dumps({"tool": tool, "uri": uri, "samples": len(paths), "files": files,
                          "bytes": nbytes, "write_s": round(written, 2),
                          "upload_s": round(time.monotonic() - start - written, 2)}), flush=True)
        shutil.rmtree(out)
    shutil.rmtree(os.path.join(args.work, "images"))


if __name__ == "__main__":
    main()
