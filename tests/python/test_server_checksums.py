"""`bucketload serve` keeps the checksum an object was written with and returns it as S3
does: on PutObject, UploadPart and CompleteMultipartUpload, on GET and HEAD with
``ChecksumMode="ENABLED"`` (the whole object's, or a part's with ``PartNumber``), in
ListParts and in GetObjectAttributes. Expected values are computed here with zlib and
hashlib, independently of the server."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib

import pytest
from botocore.exceptions import ClientError

from conftest import make_client

MIB = 1024 * 1024


@pytest.fixture
def s3_bucket(server):
    s3 = make_client(server.endpoint)
    bucket = f"sum-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    return s3, bucket


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _crc32(data: bytes) -> str:
    return _b64(zlib.crc32(data).to_bytes(4, "big"))


def _sha256(data: bytes) -> str:
    return _b64(hashlib.sha256(data).digest())


def _error(call, **kwargs) -> tuple[int, str]:
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    r = err.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def test_put_object_checksum_is_returned_only_when_asked(s3_bucket):
    s3, bucket = s3_bucket
    data = os.urandom(3000)
    put = s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="SHA256")
    assert put["ChecksumSHA256"] == _sha256(data)
    assert "ChecksumSHA256" not in s3.head_object(Bucket=bucket, Key="k")
    head = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert (head["ChecksumSHA256"], head["ChecksumType"]) == (_sha256(data), "FULL_OBJECT")
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == _sha256(data) and got["Body"].read() == data
    # S3 returns no checksum for a byte range: it would not be the range's.
    ranged = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED", Range="bytes=0-9")
    assert "ChecksumSHA256" not in ranged and ranged["Body"].read() == data[:10]
    # A wrong checksum is refused and the object kept.
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"other",
                  ChecksumSHA256=_sha256(b"not it")) == (400, "BadDigest")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == data


def _upload(s3, bucket, key, parts, algorithm, kind=None):
    args = {"ChecksumAlgorithm": algorithm} | ({"ChecksumType": kind} if kind else {})
    created = s3.create_multipart_upload(Bucket=bucket, Key=key, **args)
    assert created["ChecksumAlgorithm"] == algorithm
    upload = created["UploadId"]
    listed = []
    for number, data in enumerate(parts, start=1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number,
                           Body=data, ChecksumAlgorithm=algorithm)
        listed.append({"PartNumber": number, "ETag": r["ETag"],
                       f"Checksum{algorithm}": r[f"Checksum{algorithm}"]})
    return upload, listed


def test_composite_sha256_multipart_checksum(s3_bucket):
    s3, bucket = s3_bucket
    parts = [os.urandom(5 * MIB), os.urandom(1000)]
    upload, listed = _upload(s3, bucket, "k", parts, "SHA256")
    assert [p["ChecksumSHA256"] for p in listed] == [_sha256(p) for p in parts]
    page = s3.list_parts(Bucket=bucket, Key="k", UploadId=upload)
    assert page["ChecksumAlgorithm"] == "SHA256"
    assert [p["ChecksumSHA256"] for p in page["Parts"]] == [_sha256(p) for p in parts]
    composite = _b64(hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts))
                     .digest()) + "-2"
    # A wrong whole-object checksum is refused, and the upload stays to be completed.
    assert _error(s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload,
                  ChecksumSHA256=_sha256(b"wrong"), MultipartUpload={"Parts": listed}) == \
        (400, "BadDigest")
    done = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload,
                                        MultipartUpload={"Parts": listed})
    assert (done["ChecksumSHA256"], done["ChecksumType"]) == (composite, "COMPOSITE")
    head = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert (head["ChecksumSHA256"], head["ChecksumType"]) == (composite, "COMPOSITE")
    for number, data in enumerate(parts, start=1):
        got = s3.get_object(Bucket=bucket, Key="k", PartNumber=number, ChecksumMode="ENABLED")
        assert got["ChecksumSHA256"] == _sha256(data) and got["Body"].read() == data
    attrs = s3.get_object_attributes(Bucket=bucket, Key="k",
                                     ObjectAttributes=["Checksum", "ObjectParts", "ETag"])
    assert attrs["Checksum"] == {"ChecksumSHA256": composite, "ChecksumType": "COMPOSITE"}
    assert attrs["ETag"] == done["ETag"].strip('"')
    assert attrs["ObjectParts"]["TotalPartsCount"] == 2
    assert [p["ChecksumSHA256"] for p in attrs["ObjectParts"]["Parts"]] == \
        [_sha256(p) for p in parts]


def test_full_object_crc32_multipart_checksum(s3_bucket):
    """A FULL_OBJECT CRC is the CRC of the whole object, as if it had been uploaded whole."""
    s3, bucket = s3_bucket
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), os.urandom(777)]
    upload, listed = _upload(s3, bucket, "k", parts, "CRC32", "FULL_OBJECT")
    whole = _crc32(b"".join(parts))
    done = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload,
                                        ChecksumCRC32=whole, MultipartUpload={"Parts": listed})
    assert (done["ChecksumCRC32"], done["ChecksumType"]) == (whole, "FULL_OBJECT")
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == whole and got["ChecksumType"] == "FULL_OBJECT"
    assert got["Body"].read() == b"".join(parts)
    # A copy is one part: it keeps the full-object checksum.
    copied = s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "k"})
    assert copied["CopyObjectResult"]["ChecksumCRC32"] == whole


def test_completion_must_name_each_parts_checksum(s3_bucket):
    s3, bucket = s3_bucket
    upload, listed = _upload(s3, bucket, "k", [b"x" * 100], "SHA256")
    bare = [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in listed]
    assert _error(s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload,
                  MultipartUpload={"Parts": bare}) == (400, "InvalidRequest")
    wrong = [dict(listed[0], ChecksumSHA256=_sha256(b"y"))]
    assert _error(s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload,
                  MultipartUpload={"Parts": wrong}) == (400, "InvalidPart")
    s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload,
                                 MultipartUpload={"Parts": listed})


def test_checksum_types_s3_refuses(s3_bucket):
    s3, bucket = s3_bucket
    assert _error(s3.create_multipart_upload, Bucket=bucket, Key="k",
                  ChecksumAlgorithm="SHA256", ChecksumType="FULL_OBJECT") == \
        (400, "InvalidRequest")


def test_get_object_attributes_of_a_plain_object(s3_bucket):
    s3, bucket = s3_bucket
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"foo")["ETag"].strip('"')
    attrs = s3.get_object_attributes(
        Bucket=bucket, Key="k",
        ObjectAttributes=["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
    assert (attrs["ObjectSize"], attrs["ETag"], attrs["StorageClass"]) == (3, etag, "STANDARD")
    assert "ObjectParts" not in attrs
    assert _error(s3.get_object_attributes, Bucket=bucket, Key="absent",
                  ObjectAttributes=["ETag"])[0] == 404
