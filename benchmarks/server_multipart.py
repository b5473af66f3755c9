"""Multipart uploads into an S3 endpoint with boto3: how long the parts take and how long
CompleteMultipartUpload takes, for a new key and for a key that already holds an object of the
same size (the completion then also replaces it).

    python benchmarks/server_multipart.py --endpoint http://127.0.0.1:9000 \\
        --parts 128 --part-size 8MiB --threads 8 --rounds 3

Each round uploads the parts from `--threads` threads, in order of part number, then completes.
The object read back must have the ETag S3 defines for it (MD5 of the parts' MD5s, "-N").
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import os
import statistics
import time

import boto3
from botocore.config import Config


def size_arg(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", default="multipart-bench")
    ap.add_argument("--parts", type=int, default=128)
    ap.add_argument("--part-size", type=size_arg, default=8 << 20)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    s3 = boto3.client(
        "s3", endpoint_url=args.endpoint,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "bucketload"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "bucketload-dev-secret"),
        region_name="us-east-1", config=Config(max_pool_connections=args.threads * 2))
    try:
        s3.create_bucket(Bucket=args.bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    part = os.urandom(args.part_size)
    digest = hashlib.md5(hashlib.md5(part).digest() * args.parts).hexdigest()
    want_etag = f'"{digest}-{args.parts}"'
    total = args.parts * args.part_size
    print(f"{args.parts} parts of {args.part_size} bytes ({total / (1 << 30):.2f} GiB) from "
          f"{args.threads} threads, {args.rounds} rounds, {args.endpoint}")

    def upload(key: str) -> tuple[float, float]:
        up = s3.create_multipart_upload(Bucket=args.bucket, Key=key)["UploadId"]

        def send(n: int) -> dict:
            r = s3.upload_part(Bucket=args.bucket, Key=key, UploadId=up, PartNumber=n, Body=part)
            return {"PartNumber": n, "ETag": r["ETag"]}

        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(args.threads) as pool:
            parts = list(pool.map(send, range(1, args.parts + 1)))
        t1 = time.perf_counter()
        done = s3.complete_multipart_upload(Bucket=args.bucket, Key=key, UploadId=up,
                                            MultipartUpload={"Parts": parts})
        t2 = time.perf_counter()
        if done["ETag"] != want_etag:
            raise SystemExit(f"{key}: ETag {done['ETag']}, expected {want_etag}")
        head = s3.head_object(Bucket=args.bucket, Key=key)
        if head["ContentLength"] != total:
            raise SystemExit(f"{key}: {head['ContentLength']} bytes, expected {total}")
        return t1 - t0, t2 - t1

    upload("replaced")  # so that every timed upload of this key replaces an object
    times: dict[str, list[float]] = {"parts new": [], "complete new": [],
                                     "parts replace": [], "complete replace": []}
    for rnd in range(args.rounds):
        for case, key in (("new", f"new-{rnd}"), ("replace", "replaced")):
            sent, completed = upload(key)
            times[f"parts {case}"].append(sent)
            times[f"complete {case}"].append(completed)
            print(f"round {rnd + 1}, {case} key: parts {sent:.2f} s, complete {completed:.3f} s",
                  flush=True)
        s3.delete_object(Bucket=args.bucket, Key=f"new-{rnd}")
    print()
    print(f"{'':18} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, values in times.items():
        print(f"{name:18} {statistics.median(values):9.3f} {min(values):7.3f} {max(values):7.3f}")


if __name__ == "__main__":
    main()
