"""`bucketload serve` makes every bucket named `base--zone--x-s3` behave as an S3 Express One
Zone directory bucket, checked end to end with boto3: listings not in key order that still
cover every key once, S3 Express's listing refusals, appends, opaque ETags, consecutive part
numbers. General purpose buckets on the same server keep S3's ordinary behaviour."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError
from conftest import make_client, start_server, stop_server


def express_client(endpoint: str, **cfg):
    """boto3 as a user of a directory bucket configures it (no addressing style forced): it
    opens S3 Express sessions itself for `--x-s3` buckets and signs plainly for the others."""
    return make_client(endpoint, addressing=None, **cfg)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("express"))
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def s3(srv):
    return express_client(srv.endpoint)


@pytest.fixture
def dir_bucket(s3) -> str:
    name = f"d{uuid.uuid4().hex[:10]}--use1-az4--x-s3"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def gp_bucket(s3) -> str:
    name = f"g{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    return name


def _code(err: ClientError) -> tuple[int, str]:
    return err.response["ResponseMetadata"]["HTTPStatusCode"], err.response["Error"]["Code"]


def _pages(s3, bucket: str, **kw) -> list[dict]:
    pages, token = [], None
    while True:
        args = dict(Bucket=bucket, MaxKeys=7, **kw)
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(**args)
        pages.append(page)
        token = page.get("NextContinuationToken")
        if not token:
            return pages


def test_directory_listing_pages_unordered_and_complete(s3, dir_bucket, gp_bucket):
    keys = [f"k/{i:03d}" for i in range(40)]
    for k in keys:
        s3.put_object(Bucket=dir_bucket, Key=k, Body=b"x")
    pages = _pages(s3, dir_bucket, Prefix="k/")
    listed = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert sorted(listed) == keys  # every key, exactly once
    page_keys = [[o["Key"] for o in p.get("Contents", [])] for p in pages]
    assert any(ks != sorted(ks) for ks in page_keys), page_keys
    # Deterministic: the same listing twice gives the same pages.
    again = [[o["Key"] for o in p.get("Contents", [])] for p in _pages(s3, dir_bucket, Prefix="k/")]
    assert again == page_keys
    # A general purpose bucket of the same server lists in key order.
    for k in keys:
        s3.put_object(Bucket=gp_bucket, Key=k, Body=b"x")
    pages = _pages(s3, gp_bucket, Prefix="k/")
    assert [o["Key"] for p in pages for o in p["Contents"]] == keys


def test_directory_listing_refusals(s3, dir_bucket, gp_bucket):
    s3.put_object(Bucket=dir_bucket, Key="a/b", Body=b"x")
    for kw in ({"Prefix": "a"}, {"Delimiter": "-"}, {"StartAfter": "a/"}):
        with pytest.raises(ClientError) as e:
            s3.list_objects_v2(Bucket=dir_bucket, **kw)
        assert _code(e.value) == (400, "InvalidArgument"), kw
    with pytest.raises(ClientError) as e:
        s3.list_objects(Bucket=dir_bucket)
    assert _code(e.value)[0] == 400
    ok = s3.list_objects_v2(Bucket=dir_bucket, Prefix="a/", Delimiter="/")
    assert [o["Key"] for o in ok["Contents"]] == ["a/b"]
    # A general purpose bucket takes all of them.
    s3.put_object(Bucket=gp_bucket, Key="a/b", Body=b"x")
    for kw in ({"Prefix": "a"}, {"Delimiter": "-"}, {"StartAfter": "a/"}):
        s3.list_objects_v2(Bucket=gp_bucket, **kw)
    assert s3.list_objects(Bucket=gp_bucket)["Contents"][0]["Key"] == "a/b"


def test_uploads_in_progress_are_common_prefixes(s3, dir_bucket, gp_bucket):
    s3.create_multipart_upload(Bucket=dir_bucket, Key="up/sub/big")
    listed = s3.list_objects_v2(Bucket=dir_bucket, Prefix="up/", Delimiter="/")
    assert [p["Prefix"] for p in listed.get("CommonPrefixes", [])] == ["up/sub/"]
    assert "Contents" not in listed
    with pytest.raises(ClientError) as e:
        s3.list_multipart_uploads(Bucket=dir_bucket, Prefix="up")
    assert _code(e.value) == (400, "InvalidArgument")
    # A general purpose bucket lists no prefix for an upload in progress.
    s3.create_multipart_upload(Bucket=gp_bucket, Key="up/sub/big")
    listed = s3.list_objects_v2(Bucket=gp_bucket, Prefix="up/", Delimiter="/")
    assert "CommonPrefixes" not in listed
    assert len(s3.list_multipart_uploads(Bucket=gp_bucket, Prefix="up")["Uploads"]) == 1


def test_append_right_and_wrong_offsets(s3, dir_bucket, gp_bucket):
    s3.put_object(Bucket=dir_bucket, Key="log", Body=b"hello ", WriteOffsetBytes=0,
                  ChecksumAlgorithm="CRC32")
    s3.put_object(Bucket=dir_bucket, Key="log", Body=b"world", WriteOffsetBytes=6,
                  ChecksumAlgorithm="CRC32")
    assert s3.get_object(Bucket=dir_bucket, Key="log")["Body"].read() == b"hello world"
    # A CRC of an appended object is the full object's, as S3 gives it.
    head = s3.head_object(Bucket=dir_bucket, Key="log", ChecksumMode="ENABLED")
    crc = base64.b64encode(zlib.crc32(b"hello world").to_bytes(4, "big")).decode()
    assert head["ChecksumCRC32"] == crc
    before = s3.head_object(Bucket=dir_bucket, Key="log")["ETag"]
    for offset in (5, 12, 0):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=dir_bucket, Key="log", Body=b"!", WriteOffsetBytes=offset)
        assert _code(e.value) == (400, "InvalidWriteOffset"), offset
    assert s3.get_object(Bucket=dir_bucket, Key="log")["Body"].read() == b"hello world"
    assert s3.head_object(Bucket=dir_bucket, Key="log")["ETag"] == before
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=dir_bucket, Key="missing", Body=b"!", WriteOffsetBytes=3)
    assert _code(e.value) == (400, "InvalidWriteOffset")
    # A general purpose bucket refuses appends, as before.
    s3.put_object(Bucket=gp_bucket, Key="log", Body=b"hello ")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=gp_bucket, Key="log", Body=b"world", WriteOffsetBytes=6)
    assert _code(e.value) == (501, "NotImplemented")
    assert s3.get_object(Bucket=gp_bucket, Key="log")["Body"].read() == b"hello "


def test_concurrent_appends_at_one_offset_exactly_one_lands(s3, dir_bucket):
    s3.put_object(Bucket=dir_bucket, Key="log", Body=b"base")
    writers = 8
    barrier = threading.Barrier(writers)

    def append(i: int) -> str:
        barrier.wait()
        try:
            s3.put_object(Bucket=dir_bucket, Key="log", Body=bytes([65 + i]) * 3,
                          WriteOffsetBytes=4)
            return "ok"
        except ClientError as e:
            return _code(e)[1]

    with ThreadPoolExecutor(writers) as pool:
        outcomes = list(pool.map(append, range(writers)))
    assert sorted(outcomes) == ["InvalidWriteOffset"] * (writers - 1) + ["ok"], outcomes
    body = s3.get_object(Bucket=dir_bucket, Key="log")["Body"].read()
    assert body[:4] == b"base" and len(body) == 7 and len(set(body[4:])) == 1, body


def test_directory_etags_are_not_md5_and_conditions_use_them(s3, dir_bucket, gp_bucket):
    body = os.urandom(1000)
    put = s3.put_object(Bucket=dir_bucket, Key="e", Body=body)["ETag"]
    assert put.strip('"') != hashlib.md5(body).hexdigest()
    assert s3.head_object(Bucket=dir_bucket, Key="e")["ETag"] == put
    assert s3.get_object(Bucket=dir_bucket, Key="e")["ETag"] == put
    assert s3.list_objects_v2(Bucket=dir_bucket)["Contents"][0]["ETag"] == put
    assert s3.get_object(Bucket=dir_bucket, Key="e", IfMatch=put)["Body"].read() == body
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=dir_bucket, Key="e", IfNoneMatch=put)
    assert _code(e.value)[0] == 304
    md5 = f'"{hashlib.md5(body).hexdigest()}"'
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=dir_bucket, Key="e", IfMatch=md5)
    assert _code(e.value)[0] == 412
    # Conditional writes take the same ETag.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=dir_bucket, Key="e", Body=b"new", IfMatch=md5)
    assert _code(e.value)[0] == 412
    replaced = s3.put_object(Bucket=dir_bucket, Key="e", Body=b"new", IfMatch=put)["ETag"]
    assert replaced != put
    assert s3.head_object(Bucket=dir_bucket, Key="e")["ETag"] == replaced
    # A general purpose bucket's ETag stays the MD5.
    put = s3.put_object(Bucket=gp_bucket, Key="e", Body=body)["ETag"]
    assert put.strip('"') == hashlib.md5(body).hexdigest()


def _upload_parts(s3, bucket: str, numbers: list[int]) -> tuple[str, list[dict]]:
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    parts = []
    for n in numbers:
        # Only the last part may be under 5 MiB; one small part each keeps this light.
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n, Body=b"p" * 10)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    return up, parts


def test_directory_multipart_needs_consecutive_parts(s3, dir_bucket, gp_bucket):
    up, parts = _upload_parts(s3, dir_bucket, [2])
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=dir_bucket, Key="mp", UploadId=up,
                                     MultipartUpload={"Parts": parts})
    assert _code(e.value) == (400, "InvalidPartOrder")
    up, parts = _upload_parts(s3, dir_bucket, [1])
    done = s3.complete_multipart_upload(Bucket=dir_bucket, Key="mp", UploadId=up,
                                        MultipartUpload={"Parts": parts})
    assert s3.head_object(Bucket=dir_bucket, Key="mp")["ETag"] == done["ETag"]
    assert not done["ETag"].strip('"').endswith("-1")
    # A general purpose bucket takes part numbers with gaps.
    up, parts = _upload_parts(s3, gp_bucket, [2])
    s3.complete_multipart_upload(Bucket=gp_bucket, Key="mp", UploadId=up,
                                 MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket=gp_bucket, Key="mp")["Body"].read() == b"p" * 10


def test_serve_directory_latency_replaces_latency_for_directory_buckets(tmp_path):
    """With --latency 600s, only a directory bucket (at --directory-latency 1ms) can answer
    within the client's 60 s read timeout."""
    server = start_server(tmp_path, "--latency", "600s", "--directory-latency", "1ms")
    try:
        s3 = express_client(server.endpoint, read_timeout=60)
        name = "lat--use1-az4--x-s3"
        s3.create_bucket(Bucket=name)
        s3.put_object(Bucket=name, Key="k", Body=b"fast")
        assert s3.get_object(Bucket=name, Key="k")["Body"].read() == b"fast"
    finally:
        stop_server(server)
