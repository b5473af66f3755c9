"""`bucketload serve` does what S3 does, or refuses: never a silent overwrite, never a request
accepted and ignored. Each case is checked with boto3 against the embedded server and, as a
second opinion where it implements the operation, moto's server. S3's documentation decides
what is right; where moto differs from it, the case names moto's difference and runs only
against bucketload."""

from __future__ import annotations

import base64
import concurrent.futures
import datetime
import hashlib
import os
import re

import pytest
from botocore.exceptions import ClientError

from conftest import make_client
from test_cli_dataset import moto  # noqa: F401  (a fixture)

MIB = 1024 * 1024


def _error(call, *args, **kwargs) -> tuple[int, str]:
    with pytest.raises(ClientError) as err:
        call(*args, **kwargs)
    response = err.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def _body(s3, bucket, key) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def _missing(s3, bucket, key) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    return False


def test_put_if_none_match_never_overwrites(store):
    _, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*") == \
        (412, "PreconditionFailed")
    assert _body(s3, bucket, "k") == b"first"


def test_put_if_match_replaces_only_the_named_version(store):
    name, s3, bucket = store
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"first")["ETag"]
    other = '"' + hashlib.md5(b"other").hexdigest() + '"'
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"second", IfMatch=other) == \
        (412, "PreconditionFailed")
    assert _body(s3, bucket, "k") == b"first"
    s3.put_object(Bucket=bucket, Key="k", Body=b"second", IfMatch=etag)
    assert _body(s3, bucket, "k") == b"second"
    # S3: If-Match on a key with no object is 404 NoSuchKey, and nothing is written.
    status, code = _error(s3.put_object, Bucket=bucket, Key="absent", Body=b"x", IfMatch=etag)
    assert status == 404 and _missing(s3, bucket, "absent")


def test_concurrent_conditional_creates_exactly_one_wins(server):
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)

    def create(i: int) -> bool:
        try:
            s3.put_object(Bucket=bucket, Key="lock", Body=f"writer {i}".encode(), IfNoneMatch="*")
            return True
        except ClientError as e:
            assert e.response["Error"]["Code"] == "PreconditionFailed"
            return False

    for _ in range(5):
        s3.delete_object(Bucket=bucket, Key="lock")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            won = [i for i, ok in enumerate(pool.map(create, range(8))) if ok]
        assert len(won) == 1
        assert _body(s3, bucket, "lock") == f"writer {won[0]}".encode()


def _multipart(s3, bucket, key, parts: list[bytes]) -> tuple[str, list[dict]]:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    done = []
    for number, data in enumerate(parts, start=1):
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number,
                              Body=data)["ETag"]
        done.append({"PartNumber": number, "ETag": etag})
    return upload, done


def test_complete_multipart_if_none_match_keeps_the_object(store):
    _, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    upload, parts = _multipart(s3, bucket, "k", [b"new"])
    assert _error(s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload,
                  MultipartUpload={"Parts": parts}, IfNoneMatch="*") == (412, "PreconditionFailed")
    assert _body(s3, bucket, "k") == b"kept"


def test_repeated_complete_multipart_answers_as_the_first(store):
    """A client whose first answer was lost sends CompleteMultipartUpload again: S3 answers
    200 with the same ETag."""
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto answers NoSuchUpload to a repeated CompleteMultipartUpload; S3 200")
    upload, parts = _multipart(s3, bucket, "k", [b"x" * 1000])
    first = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload,
                                         MultipartUpload={"Parts": parts})
    again = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload,
                                         MultipartUpload={"Parts": parts})
    assert again["ETag"] == first["ETag"]
    # Once the object is replaced, the upload is gone for good.
    s3.put_object(Bucket=bucket, Key="k", Body=b"newer")
    assert _error(s3.complete_multipart_upload, Bucket=bucket, Key="k", UploadId=upload,
                  MultipartUpload={"Parts": parts})[1] == "NoSuchUpload"


def test_write_offset_bytes_is_refused_and_changes_nothing(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto appends (S3 refuses WriteOffsetBytes on general-purpose buckets)")
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123")
    status, _ = _error(s3.put_object, Bucket=bucket, Key="k", Body=b"4567", WriteOffsetBytes=4)
    assert status in (400, 501)
    assert _body(s3, bucket, "k") == b"0123"


def test_rename_object_is_refused_and_changes_nothing(server):
    """Mountpoint's `mv` falls back when RenameObject answers 501."""
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="src", Body=b"data")
    assert _error(s3.rename_object, Bucket=bucket, Key="dst", RenameSource=f"{bucket}/src") == \
        (501, "NotImplemented")
    assert _missing(s3, bucket, "dst") and _body(s3, bucket, "src") == b"data"


@pytest.mark.parametrize("digest,code", [
    (base64.b64encode(hashlib.md5(b"something else").digest()).decode(), "BadDigest"),
    ("", "InvalidDigest"),
    ("not-base64!", "InvalidDigest"),
    (base64.b64encode(b"short").decode(), "InvalidDigest"),
])
def test_content_md5_is_verified(store, digest, code):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto does not check Content-MD5")
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    # boto3 sends the header as given (it computes one only when none is given).
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"body", ContentMD5=digest) == \
        (400, code)
    assert _body(s3, bucket, "k") == b"kept"
    right = base64.b64encode(hashlib.md5(b"body").digest()).decode()
    s3.put_object(Bucket=bucket, Key="k", Body=b"body", ContentMD5=right)
    assert _body(s3, bucket, "k") == b"body"


def test_upload_part_content_md5_is_verified(server):
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    wrong = base64.b64encode(hashlib.md5(b"x").digest()).decode()
    assert _error(s3.upload_part, Bucket=bucket, Key="k", UploadId=upload, PartNumber=1,
                  Body=b"part", ContentMD5=wrong) == (400, "BadDigest")
    assert s3.list_parts(Bucket=bucket, Key="k", UploadId=upload).get("Parts", []) == []


_PAST = datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc)


def _tomorrow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)


def _failing_source_conditions(etag: str) -> list[dict]:
    """One `x-amz-copy-source-if-*` condition each, every one false for the source `etag`."""
    return [
        {"CopySourceIfMatch": '"' + "0" * 32 + '"'},
        {"CopySourceIfNoneMatch": etag},
        {"CopySourceIfUnmodifiedSince": _PAST},
        {"CopySourceIfModifiedSince": _tomorrow()},
    ]


def test_copy_source_conditions(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto ignores x-amz-copy-source-if-* conditions")
    etag = s3.put_object(Bucket=bucket, Key="src", Body=b"source")["ETag"]
    s3.put_object(Bucket=bucket, Key="dst", Body=b"kept")
    source = {"Bucket": bucket, "Key": "src"}
    past = _PAST
    failing = _failing_source_conditions(etag)
    for condition in failing:
        assert _error(s3.copy_object, Bucket=bucket, Key="dst", CopySource=source,
                      **condition) == (412, "PreconditionFailed"), condition
        assert _body(s3, bucket, "dst") == b"kept", condition
    s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, CopySourceIfMatch=etag,
                   CopySourceIfModifiedSince=past)
    assert _body(s3, bucket, "dst") == b"source"


def test_copy_destination_if_none_match(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto ignores If-None-Match on CopyObject")
    s3.put_object(Bucket=bucket, Key="src", Body=b"source")
    s3.put_object(Bucket=bucket, Key="dst", Body=b"kept")
    assert _error(s3.copy_object, Bucket=bucket, Key="dst",
                  CopySource={"Bucket": bucket, "Key": "src"}, IfNoneMatch="*") == \
        (412, "PreconditionFailed")
    assert _body(s3, bucket, "dst") == b"kept"
    s3.copy_object(Bucket=bucket, Key="new", CopySource={"Bucket": bucket, "Key": "src"},
                   IfNoneMatch="*")
    assert _body(s3, bucket, "new") == b"source"


def test_copy_onto_itself_without_changes_is_refused(store):
    _, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"data", Metadata={"a": "1"})
    source = {"Bucket": bucket, "Key": "k"}
    assert _error(s3.copy_object, Bucket=bucket, Key="k", CopySource=source) == \
        (400, "InvalidRequest")
    s3.copy_object(Bucket=bucket, Key="k", CopySource=source, MetadataDirective="REPLACE",
                   Metadata={"a": "2"})
    assert s3.head_object(Bucket=bucket, Key="k")["Metadata"] == {"a": "2"}


def test_object_lock_is_refused_not_ignored(server):
    """An object-lock bucket would be a plain bucket here, and a DeleteObject under
    COMPLIANCE retention would remove the only copy: refuse instead."""
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    assert _error(s3.create_bucket, Bucket=bucket, ObjectLockEnabledForBucket=True) == \
        (501, "NotImplemented")
    with pytest.raises(ClientError):
        s3.head_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=bucket)
    until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"x", ObjectLockMode="COMPLIANCE",
                  ObjectLockRetainUntilDate=until) == (400, "InvalidRequest")
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"x",
                  ObjectLockLegalHoldStatus="ON") == (400, "InvalidRequest")
    assert _missing(s3, bucket, "k")


@pytest.mark.parametrize("extra", [
    {"ACL": "public-read"},
    {"ServerSideEncryption": "aws:kms"},
    {"StorageClass": "GLACIER"},
    {"WebsiteRedirectLocation": "/elsewhere"},
], ids=["acl", "kms", "glacier", "website-redirect"])
def test_put_features_not_implemented_are_refused(server, extra):
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    assert _error(s3.put_object, Bucket=bucket, Key="k", Body=b"x", **extra) == \
        (501, "NotImplemented")
    assert _missing(s3, bucket, "k")


@pytest.mark.parametrize("extra", [
    {"ACL": "private"},
    {"ACL": "bucket-owner-full-control"},
    {"StorageClass": "STANDARD"},
    {"ServerSideEncryption": "AES256"},
], ids=["private", "owner-full-control", "standard", "aes256"])
def test_put_options_that_change_nothing_pass(server, extra):
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", **extra)
    assert _body(s3, bucket, "k") == b"x"


def test_get_and_head_with_part_number(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto serves other bytes for partNumber")
    first, second = os.urandom(5 * MIB), os.urandom(1000)
    upload, parts = _multipart(s3, bucket, "mp", [first, second])
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload,
                                 MultipartUpload={"Parts": parts})
    got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert got["Body"].read() == second
    assert got["PartsCount"] == 2
    assert got["ContentRange"] == f"bytes {len(first)}-{len(first) + 999}/{len(first) + 1000}"
    head = s3.head_object(Bucket=bucket, Key="mp", PartNumber=1)
    assert head["ContentLength"] == len(first) and head["PartsCount"] == 2
    assert _error(s3.get_object, Bucket=bucket, Key="mp", PartNumber=3) == (400, "InvalidPart")
    # An object written whole is one part.
    s3.put_object(Bucket=bucket, Key="whole", Body=b"0123456789")
    assert s3.get_object(Bucket=bucket, Key="whole", PartNumber=1)["Body"].read() == b"0123456789"
    assert _error(s3.get_object, Bucket=bucket, Key="whole", PartNumber=2) == (400, "InvalidPart")


def test_delete_objects_takes_at_most_1000_keys(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto executes DeleteObjects with more than 1000 keys")
    s3.put_object(Bucket=bucket, Key="k0", Body=b"x")
    keys = [{"Key": f"k{i}"} for i in range(1001)]
    assert _error(s3.delete_objects, Bucket=bucket, Delete={"Objects": keys}) == \
        (400, "MalformedXML")
    assert not _missing(s3, bucket, "k0")


def test_list_objects_v2_url_encoding_keeps_keys_exact(store):
    """boto3 asks for encoding-type=url and decodes what comes back: keys holding `%`, `+`,
    spaces or non-ASCII must come back exactly as stored."""
    _, s3, bucket = store
    keys = ["a+b", "c%20d", "e f", "g%h", "päth/ü+x", "plain/key"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == sorted(keys, key=lambda k: k.encode())
    raw = s3.list_objects_v2(Bucket=bucket, Prefix="päth/", Delimiter="/")
    assert [o["Key"] for o in raw["Contents"]] == ["päth/ü+x"]
    folders = s3.list_objects_v2(Bucket=bucket, Delimiter="/")["CommonPrefixes"]
    assert [p["Prefix"] for p in folders] == ["plain/", "päth/"]
    # On the wire the keys are encoded, and the answer says so (clients decode only then).
    raw = []
    s3.meta.events.register("after-call.s3.ListObjectsV2",
                            lambda http_response, **_: raw.append(http_response.content))
    s3.list_objects_v2(Bucket=bucket, EncodingType="url")
    assert b"<EncodingType>url</EncodingType>" in raw[0]
    assert b"<Key>a%2Bb</Key>" in raw[0] and b"<Key>e%20f</Key>" in raw[0]


def test_list_objects_v1_pages_like_s3(store):
    """ListObjects (v1), what older tools and s3fs-fuse use: markers, NextMarker with a
    delimiter, the last key as marker without one."""
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto sends NextMarker without a delimiter (S3 only with one)")
    keys = [f"d{i}/k" for i in range(3)] + [f"k{i:02d}" for i in range(5)]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    seen, marker = [], ""
    while True:
        page = s3.list_objects(Bucket=bucket, MaxKeys=2, Marker=marker)
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        marker = page["Contents"][-1]["Key"]
        assert "NextMarker" not in page
    assert seen == sorted(keys)
    entries, marker = [], ""
    while True:
        page = s3.list_objects(Bucket=bucket, MaxKeys=2, Delimiter="/", Marker=marker)
        entries += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        entries += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        marker = page["NextMarker"]
    assert sorted(entries) == ["d0/", "d1/", "d2/"] + [f"k{i:02d}" for i in range(5)]
    assert len(entries) == 8  # nothing twice


def test_list_objects_v2_fetch_owner_and_empty_token(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto refuses an empty continuation token (S3 takes it as none)")
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert "Owner" not in s3.list_objects_v2(Bucket=bucket)["Contents"][0]
    assert "ID" in s3.list_objects_v2(Bucket=bucket, FetchOwner=True)["Contents"][0]["Owner"]
    # An empty continuation token is no token.
    page = s3.list_objects_v2(Bucket=bucket, ContinuationToken="")
    assert [o["Key"] for o in page["Contents"]] == ["k"]


def test_list_buckets_pages(server):
    s3 = make_client(server.endpoint)
    prefix = f"lb-{os.urandom(3).hex()}-"
    names = [f"{prefix}{i}" for i in range(5)]
    for name in names:
        s3.create_bucket(Bucket=name)
    seen, token = [], None
    while True:
        kwargs = {"MaxBuckets": 2, "Prefix": prefix}
        if token:
            kwargs["ContinuationToken"] = token
        page = s3.list_buckets(**kwargs)
        seen += [b["Name"] for b in page["Buckets"]]
        token = page.get("ContinuationToken")
        if not token:
            break
    assert seen == names


def test_standard_headers_are_stored_and_returned(store):
    _, s3, bucket = store
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", CacheControl="max-age=60",
                  ContentDisposition='attachment; filename="x.bin"', ContentEncoding="gzip",
                  ContentLanguage="en", Expires=expires)
    for got in (s3.head_object(Bucket=bucket, Key="k"), s3.get_object(Bucket=bucket, Key="k")):
        assert got["CacheControl"] == "max-age=60"
        assert got["ContentDisposition"] == 'attachment; filename="x.bin"'
        assert got["ContentEncoding"] == "gzip"
        assert got["ContentLanguage"] == "en"
        assert got["Expires"] == expires
    # Without a Content-Type, S3 answers binary/octet-stream.
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    assert s3.head_object(Bucket=bucket, Key="plain")["ContentType"] == "binary/octet-stream"


def test_get_time_conditions_and_304_carries_the_etag(store):
    _, s3, bucket = store
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"x")["ETag"]
    past = datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc)
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    assert _error(s3.get_object, Bucket=bucket, Key="k", IfUnmodifiedSince=past) == \
        (412, "PreconditionFailed")
    assert _error(s3.get_object, Bucket=bucket, Key="k", IfModifiedSince=future)[0] == 304
    assert s3.get_object(Bucket=bucket, Key="k", IfModifiedSince=past)["Body"].read() == b"x"
    assert s3.get_object(Bucket=bucket, Key="k", IfUnmodifiedSince=future)["Body"].read() == b"x"
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="k", IfNoneMatch=etag)
    headers = err.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    assert headers.get("etag") == etag


def test_multipart_features_not_implemented_are_refused(server):
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    assert _error(s3.create_multipart_upload, Bucket=bucket, Key="k",
                  StorageClass="GLACIER") == (501, "NotImplemented")
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def _raw_get(url: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_presigned_urls_live_at_most_seven_days(server):
    s3 = make_client(server.endpoint, signature_version="s3v4")
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    week = 7 * 24 * 3600
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"},
                                    ExpiresIn=week)
    assert _raw_get(url) == (200, b"data")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"},
                                    ExpiresIn=30 * 24 * 3600)
    status, body = _raw_get(url)
    assert status == 400 and b"AuthorizationQueryParametersError" in body


def test_expired_presigned_url_is_403(server):
    s3 = make_client(server.endpoint, signature_version="s3v4")
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"},
                                    ExpiresIn=60)
    # The same URL, signed two hours ago (the expiry is checked before the signature).
    signed = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2))
    old = re.sub(r"X-Amz-Date=\d{8}T\d{6}Z", f"X-Amz-Date={signed:%Y%m%dT%H%M%SZ}", url)
    assert old != url
    status, body = _raw_get(old)
    assert status == 403 and b"AccessDenied" in body and b"expired" in body


def test_sigv2_is_refused_unless_allowed(server):
    s3 = make_client(server.endpoint, signature_version="s3")
    assert _error(s3.list_buckets) == (400, "InvalidRequest")


def test_unknown_access_key_is_invalid_access_key_id(server):
    s3 = make_client(server.endpoint, key="nobody", secret="whatever")
    assert _error(s3.list_buckets) == (403, "InvalidAccessKeyId")


def test_errors_carry_the_request_id_of_their_header(store):
    """S3 names every request in `x-amz-request-id`; an error body's <RequestId> is the same."""
    import xml.etree.ElementTree as ET

    name, s3, bucket = store
    seen = {}

    def keep(http_response, **_):
        seen["body"] = http_response.content
        seen["headers"] = http_response.headers

    s3.meta.events.register("after-call.s3.GetObject", keep)
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="absent")
    body_id = ET.fromstring(seen["body"]).find(".//RequestId").text
    assert body_id and body_id == err.value.response["ResponseMetadata"]["RequestId"]
    if name == "moto":
        return  # moto names requests in another header
    assert seen["headers"]["x-amz-request-id"] == body_id
    ok = s3.head_bucket(Bucket=bucket)["ResponseMetadata"]
    assert ok["RequestId"] and ok["RequestId"] != body_id
    assert ok["HTTPHeaders"].get("x-amz-id-2")


@pytest.mark.parametrize("dates", [{"Date": ""}, {"Date": "x", "X-Amz-Date": "y"}])
def test_sigv4_dated_by_the_date_header(store, dates):
    """A client that sets `Date` signs with it instead of X-Amz-Date (botocore drops
    X-Amz-Date then): SigV4 allows either, and S3 accepts both."""
    from email.utils import formatdate

    _, s3, bucket = store
    now = formatdate(usegmt=True)
    headers = {name: now for name in dates}
    s3.meta.events.register("before-call.s3.PutObject",
                            lambda params, **_: params["headers"].update(headers))
    s3.put_object(Bucket=bucket, Key="dated", Body=b"bar")
    assert _body(s3, bucket, "dated") == b"bar"


def test_create_bucket_again_as_us_east_1_answers(store):
    """us-east-1 S3 answers 200 to creating a bucket one owns (elsewhere 409), and the
    bucket keeps its objects."""
    name, s3, bucket = store
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    s3.create_bucket(Bucket=bucket)
    assert _body(s3, bucket, "k") == b"kept"
    if name == "bucketload":  # a bucket outside us-east-1 (moto checks the region first)
        assert _error(s3.create_bucket, Bucket=bucket,
                      CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})[1] == \
            "BucketAlreadyOwnedByYou"


def _post_form(bucket: str, key: str, expiration: str, sigv2: bool = False) -> dict:
    """The fields of a browser-form POST upload of `key`, signed as S3 documents (SigV4, or
    Signature Version 2 with `sigv2`)."""
    import hmac
    import json

    from conftest import ACCESS_KEY, SECRET_KEY

    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    credential = f"{ACCESS_KEY}/{day}/us-east-1/s3/aws4_request"
    conditions = [{"bucket": bucket}, {"key": key}]
    if not sigv2:
        conditions += [{"x-amz-algorithm": "AWS4-HMAC-SHA256"}, {"x-amz-credential": credential},
                       {"x-amz-date": amz_date}]
    policy = base64.b64encode(
        json.dumps({"expiration": expiration, "conditions": conditions}).encode()).decode()
    if sigv2:
        signature = base64.b64encode(
            hmac.new(SECRET_KEY.encode(), policy.encode(), hashlib.sha1).digest()).decode()
        return {"key": key, "AWSAccessKeyId": ACCESS_KEY, "policy": policy,
                "signature": signature}

    def h(k: bytes, m: str) -> bytes:
        return hmac.new(k, m.encode(), hashlib.sha256).digest()

    signing = h(h(h(h(("AWS4" + SECRET_KEY).encode(), day), "us-east-1"), "s3"), "aws4_request")
    signature = hmac.new(signing, policy.encode(), hashlib.sha256).hexdigest()
    return {"key": key, "x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": credential,
            "x-amz-date": amz_date, "policy": policy, "x-amz-signature": signature}


def _post(endpoint: str, bucket: str, fields: dict):
    import requests

    return requests.post(f"{endpoint}/{bucket}", data=fields,
                         files={"file": ("f.txt", b"posted bytes")}, timeout=30)


def test_post_upload_policy_expiration_must_be_iso8601(server):
    s3 = make_client(server.endpoint)
    bucket = f"post-{os.urandom(4).hex()}"
    s3.create_bucket(Bucket=bucket)
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    good = _post(server.endpoint, bucket, _post_form(bucket, "ok", soon.strftime(
        "%Y-%m-%dT%H:%M:%S.000Z")))
    assert good.status_code == 204, good.text
    assert _body(s3, bucket, "ok") == b"posted bytes"
    bad = _post(server.endpoint, bucket, _post_form(bucket, "bad", str(soon)))
    assert bad.status_code == 400 and "InvalidPolicyDocument" in bad.text, bad.text
    assert _missing(s3, bucket, "bad")


def test_post_upload_signed_with_sigv2_is_refused_unless_allowed(server, tmp_path):
    from conftest import start_server, stop_server

    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)) \
        .strftime("%Y-%m-%dT%H:%M:%S.000Z")
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="post-v2")
    refused = _post(server.endpoint, "post-v2", _post_form("post-v2", "k", soon, sigv2=True))
    assert refused.status_code == 400 and "InvalidRequest" in refused.text, refused.text
    assert _missing(s3, "post-v2", "k")
    allowing = start_server(tmp_path, "--allow-sigv2")
    try:
        make_client(allowing.endpoint).create_bucket(Bucket="post-v2")
        ok = _post(allowing.endpoint, "post-v2", _post_form("post-v2", "k", soon, sigv2=True))
        assert ok.status_code == 204, ok.text
    finally:
        stop_server(allowing)

def test_user_metadata_is_at_most_2_kb(server):
    # S3: user metadata (the UTF-8 bytes of every key and value) is at most 2 KB, else 400
    # MetadataTooLarge, on PutObject, CreateMultipartUpload and CopyObject with REPLACE.
    # moto's server stores any size, so this runs against bucketload only.
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    fits = {"a": "x" * 1000, "b": "y" * 900}
    too_big = {"a": "x" * 1000, "b": "y" * 1100}
    s3.put_object(Bucket=bucket, Key="fits", Body=b"x", Metadata=fits)
    assert s3.head_object(Bucket=bucket, Key="fits")["Metadata"] == fits
    assert _error(s3.put_object, Bucket=bucket, Key="big", Body=b"x", Metadata=too_big) == \
        (400, "MetadataTooLarge")
    assert _missing(s3, bucket, "big")
    assert _error(s3.create_multipart_upload, Bucket=bucket, Key="big", Metadata=too_big) == \
        (400, "MetadataTooLarge")
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    source = {"Bucket": bucket, "Key": "fits"}
    assert _error(s3.copy_object, Bucket=bucket, Key="copy", CopySource=source,
                  Metadata=too_big, MetadataDirective="REPLACE") == (400, "MetadataTooLarge")
    assert _missing(s3, bucket, "copy")
    # With the COPY directive the request's metadata is ignored, so its size does not count.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource=source, Metadata=too_big,
                   MetadataDirective="COPY")
    assert s3.head_object(Bucket=bucket, Key="copy")["Metadata"] == fits


def test_delete_if_match_deletes_only_the_named_version(store):
    """DeleteObject with If-Match (S3's conditional deletes, general purpose buckets since
    2025): 412 when the ETag differs, 404 NoSuchKey when there is no object, deleted when it
    matches or for `*`."""
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto ignores If-Match on DeleteObject and deletes")
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"first")["ETag"]
    other = '"' + hashlib.md5(b"other").hexdigest() + '"'
    assert _error(s3.delete_object, Bucket=bucket, Key="k", IfMatch=other) == \
        (412, "PreconditionFailed")
    assert _body(s3, bucket, "k") == b"first"
    s3.delete_object(Bucket=bucket, Key="k", IfMatch=etag)
    assert _missing(s3, bucket, "k")
    for tag in (etag, "*"):
        assert _error(s3.delete_object, Bucket=bucket, Key="k", IfMatch=tag) == \
            (404, "NoSuchKey")
    s3.put_object(Bucket=bucket, Key="k", Body=b"again")
    s3.delete_object(Bucket=bucket, Key="k", IfMatch="*")
    assert _missing(s3, bucket, "k")


def test_delete_if_match_on_a_versioned_bucket(store):
    """The condition is on the current version; a key whose latest version is a delete
    marker has no object to match."""
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto ignores If-Match on DeleteObject and deletes")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"first")["ETag"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"second")
    assert _error(s3.delete_object, Bucket=bucket, Key="k", IfMatch=first) == \
        (412, "PreconditionFailed")
    assert _body(s3, bucket, "k") == b"second"
    s3.delete_object(Bucket=bucket, Key="k", IfMatch="*")
    assert _missing(s3, bucket, "k")
    assert _error(s3.delete_object, Bucket=bucket, Key="k", IfMatch="*") == (404, "NoSuchKey")


def test_delete_objects_checks_each_etag(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto ignores the ETag of DeleteObjects' objects and deletes")
    etags = {k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode())["ETag"] for k in "ab"}
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "a", "ETag": etags["b"]},
        {"Key": "b", "ETag": etags["b"]},
    ]})
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("a", "PreconditionFailed")]
    assert [d["Key"] for d in out["Deleted"]] == ["b"]
    assert _body(s3, bucket, "a") == b"a" and _missing(s3, bucket, "b")


# Conditions S3 takes only on directory buckets, which this server does not have: refused, as
# every condition it cannot check, never accepted and ignored.
@pytest.mark.parametrize("condition", [
    {"IfMatchSize": 1},
    {"IfMatchLastModifiedTime": datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc)},
])
def test_delete_directory_bucket_conditions_are_refused(server, condition):
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert _error(s3.delete_object, Bucket=bucket, Key="k", **condition) == \
        (501, "NotImplemented")
    objects = [{"Key": "k", condition_field: value}
               for condition_field, value in [
                   ("Size", 1) if "IfMatchSize" in condition else
                   ("LastModifiedTime", condition["IfMatchLastModifiedTime"])]]
    assert _error(s3.delete_objects, Bucket=bucket, Delete={"Objects": objects}) == \
        (501, "NotImplemented")
    assert _body(s3, bucket, "k") == b"x"


def test_upload_part_copy_checks_every_source_condition(store):
    """UploadPartCopy's x-amz-copy-source-if-* conditions, all four, as CopyObject's."""
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto ignores x-amz-copy-source-if-* conditions")
    etag = s3.put_object(Bucket=bucket, Key="src", Body=b"source")["ETag"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    source = {"Bucket": bucket, "Key": "src"}
    past, future = _PAST, _tomorrow()
    failing = _failing_source_conditions(etag)
    for condition in failing:
        assert _error(s3.upload_part_copy, Bucket=bucket, Key="dst", UploadId=upload,
                      PartNumber=1, CopySource=source, **condition) == \
            (412, "PreconditionFailed"), condition
    assert "Parts" not in s3.list_parts(Bucket=bucket, Key="dst", UploadId=upload)
    s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=upload, PartNumber=1,
                        CopySource=source, CopySourceIfMatch=etag,
                        CopySourceIfModifiedSince=past, CopySourceIfUnmodifiedSince=future)
    s3.abort_multipart_upload(Bucket=bucket, Key="dst", UploadId=upload)


@pytest.mark.parametrize("call, kwargs", [
    ("list_objects_v2", {"MaxKeys": -1}),
    ("list_objects", {"MaxKeys": -1}),
    ("list_object_versions", {"MaxKeys": -1}),
    ("list_multipart_uploads", {"MaxUploads": -1}),
])
def test_negative_max_keys_is_invalid(store, call, kwargs):
    """S3: 400 InvalidArgument ("Argument max-keys must be an integer between 0 and
    2147483647"), not a page."""
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto answers a negative max-keys with a page")
    assert _error(getattr(s3, call), Bucket=bucket, **kwargs) == (400, "InvalidArgument")


def test_list_parts_negative_max_parts_is_invalid(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto answers a negative max-parts with a page")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    assert _error(s3.list_parts, Bucket=bucket, Key="k", UploadId=upload, MaxParts=-1) == \
        (400, "InvalidArgument")
    assert _error(s3.list_parts, Bucket=bucket, Key="k", UploadId=upload,
                  PartNumberMarker=-1) == (400, "InvalidArgument")
    s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload)


@pytest.mark.parametrize("constraint", ["x" * 100_000, "no such region", "us-east-1\r"])
def test_create_bucket_with_an_invalid_location_constraint(store, constraint):
    """A LocationConstraint that names no region: 400 InvalidLocationConstraint, no bucket."""
    name, s3, _ = store
    if name == "moto" and "\r" not in constraint:
        pytest.skip("moto creates a bucket whatever its LocationConstraint")
    bucket = f"fid-{os.urandom(5).hex()}"
    assert _error(s3.create_bucket, Bucket=bucket,
                  CreateBucketConfiguration={"LocationConstraint": constraint}) == \
        (400, "InvalidLocationConstraint")
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def _with_header(s3, op: str, name: str, value: str):
    def add(request, **_):
        request.headers[name] = value
    s3.meta.events.register(f"before-sign.s3.{op}", add)


# Every conditional header of every write is honoured (the tests above) or refused: conditions
# S3 does not take on that operation, which a server would otherwise accept and ignore.
REFUSED_CONDITIONS = [
    ("PutObject", "If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"),
    ("PutObject", "If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"),
    ("CopyObject", "If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"),
    ("UploadPart", "If-Match", '"0123"'),
    ("UploadPart", "If-None-Match", "*"),
    ("UploadPartCopy", "If-None-Match", "*"),
    ("CompleteMultipartUpload", "If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"),
    ("DeleteObject", "If-None-Match", "*"),
    ("DeleteObject", "If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"),
    ("DeleteObjects", "If-Match", '"0123"'),
    ("PutObjectTagging", "If-Match", '"0123"'),
    ("DeleteObjectTagging", "If-Match", '"0123"'),
    ("CreateMultipartUpload", "If-None-Match", "*"),
    ("AbortMultipartUpload", "If-Match", '"0123"'),
]


@pytest.mark.parametrize("op, header, value", REFUSED_CONDITIONS)
def test_conditions_an_operation_does_not_take_are_refused(server, op, header, value):
    s3 = make_client(server.endpoint)
    bucket = f"fid-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="m", UploadId=upload, PartNumber=1, Body=b"p")
    _with_header(s3, op, header, value)
    calls = {
        "PutObject": lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"new"),
        "CopyObject": lambda: s3.copy_object(Bucket=bucket, Key="k", MetadataDirective="REPLACE",
                                             CopySource={"Bucket": bucket, "Key": "k"}),
        "UploadPart": lambda: s3.upload_part(Bucket=bucket, Key="m", UploadId=upload,
                                             PartNumber=2, Body=b"q"),
        "UploadPartCopy": lambda: s3.upload_part_copy(
            Bucket=bucket, Key="m", UploadId=upload, PartNumber=2,
            CopySource={"Bucket": bucket, "Key": "k"}),
        "CompleteMultipartUpload": lambda: s3.complete_multipart_upload(
            Bucket=bucket, Key="m", UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}),
        "DeleteObject": lambda: s3.delete_object(Bucket=bucket, Key="k"),
        "DeleteObjects": lambda: s3.delete_objects(Bucket=bucket,
                                                   Delete={"Objects": [{"Key": "k"}]}),
        "PutObjectTagging": lambda: s3.put_object_tagging(
            Bucket=bucket, Key="k", Tagging={"TagSet": [{"Key": "t", "Value": "v"}]}),
        "DeleteObjectTagging": lambda: s3.delete_object_tagging(Bucket=bucket, Key="k"),
        "CreateMultipartUpload": lambda: s3.create_multipart_upload(Bucket=bucket, Key="k"),
        "AbortMultipartUpload": lambda: s3.abort_multipart_upload(Bucket=bucket, Key="m",
                                                                  UploadId=upload),
    }
    assert _error(calls[op]) == (501, "NotImplemented")
    assert _body(s3, bucket, "k") == b"kept"
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == []
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == ["m"]
    parts = s3.list_parts(Bucket=bucket, Key="m", UploadId=upload)["Parts"]
    assert [p["PartNumber"] for p in parts] == [1]
