"""`bucketload manifest --from-inventory`: a dataset's manifest from an S3 Inventory report
instead of a LIST, against `bucketload serve`. The report is written the way S3 writes one (a
manifest.json naming its data files with their MD5s, in a destination bucket: gzipped CSV with
keys URL-encoded, or Parquet written by pyarrow with S3's column names and types, Snappy
compressed, keys as they are) with boto3, and every effect is checked with boto3 or by reading
the dataset."""

from __future__ import annotations

import datetime
import gzip
import hashlib
import io
import json
import random
import urllib.parse

import pyarrow as pa
import pyarrow.parquet as pq
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


# The fileSchema S3 writes in the manifest.json of a Parquet report with these fields.
PARQUET_SCHEMA = (
    "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); "
    "optional binary version_id (UTF8); optional boolean is_latest; "
    "optional boolean is_delete_marker; optional int64 size; "
    "optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8); }"
)
# A row: bucket, key (as stored), version id, is latest, is delete marker, size, last
# modified, ETag, as strings ("" for none).
Row = tuple[str, str, str, str, str, str, str, str]


def _row(*fields: str) -> Row:
    return fields  # type: ignore[return-value]


def _csv_line(row: Row) -> str:
    fields = list(row)
    fields[1] = urllib.parse.quote_plus(fields[1], safe="/")
    return ",".join(f'"{f}"' for f in fields)


def _parquet(rows: list[Row]) -> bytes:
    """`rows` as S3 writes a Parquet data file: its column names and types, Snappy, several
    row groups."""
    def opt(v: str) -> str | None:
        return v or None

    def when(v: str) -> datetime.datetime | None:
        return datetime.datetime.fromisoformat(v) if v else None

    columns = list(zip(*rows)) if rows else [()] * 8
    table = pa.table(
        {
            "bucket": pa.array(columns[0], pa.string()),
            "key": pa.array(columns[1], pa.string()),
            "version_id": pa.array([opt(v) for v in columns[2]], pa.string()),
            "is_latest": pa.array([v == "true" for v in columns[3]], pa.bool_()),
            "is_delete_marker": pa.array([v == "true" for v in columns[4]], pa.bool_()),
            "size": pa.array([int(v) if v else None for v in columns[5]], pa.int64()),
            "last_modified_date": pa.array([when(v) for v in columns[6]], pa.timestamp("ms", "UTC")),
            "e_tag": pa.array([opt(v) for v in columns[7]], pa.string()),
        },
        schema=pa.schema([
            pa.field("bucket", pa.string(), nullable=False),
            pa.field("key", pa.string(), nullable=False),
            pa.field("version_id", pa.string()),
            pa.field("is_latest", pa.bool_()),
            pa.field("is_delete_marker", pa.bool_()),
            pa.field("size", pa.int64()),
            pa.field("last_modified_date", pa.timestamp("ms", "UTC")),
            pa.field("e_tag", pa.string()),
        ]),
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy", row_group_size=3)
    return out.getvalue()


def _report(s3, data: str, inv: str, rows: list[Row], fmt: str = "CSV", md5: str | None = None,
            damage=None):
    """Writes an inventory report of bucket `data` into bucket `inv` in `fmt`: its data files
    (rows in the given order; two files for Parquet) and manifest.json (with `md5` for every
    file if given; `damage` applied to each file's bytes before its MD5 is taken); returns the
    manifest's URI."""
    base = f"{data}/daily/2026-11-28T01-00Z"
    if fmt == "Parquet":
        half = len(rows) // 2
        bodies = [("part-0.parquet", _parquet(rows[:half])), ("part-1.parquet", _parquet(rows[half:]))]
        schema = PARQUET_SCHEMA
    else:
        body = gzip.compress(("\n".join(_csv_line(r) for r in rows) + "\n").encode())
        bodies, schema = [("part-0.csv.gz", body)], SCHEMA
    files = []
    for name, body in bodies:
        body = damage(body) if damage else body
        key = f"{data}/daily/data/{name}"
        s3.put_object(Bucket=inv, Key=key, Body=body)
        files.append({"key": key, "size": len(body),
                      "MD5checksum": md5 or hashlib.md5(body).hexdigest()})
    manifest = {
        "sourceBucket": data,
        "destinationBucket": f"arn:aws:s3:::{inv}",
        "version": "2016-11-30",
        "creationTimestamp": "1795914000000",
        "fileFormat": fmt,
        "fileSchema": schema,
        "files": files,
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
        rows.append(_row(data, key, "v1", "true", "false", str(len(body)),
                         "2026-11-27T00:00:00.000Z", etag))
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


@pytest.mark.parametrize("fmt", ["CSV", "Parquet"])
def test_a_report_makes_the_manifest_of_the_current_objects(bucketload_bin, env, s3,  # noqa: F811
                                                            buckets, fmt):
    data, inv, rows = buckets
    manifest = _report(s3, data, inv, rows, fmt=fmt)
    out = ok(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory", manifest)
    assert "5 files" in out and "2 delete markers or noncurrent versions left out" in out, out
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=data, Prefix="train/_bucketload/")
              ["Contents"]}
    assert listed == {"train/_bucketload/manifest.bin"}
    # The same dataset as a LIST describes: every object, read with its label.
    report = json.loads(ok(bucketload_bin, env, "read", f"s3://{data}/train", "--json"))
    assert report["epochs"][0]["samples"] == len(KEYS)
    assert report["epochs"][0]["bytes"] == sum(100 + i for i in range(len(KEYS)))
    # Every key as it is in the bucket (spaces, '+', non-ASCII), each object's ETag kept.
    got = json.loads(ok(bucketload_bin, env, "stats", f"s3://{data}/train", "--json",
                        "--sample", "0"))
    assert (got["from"], got["objects"]) == ("manifest", len(KEYS)), got
    assert got["classes"] == {"class_a": 3, "class_b": 2}, got["classes"]


@pytest.mark.parametrize("fmt", ["CSV", "Parquet"])
def test_an_object_the_report_lists_but_the_store_lost_is_an_error_naming_it(
        bucketload_bin, env, s3, buckets, fmt):  # noqa: F811
    data, inv, rows = buckets
    ok(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory",
       _report(s3, data, inv, rows, fmt=fmt))
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
    orc = _report(s3, data, inv, rows, fmt="ORC")
    got = run(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory", orc)
    assert got.returncode != 0
    assert "ORC" in got.stderr and "CSV or Parquet" in got.stderr, got.stderr
    # A Parquet file cut short (its MD5 in the manifest is of the damaged bytes: only the
    # Parquet reader can tell), and one whose bytes were overwritten in the middle.
    for damage in (lambda b: b[: len(b) // 2], lambda b: b[:8] + bytes(len(b) - 16) + b[-8:]):
        damaged = _report(s3, data, inv, rows, fmt="Parquet", damage=damage)
        got = run(bucketload_bin, env, "manifest", f"s3://{data}/train", "--from-inventory",
                  damaged)
        assert got.returncode != 0, got.stdout
        assert f"s3://{inv}/{data}/daily/data/part-0.parquet" in got.stderr, got.stderr
        assert "Parquet" in got.stderr and "panicked" not in got.stderr, got.stderr
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
    aws = server.env() if name == "bucketload" else request.getfixturevalue("moto")[1]
    return s3, data, inv, dict(aws, BUCKETLOAD_MANIFEST_PART_SIZE="5MiB")


BIG_ROWS = 300_000
FIVE_MIB = 5 << 20


def test_a_manifest_over_a_part_is_one_multipart_upload(bucketload_bin, big):
    """300,000 objects make a manifest of over 5 MiB: sent as a multipart upload of 5 MiB
    parts, complete, no upload left behind, the same dataset as the report says. The report's
    rows come in two runs (the second half first), so half the entries are merged in."""
    s3, data, inv, env = big  # noqa: F811  (not the env fixture)
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
