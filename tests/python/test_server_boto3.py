"""boto3, an independent S3 client, against `bucketload serve`."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from conftest import make_client


def _code(err: ClientError) -> str:
    return err.response["Error"]["Code"]


def test_put_get_head_roundtrip(s3, bucket):
    body = os.urandom(123_457)
    put = s3.put_object(Bucket=bucket, Key="dir/a.bin", Body=body, ContentType="application/x-test",
                        Metadata={"owner": "pytest"})
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="dir/a.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == put["ETag"]
    head = s3.head_object(Bucket=bucket, Key="dir/a.bin")
    assert head["ContentLength"] == len(body)
    assert head["ContentType"] == "application/x-test"
    assert head["Metadata"] == {"owner": "pytest"}


def test_ranged_get(s3, bucket):
    body = bytes(range(256)) * 1000
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    got = s3.get_object(Bucket=bucket, Key="r", Range="bytes=1000-1999")
    assert got["Body"].read() == body[1000:2000]
    assert got["ContentRange"] == f"bytes 1000-1999/{len(body)}"
    suffix = s3.get_object(Bucket=bucket, Key="r", Range="bytes=-10")["Body"].read()
    assert suffix == body[-10:]
    open_ended = s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(body) - 5}-")["Body"].read()
    assert open_ended == body[-5:]


def test_invalid_range_is_416(s3, bucket):
    s3.put_object(Bucket=bucket, Key="small", Body=b"0123456789")
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="small", Range="bytes=100-200")
    assert _code(err.value) == "InvalidRange"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


def test_missing_key_and_directory_key_are_404(s3, bucket):
    s3.put_object(Bucket=bucket, Key="folder/file", Body=b"x")
    for key in ("nope", "folder", "folder/"):
        with pytest.raises(ClientError) as err:
            s3.get_object(Bucket=bucket, Key=key)
        assert _code(err.value) == "NoSuchKey", key
        with pytest.raises(ClientError) as err:
            s3.head_object(Bucket=bucket, Key=key)
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404, key


def test_missing_bucket(s3):
    with pytest.raises(ClientError) as err:
        s3.list_objects_v2(Bucket="no-such-bucket-here")
    assert _code(err.value) == "NoSuchBucket"


def test_list_with_delimiter_and_pagination(s3, bucket):
    keys = [f"a/{i:04d}.jpg" for i in range(25)] + ["b/x", "b/y/z", "top"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())

    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/"]
    assert [o["Key"] for o in top["Contents"]] == ["top"]

    seen, token, pages = [], None, 0
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket=bucket, Prefix="a/", MaxKeys=10, **kw)
        pages += 1
        for obj in page["Contents"]:
            assert obj["ETag"] == f'"{hashlib.md5(obj["Key"].encode()).hexdigest()}"'
            assert obj["Size"] == len(obj["Key"])
            seen.append(obj["Key"])
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert pages == 3
    assert seen == sorted(k for k in keys if k.startswith("a/"))

    after = s3.list_objects_v2(Bucket=bucket, StartAfter="a/0020.jpg", Prefix="a/")
    assert [o["Key"] for o in after["Contents"]] == [f"a/{i:04d}.jpg" for i in range(21, 25)]

    paginator = s3.get_paginator("list_objects_v2")
    all_keys = [o["Key"] for p in paginator.paginate(Bucket=bucket, PaginationConfig={"PageSize": 7})
                for o in p.get("Contents", [])]
    assert all_keys == sorted(keys)


def test_pagination_sees_keys_added_and_deleted_between_pages(s3, bucket):
    """The server keeps a directory's sorted listing between pages once the directory has
    settled (two seconds without a change); a put or delete between pages must show at once."""
    import time

    keys = [f"d/k{i:05d}" for i in range(0, 3000, 2)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))
    time.sleep(2.5)
    listed, added, token, round_ = [], [], None, 0
    while True:
        args = {"Bucket": bucket, "Prefix": "d/", "MaxKeys": 100}
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(**args)
        got = [o["Key"] for o in page.get("Contents", [])]
        assert got == sorted(got)
        assert not listed or not got or got[0] > listed[-1]
        listed += got
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
        # Between pages: a key just past this page, one at the end, and one deleted ahead.
        last = int(got[-1][3:])
        ahead = [f"d/k{last + 1:05d}", f"d/z{round_:04d}"]
        for key in ahead:
            s3.put_object(Bucket=bucket, Key=key, Body=b"y")
        added += ahead
        gone = f"d/k{last + 102:05d}"
        if gone in keys:
            s3.delete_object(Bucket=bucket, Key=gone)
            keys.remove(gone)
        round_ += 1
    assert listed == sorted(set(keys) | set(added))


def test_multipart_upload(s3, bucket):
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(5 * 1024 * 1024), os.urandom(1234)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="big")
    done = []
    for n, data in enumerate(parts, start=1):
        r = s3.upload_part(Bucket=bucket, Key="big", UploadId=up["UploadId"], PartNumber=n, Body=data)
        done.append({"PartNumber": n, "ETag": r["ETag"]})
    listed = s3.list_parts(Bucket=bucket, Key="big", UploadId=up["UploadId"])
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2, 3]
    assert [p["Size"] for p in listed["Parts"]] == [len(p) for p in parts]

    # Not visible before completion.
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="big")

    res = s3.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=up["UploadId"],
                                       MultipartUpload={"Parts": done})
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert res["ETag"] == f'"{digest}-3"'
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == b"".join(parts)


@pytest.mark.parametrize("checksum", [None, "CRC32"])
def test_multipart_parts_out_of_order_and_sent_again(s3, bucket, server, checksum):
    """Parts arriving at once and out of order, one sent twice: the object holds the last bytes
    of each listed part, and when every part sat in its slot the completion copied nothing."""

    key = f"assembled-{checksum}"
    size = 5 * 1024 * 1024
    parts = {n: os.urandom(size) for n in range(1, 6)}
    parts[6] = os.urandom(4321)
    extra = {"ChecksumAlgorithm": checksum} if checksum else {}
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **extra)["UploadId"]

    def send(n: int, body: bytes) -> dict:
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=body, **extra)
        return {"PartNumber": n, "ETag": r["ETag"],
                **({f"Checksum{checksum}": r[f"Checksum{checksum}"]} if checksum else {})}

    with ThreadPoolExecutor(4) as pool:
        sent = dict(zip([4, 2, 6, 1, 3, 5], pool.map(send, [4, 2, 6, 1, 3, 5],
                                                       [parts[n] for n in [4, 2, 6, 1, 3, 5]])))
    assembly = server.root / ".bucketload" / "uploads" / bucket / up / "assembly"
    inode = assembly.stat().st_ino
    res = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                       MultipartUpload={"Parts": [sent[n] for n in range(1, 7)]})
    body = b"".join(parts[n] for n in range(1, 7))
    digest = hashlib.md5(b"".join(hashlib.md5(parts[n]).digest() for n in range(1, 7))).hexdigest()
    assert res["ETag"] == f'"{digest}-6"'
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    assert (server.root / bucket / key).stat().st_ino == inode, "parts in place, nothing copied"

    # Part 2 sent again with other bytes goes to a file of its own; the object is copied.
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **extra)["UploadId"]
    sent = {n: send(n, parts[n]) for n in range(1, 7)}
    again = os.urandom(size)
    sent[2] = send(2, again)
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                 MultipartUpload={"Parts": [sent[n] for n in range(1, 7)]})
    want = parts[1] + again + b"".join(parts[n] for n in range(3, 7))
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == want
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key)["Contents"]
    assert [o["Size"] for o in listed] == [len(want)]


def test_multipart_abort_leaves_nothing(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="aborted")
    s3.upload_part(Bucket=bucket, Key="aborted", UploadId=up["UploadId"], PartNumber=1, Body=b"x" * 100)
    s3.abort_multipart_upload(Bucket=bucket, Key="aborted", UploadId=up["UploadId"])
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    with pytest.raises(ClientError) as err:
        s3.list_parts(Bucket=bucket, Key="aborted", UploadId=up["UploadId"])
    assert _code(err.value) == "NoSuchUpload"


def test_body_checksums_are_verified(s3, bucket):
    body = os.urandom(70_001)
    # boto3 computes the checksum: accepted, and the server answers the same value.
    ok = s3.put_object(Bucket=bucket, Key="sum", Body=body, ChecksumAlgorithm="CRC32")
    assert ok["ChecksumCRC32"]
    # A checksum that does not match the body (as if corrupted on the way) is refused, and
    # nothing is stored.
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="bad", Body=body, ChecksumCRC32="AAAAAA==")
    assert _code(err.value) == "BadDigest"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="bad")
    up = s3.create_multipart_upload(Bucket=bucket, Key="bad-part", ChecksumAlgorithm="CRC32")
    with pytest.raises(ClientError) as err:
        s3.upload_part(Bucket=bucket, Key="bad-part", UploadId=up["UploadId"], PartNumber=1,
                       Body=body, ChecksumCRC32="AAAAAA==")
    assert _code(err.value) == "BadDigest"
    assert s3.list_parts(Bucket=bucket, Key="bad-part", UploadId=up["UploadId"]).get("Parts", []) == []
    s3.abort_multipart_upload(Bucket=bucket, Key="bad-part", UploadId=up["UploadId"])


def test_copy_and_delete(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"payload")
    s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"payload"
    s3.delete_object(Bucket=bucket, Key="src")
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"many/{i}", Body=b"x")
    res = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"many/{i}"} for i in range(5)]})
    assert sorted(d["Key"] for d in res["Deleted"]) == [f"many/{i}" for i in range(5)]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["dst"]


def test_buckets(s3):
    s3.create_bucket(Bucket="lifecycle-bucket")
    s3.head_bucket(Bucket="lifecycle-bucket")
    assert "lifecycle-bucket" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.delete_bucket(Bucket="lifecycle-bucket")
    with pytest.raises(ClientError):
        s3.head_bucket(Bucket="lifecycle-bucket")


def test_wrong_credentials_are_refused(server, bucket):
    bad = make_client(server.endpoint, secret="not-the-secret")
    with pytest.raises(ClientError) as err:
        bad.list_objects_v2(Bucket=bucket)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert _code(err.value) == "SignatureDoesNotMatch"
    unknown = make_client(server.endpoint, key="nobody")
    with pytest.raises(ClientError) as err:
        unknown.list_objects_v2(Bucket=bucket)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
