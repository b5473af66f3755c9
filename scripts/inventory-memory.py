#!/usr/bin/env python3
"""Peak memory of `bucketload manifest --from-inventory` on a report of N rows given in reverse
key order (every row but the first out of order: the worst case of the out-of-order merge),
against a `bucketload serve` started here on loopback over a temporary folder. Prints the
command's output, its CPU and wall time, peak RSS, and the manifest's size and ETag (a
multipart upload's ends in -<parts>).

    .venv/bin/python scripts/inventory-memory.py target/release/bucketload 2000000
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

import boto3
from botocore.config import Config

ACCESS, SECRET = "bucketload", "bucketload-dev-secret"
SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"


def main() -> None:
    binary, rows = sys.argv[1], int(sys.argv[2])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as root:
        server = subprocess.Popen([binary, "serve", "--root", root, "--addr", f"127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            run(binary, rows, f"http://127.0.0.1:{port}", port)
        finally:
            server.terminate()
            server.wait()


def run(binary: str, rows: int, endpoint: str, port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS,
                      aws_secret_access_key=SECRET, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    for bucket in ("data", "inv"):
        s3.create_bucket(Bucket=bucket)
    rng = random.Random(1)
    lines = [f'"data","train/c{i % 100}/{i:09d}.jpg","","true","false","{1000 + i % 997}",'
             f'"2026-11-27T00:00:00.000Z","{rng.getrandbits(128):032x}"' for i in range(rows)]
    lines.reverse()
    body = gzip.compress(("\n".join(lines) + "\n").encode(), 1)
    s3.put_object(Bucket="inv", Key="r/data/part-0.csv.gz", Body=body)
    manifest = {"sourceBucket": "data", "fileFormat": "CSV", "fileSchema": SCHEMA,
                "files": [{"key": "r/data/part-0.csv.gz", "MD5checksum": hashlib.md5(body).hexdigest()}]}
    s3.put_object(Bucket="inv", Key="r/manifest.json", Body=json.dumps(manifest).encode())
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=ACCESS,
               AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1")
    out = subprocess.run(["/usr/bin/time", "-v", binary, "manifest", "s3://data/train",
                          "--from-inventory", "s3://inv/r/manifest.json"],
                         env=env, capture_output=True, text=True, check=False)
    print(out.stdout.strip())
    if out.returncode != 0:
        sys.exit(out.stderr)
    wanted = ("Maximum resident", "Elapsed", "User time", "System time", "error")
    for line in out.stderr.splitlines():
        if any(w in line for w in wanted):
            print(line.strip())
    head = s3.head_object(Bucket="data", Key="train/_bucketload/manifest.bin")
    print("manifest.bin", head["ContentLength"], head["ETag"])


if __name__ == "__main__":
    main()
