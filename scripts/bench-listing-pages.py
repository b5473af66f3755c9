#!/usr/bin/env python3
"""Times ListObjectsV2 pages of 1,000 keys in one directory of 10⁵, 10⁶ and 10⁷ keys (built by
scripts/bench-listing-build.py): the first page, then pages starting at 10%, 50% and 90%.

    scripts/bench-listing-pages.py ENDPOINT LABEL [N7_KEYS] [REPS]
"""
import sys, time, statistics
import boto3
from botocore.config import Config

endpoint, label = sys.argv[1], sys.argv[2]
sizes = [("n5", 100_000), ("n6", 1_000_000), ("n7", int(sys.argv[3]) if len(sys.argv) > 3 else 10_000_000)]
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s",
                  region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}, read_timeout=900, retries={"max_attempts": 1}))
for prefix, n in sizes:
    t = time.perf_counter()
    page = s3.list_objects_v2(Bucket="flat", Prefix=f"{prefix}/", MaxKeys=1000)
    cold = time.perf_counter() - t
    assert len(page["Contents"]) == 1000, prefix
    times = []
    for r in range(reps):
        for frac in (0.1, 0.5, 0.9):
            after = f"{prefix}/s{int(n * frac):08d}.jpg"
            t = time.perf_counter()
            page = s3.list_objects_v2(Bucket="flat", Prefix=f"{prefix}/", MaxKeys=1000, StartAfter=after)
            times.append(time.perf_counter() - t)
            assert page["Contents"][0]["Key"] > after and len(page["Contents"]) == 1000
    print(f"{label} {prefix} keys={n} first_page={cold:.3f}s page_median={statistics.median(times):.3f}s "
          f"page_max={max(times):.3f}s pages={len(times)}", flush=True)
