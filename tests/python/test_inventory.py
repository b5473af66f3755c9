"""`bucketload manifest --from-inventory`: a dataset's manifest from an S3 Inventory report
instead of a LIST, against `bucketload serve`. The report is written the way S3 writes one (a
manifest.json naming gzipped CSV data files with their MD5s, keys URL-encoded, in a destination
bucket) with boto3, and every effect is checked with boto3 or by reading the dataset."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import urllib.parse

import pytest
from test_cli_dataset import moto, ok, run  # noqa: F401  (moto is a fixture)
from test_package import env  # noqa: F401  (a fixture)

KEYS = [
    "train/class_a/1.jpg",
    "train/class_a/with space.jpg",
    "train/class_a/plus+sign.jpg",
    "train/class_b/ü.jpg",
    "train/class_b/2.jpg",
]
SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"


def _row(*fields: str) -> str:
    return ",".join(f'"{f}"' for f in fields)


def _report(s3, data: str, inv: str, rows: list[str], fmt: str = "CSV", md5: str | None = None):
    """Writes an inventory report of bucket `data` into bucket `inv`: its data file (rows in
    the given order) and manifest.json; returns the manifest's URI."""
    base = f"{data}/daily/2026-11-28T01-00Z"
    body = gzip.compress(("\n".join(rows) + "\n").encode())
    s3.put_object(Bucket=inv, Key=f"{data}/daily/data/part-0.csv.gz", Body=body)
    manifest = {
        "sourceBucket": data,
        "destinationBucket": f"arn:aws:s3:::{inv}",
        "version": "2016-11-30",
        "creationTimestamp": "1795914000000",
        "fileFormat": fmt,
        "fileSchema": SCHEMA,
        "files": [
            {
                "key": f"{data}/daily/data/part-0.csv.gz",
                "size": len(body),
                "MD5checksum": md5 or hashlib.md5(body).hexdigest(),
            }
        ],
    }
    s3.put_object(Bucket=inv, Key=f"{base}/manifest.json", Body=json.dumps(manifest).encode())
    return f"s3://{inv}/{base}/manifest.json"


@pytest.fixture
def buckets(s3, request):
    name = request.node.name.replace("_", "-")[:30].strip("-").lower()
    data, inv = f"d-{name}", f"i-{name}"
    for b in (data, inv):
        s3.create_bucket(Bucket=b)
    rows = []
    for i, key in enumerate(KEYS):
        body = bytes([i]) * (100 + i)
        etag = s3.put_object(Bucket=data, Key=key, Body=body)["ETag"].strip('"')
        rows.append(_row(data, urllib.parse.quote_plus(key, safe="/"), "v1", "true", "false",
                         str(len(body)), "2026-11-27T00:00:00.000Z", etag))
    # What the report also holds and the dataset must not: another prefix, a delete marker,
    # a noncurrent version; and the rows out of key order.
    s3.put_object(Bucket=data, Key="other/x.jpg", Body=b"x")
    rows.append(_row(data, "other/x.jpg", "v1", "true", "false", "1", "2026-11-27T00:00:00.000Z",
                     "9dd4e461268c8034f5c8564e155c67a6"))
    rows.append(_row(data, "train/class_a/gone.jpg", "v2", "true", "true", "", "", ""))
    rows.append(_row(data, "train/class_a/1.jpg", "v0", "false", "false", "7",
                     "2026-11-26T00:00:00.000Z", "00000000000000000000000000000000"))
    rows.reverse()
    return data, inv, rows


def _read(bucketload_bin, env, uri: str):  # noqa: F811
    return run(bucketload_bin, env, "read", uri, "--json", "--no-shuffle")


def test_a_report_makes_the_manifest_of_the_current_objects(bucketload_bin, env, s3,  # noqa: F811
                                                            buckets):
    data, inv, rows = buckets
    manifest = _report(s3, data, inv, rows)
    out = ok(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory", manifest)
    assert "5 files" in out and "2 delete markers or noncurrent versions left out" in out, out
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=data, Prefix="train/_bucketload/")
              ["Contents"]}
    assert listed == {"train/_bucketload/manifest.bin"}
    # The same dataset as a LIST describes: every object, read with its label.
    report = json.loads(ok(bucketload_bin, env, "read", f"s3://{data}/train", "--json"))
    assert report["epochs"][0]["samples"] == len(KEYS)
    assert report["epochs"][0]["bytes"] == sum(100 + i for i in range(len(KEYS)))


def test_an_object_the_report_lists_but_the_store_lost_is_an_error_naming_it(
        bucketload_bin, env, s3, buckets):  # noqa: F811
    data, inv, rows = buckets
    ok(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory",
       _report(s3, data, inv, rows))
    s3.delete_object(Bucket=data, Key="train/class_b/ü.jpg")
    got = _read(bucketload_bin, env, f"s3://{data}/train")
    assert got.returncode != 0
    assert f"s3://{data}/train/class_b/ü.jpg" in got.stderr, got.stderr
    assert "manifest" in got.stderr, got.stderr


def test_a_damaged_or_unsupported_report_writes_nothing(bucketload_bin, env, s3,  # noqa: F811
                                                        buckets):
    data, inv, rows = buckets
    bad = _report(s3, data, inv, rows, md5="0" * 32)
    got = run(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory", bad)
    assert got.returncode != 0
    assert "part-0.csv.gz" in got.stderr and "MD5" in got.stderr, got.stderr
    parquet = _report(s3, data, inv, rows, fmt="Parquet")
    got = run(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory", parquet)
    assert got.returncode != 0
    assert "Parquet" in got.stderr and "CSV" in got.stderr, got.stderr
    other = _report(s3, inv, inv, [])  # a report of another bucket
    got = run(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory", other)
    assert got.returncode != 0 and f"not of {data}" in got.stderr, got.stderr
    resp = s3.list_objects_v2(Bucket=data, Prefix="train/_bucketload/")
    assert resp.get("KeyCount", 0) == 0, resp.get("Contents")


@pytest.fixture
def big(request, server, store):
    """A data bucket and an inventory bucket on the embedded server or on moto, the
    environment of that server, and manifest parts of 5 MiB (S3's smallest)."""
    name, s3, data = store
    inv = f"{data}-inv"
    s3.create_bucket(Bucket=inv)
    env = server.env() if name == "bucketload" else request.getfixturevalue("moto")[1]
    return s3, data, inv, dict(env, BUCKETLOAD_MANIFEST_PART_SIZE="5MiB")


BIG_ROWS = 300_000
FIVE_MIB = 5 << 20


def test_a_manifest_over_a_part_is_one_multipart_upload(bucketload_bin, big):
    """300,000 objects make a manifest of over 5 MiB: sent as a multipart upload of 5 MiB
    parts, complete, no upload left behind, the same dataset as the report says. The report's
    rows come in two runs (the second half first), so half the entries are merged in."""
    s3, data, inv, env = big
    rng = random.Random(5)
    rows = [_row(data, f"train/c{i % 4}/{i:07d}.jpg", "", "true", "false", str(1000 + i % 97),
                 "2026-11-27T00:00:00.000Z", f"{rng.getrandbits(128):032x}")
            for i in range(BIG_ROWS)]
    rows = rows[BIG_ROWS // 2:] + rows[:BIG_ROWS // 2]
    manifest = _report(s3, data, inv, rows)
    ok(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory", manifest)
    head = s3.head_object(Bucket=data, Key="train/_bucketload/manifest.bin")
    size = head["ContentLength"]
    assert size > FIVE_MIB, size
    assert head["ETag"].strip('"').endswith(f"-{-(-size // FIVE_MIB)}"), (head["ETag"], size)
    assert not s3.list_multipart_uploads(Bucket=data).get("Uploads")
    stats = json.loads(ok(bucketload_bin, env, "stats", f"s3://{data}/train", "--json",
                          "--sample", "0"))
    assert (stats["from"], stats["objects"]) == ("manifest", BIG_ROWS), stats
    assert stats["classes"] == {f"c{k}": BIG_ROWS // 4 for k in range(4)}, stats["classes"]
    assert stats["bytes"] == sum(1000 + i % 97 for i in range(BIG_ROWS))
