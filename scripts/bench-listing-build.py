#!/usr/bin/env python3
"""Builds the datasets of the listing benchmarks (docs/BENCHMARKS.md, "Listings at scale") in
an embedded server's root, cheaply: a few real objects written through the server, then hard
links of their data files and sidecars (ext4 allows 65,000 links per inode, so 60,000 per seed).

    scripts/bench-listing-build.py BUCKETLOAD_BIN ROOT [tools|flat]
    # then: bucketload serve --root ROOT ...; scripts/bench-listing-pages.py ENDPOINT LABEL

Buckets: `tools` with t5/ (100 classes × 1,000), t50/ (500 × 1,000), t1m/ (1,000 × 1,000) and
t2m/ (1,000 classes × 2,000) for the CLI tools; `flat` with n5/, n6/, n7/: 10⁵, 10⁶, 10⁷ keys in
one directory each for the server. The third argument builds only one of the two.
Delete ROOT when done: 10⁷ links cost about 1 GB of directory blocks.
"""
import io, os, subprocess, sys, time, socket
import boto3
from botocore.config import Config
from PIL import Image

BIN, ROOT = sys.argv[1], sys.argv[2]
ONLY = sys.argv[3] if len(sys.argv) > 3 else None
os.makedirs(ROOT, exist_ok=True)
port = 9377
proc = subprocess.Popen([BIN, "serve", "--root", ROOT, "--addr", f"127.0.0.1:{port}",
                         "--access-key", "k", "--secret-key", "s"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", port)).close(); break
    except OSError:
        time.sleep(0.1)
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="k",
                  aws_secret_access_key="s", region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
buf = io.BytesIO(); Image.new("RGB", (32, 24), (200, 10, 10)).save(buf, "JPEG")
SEEDS = {"flat": 200, "tools": 70}
PER_SEED = 60000  # ext4 allows 65,000 links per inode
for b, n in SEEDS.items():
    s3.create_bucket(Bucket=b)
    for j in range(n):
        s3.put_object(Bucket=b, Key=f"seed/seed{j:03d}.jpg", Body=buf.getvalue())
proc.terminate(); proc.wait()
made = {"flat": 0, "tools": 0}

def link(bucket, key):
    j = made[bucket] // PER_SEED
    made[bucket] += 1
    for base in (f"{ROOT}/{bucket}", f"{ROOT}/.bucketload/meta/{bucket}"):
        os.link(f"{base}/seed/seed{j:03d}.jpg", f"{base}/{key}")

def mkdirs(bucket, d):
    for base in (f"{ROOT}/{bucket}", f"{ROOT}/.bucketload/meta/{bucket}"):
        os.makedirs(f"{base}/{d}", exist_ok=True)

def tools(prefix, classes, per):
    for c in range(classes):
        d = f"{prefix}/class_{c:04d}"
        mkdirs("tools", d)
        for i in range(per):
            link("tools", f"{d}/sample_{c * per + i:08d}.jpg")
    print("tools", prefix, classes * per, time.strftime("%T"), flush=True)

def flat(prefix, n):
    mkdirs("flat", prefix)
    for i in range(n):
        link("flat", f"{prefix}/s{i:08d}.jpg")
        if i % 1000000 == 0:
            print("flat", prefix, i, time.strftime("%T"), flush=True)
    print("flat", prefix, n, "done", time.strftime("%T"), flush=True)

if ONLY in (None, "tools"):
    tools("t5", 100, 1000)
    tools("t50", 500, 1000)
    tools("t1m", 1000, 1000)
    tools("t2m", 1000, 2000)
if ONLY in (None, "flat"):
    flat("n5", 100_000)
    flat("n6", 1_000_000)
    flat("n7", 10_000_000)
print("ALL DONE", flush=True)
