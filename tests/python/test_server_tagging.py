"""Object and bucket tags on `bucketload serve`, as S3 keeps them, checked with boto3 against
the embedded server and moto's server: tags given on PutObject, CreateMultipartUpload and
CopyObject, PutObjectTagging / GetObjectTagging / DeleteObjectTagging (which leave the bytes,
ETag and Last-Modified alone), S3's limits (10 tags: 400 BadRequest; 128-character keys,
256-character values: 400 InvalidTag; nothing changed), and bucket tags."""

from __future__ import annotations

import pytest

from test_cli_dataset import moto  # noqa: F401  (a fixture)
from test_server_fidelity import _error


def _tags(s3, bucket, key) -> dict:
    return {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}


def _set(tags: dict) -> dict:
    return {"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]}


def test_tags_given_on_put_are_kept_and_counted(store):
    _, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="team=ml&stage=raw%20data")
    assert _tags(s3, bucket, "k") == {"team": "ml", "stage": "raw data"}
    assert s3.get_object(Bucket=bucket, Key="k")["TagCount"] == 2


def test_put_get_delete_tagging_leave_the_object_alone(store):
    _, s3, bucket = store
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"bytes")
    before = s3.head_object(Bucket=bucket, Key="k")
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=_set({"a": "1", "b": ""}))
    assert _tags(s3, bucket, "k") == {"a": "1", "b": ""}
    after = s3.head_object(Bucket=bucket, Key="k")
    assert (after["ETag"], after["LastModified"]) == (put["ETag"], before["LastModified"])
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=_set({"c": "3"}))
    assert _tags(s3, bucket, "k") == {"c": "3"}
    s3.delete_object_tagging(Bucket=bucket, Key="k")
    assert _tags(s3, bucket, "k") == {}
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"bytes"
    assert _error(s3.get_object_tagging, Bucket=bucket, Key="absent")[0] == 404


@pytest.mark.parametrize("tags", [
    {f"k{i}": "v" for i in range(11)},
    {"k" * 129: "v"},
    {"k": "v" * 257},
], ids=["eleven", "long-key", "long-value"])
def test_tags_beyond_s3s_limits_are_refused(store, tags):
    _, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="kept=yes")
    # S3: "BadRequest: Object tags cannot be greater than 10"; InvalidTag for a tag too long.
    code = "BadRequest" if len(tags) > 10 else "InvalidTag"
    assert _error(s3.put_object_tagging, Bucket=bucket, Key="k", Tagging=_set(tags)) == \
        (400, code)
    assert _tags(s3, bucket, "k") == {"kept": "yes"}
    # The largest allowed set is taken.
    most = {f"{i:0>128}": "v" * 256 for i in range(10)}
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=_set(most))
    assert _tags(s3, bucket, "k") == most


def test_multipart_and_copy_carry_tags(store):
    _, s3, bucket = store
    upload = s3.create_multipart_upload(Bucket=bucket, Key="m", Tagging="from=upload")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="m", UploadId=upload, PartNumber=1, Body=b"p")
    s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert _tags(s3, bucket, "m") == {"from": "upload"}
    src = {"Bucket": bucket, "Key": "m"}
    s3.copy_object(Bucket=bucket, Key="copied", CopySource=src)
    assert _tags(s3, bucket, "copied") == {"from": "upload"}
    s3.copy_object(Bucket=bucket, Key="replaced", CopySource=src, TaggingDirective="REPLACE",
                   Tagging="new=1")
    assert _tags(s3, bucket, "replaced") == {"new": "1"}


def test_bucket_tags(store):
    _, s3, bucket = store
    assert _error(s3.get_bucket_tagging, Bucket=bucket) == (404, "NoSuchTagSet")
    s3.put_bucket_tagging(Bucket=bucket, Tagging=_set({"Hello": "World"}))
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": "Hello", "Value": "World"}]
    s3.delete_bucket_tagging(Bucket=bucket)
    assert _error(s3.get_bucket_tagging, Bucket=bucket)[1] == "NoSuchTagSet"
