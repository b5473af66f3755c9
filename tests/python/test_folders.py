"""Folder markers (keys ending in ``/``, as the S3 console's "Create folder" and
``put_object(Key="dir/")`` make them) are folders, never samples: ``bucketload.Loader`` and
``S3IterableDataset`` see exactly the objects, against a real `bucketload serve`, the markers
written with boto3."""

from __future__ import annotations

import bucketload
from bucketload.s3torch import S3IterableDataset, S3MapDataset

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

SAMPLES = 24


def test_loader_and_dataset_skip_folder_markers(bucketload_bin, env, s3):  # noqa: F811
    bucket = "folder-markers"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/d", "--samples", str(SAMPLES), "--classes",
       "3", "--size", "2KB")
    for key in ["d/", "d/class_000/", "d/empty/", "d/empty/deeper/"]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    objects = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="d/")["Contents"]]
    assert len(objects) == SAMPLES + 4, "boto3 sees the markers as objects"

    data = bucketload.Loader(f"s3://{bucket}/d", batch_size=8, image_size=16, shuffle=False)
    assert len(data) == SAMPLES // 8
    labels = [int(label) for _images, batch in data for label in batch]
    assert sorted(labels) == sorted(i % 3 for i in range(SAMPLES))

    ds = S3IterableDataset(f"s3://{bucket}/d", endpoint=env["AWS_ENDPOINT_URL"])
    keys = sorted(sample.key for sample in ds)
    assert keys == sorted(k for k in objects if not k.endswith("/"))

    mapped = S3MapDataset.from_prefix(f"s3://{bucket}/d", endpoint=env["AWS_ENDPOINT_URL"])
    assert len(mapped) == SAMPLES
    assert sorted(mapped[i].key for i in range(len(mapped))) == keys
