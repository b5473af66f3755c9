"""`bucketload serve` stores every key S3 stores, byte for byte: keys with empty, `.` or `..`
segments, a key that is also a prefix of other keys, segments longer than a file name, and
lists them in S3's order. Each case runs with boto3 against the embedded server and moto's
server; listings are compared between the two (moto is the reference for order)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from conftest import make_client
from test_cli_dataset import moto  # noqa: F401  (a fixture)

MIB = 1024 * 1024

AWKWARD = [
    "a//b", "/x", "//y", "./x", "../x", "a/../b", "a/.", "a/..", "a/./d", "..", ".",
    "../../escape", ".bl%self", "a/.bl%self", ".bl%e", ".bucketload/meta/k",
    "p%20q+r s", "ünï/ключ", "a", "a!", "a/b", "a/b/", "a//", "a/b/c", "q/", "q", "q/r",
    "long/" + "L" * 600 + "/" + "m" * 418, "long/" + "L" * 600, "long/" + "L" * 600 + "!",
    "x" * 256,
]


@pytest.fixture
def both(server, moto):  # noqa: F811
    """boto3 clients of the embedded server and moto, each with a fresh bucket."""
    endpoint, _ = moto
    bucket = f"keys-{os.urandom(5).hex()}"
    clients = [make_client(server.endpoint), make_client(endpoint, key="moto", secret="moto")]
    for client in clients:
        client.create_bucket(Bucket=bucket)
    return clients, bucket


def _copy(key: str) -> str:
    """Where a key is copied to: under `copy/`, cut to S3's 1024 bytes (ASCII there)."""
    return ("copy/" + key)[:1024]


def _body(key: str) -> bytes:
    return f"body of {key}".encode()


def _put_all(s3, bucket, keys):
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=_body(key), ContentType="text/x-" + str(len(key)))


def test_awkward_keys_put_get_head_copy_delete(store):
    name, s3, bucket = store
    _put_all(s3, bucket, AWKWARD)
    assert max(len(k.encode()) for k in AWKWARD) == 1024  # with a 600-byte segment
    for key in AWKWARD:
        got = s3.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == _body(key), key
        assert got["ContentType"] == "text/x-" + str(len(key)), key
        assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(_body(key))
    for key in AWKWARD:
        s3.copy_object(Bucket=bucket, Key=_copy(key), CopySource={"Bucket": bucket, "Key": key})
        assert s3.get_object(Bucket=bucket, Key=_copy(key))["Body"].read() == _body(key), key
    # A copy onto an awkward key from an ordinary one.
    s3.copy_object(Bucket=bucket, Key="a/..", CopySource={"Bucket": bucket, "Key": "q/r"})
    assert s3.get_object(Bucket=bucket, Key="a/..")["Body"].read() == _body("q/r")
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == _body("a")
    listed = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
              for o in p.get("Contents", [])]
    assert listed == sorted(AWKWARD + [_copy(k) for k in AWKWARD], key=str.encode)
    half = AWKWARD[::2]
    answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in half]})
    assert sorted(d["Key"] for d in answer["Deleted"]) == sorted(half)
    for key in AWKWARD[1::2]:
        s3.delete_object(Bucket=bucket, Key=key)
    for key in AWKWARD:
        with pytest.raises(ClientError) as err:
            s3.head_object(Bucket=bucket, Key=key)
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404, key
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert listed == sorted([_copy(k) for k in AWKWARD], key=str.encode)


@pytest.mark.parametrize("order", [["a", "a/b"], ["a/b", "a"], ["a/", "a", "a/b"],
                                   ["a/b", "a/", "a"], ["a/b/c", "a/b", "a"]])
def test_a_key_that_is_also_a_prefix(store, order):
    _, s3, bucket = store
    _put_all(s3, bucket, order)
    for key in order:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == _body(key), key
    deeper = [k for k in order if k != "a"]
    for key in deeper:
        s3.delete_object(Bucket=bucket, Key=key)
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == _body("a")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["a"]


def test_multipart_onto_awkward_keys(store):
    _, s3, bucket = store
    for key in ["a//b", "a", "a/../c", "long/" + "L" * 600]:
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ContentType="x/y")["UploadId"]
        parts = []
        for number, fill in [(1, b"1"), (2, b"2")]:
            body = fill * (5 * MIB if number == 1 else 10)
            tag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number,
                                 Body=body)["ETag"]
            parts.append({"PartNumber": number, "ETag": tag})
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                     MultipartUpload={"Parts": parts})
        got = s3.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == b"1" * (5 * MIB) + b"2" * 10, key
        assert got["ContentType"] == "x/y" and got["ETag"].endswith('-2"'), key


def _pages(s3, bucket, **kwargs) -> list:
    """Every entry of a listing, page by page (v2 continuation tokens), in order."""
    entries, token = [], None
    while True:
        page = s3.list_objects_v2(Bucket=bucket, **kwargs, **({"ContinuationToken": token} if token else {}))
        entries += [("key", o["Key"], o["Size"], o["ETag"]) for o in page.get("Contents", [])]
        entries += [("prefix", p["Prefix"]) for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            return entries
        token = page["NextContinuationToken"]


def _pages_v1(s3, bucket, **kwargs) -> list:
    entries, marker = [], ""
    while True:
        page = s3.list_objects(Bucket=bucket, Marker=marker, **kwargs)
        entries += [("key", o["Key"]) for o in page.get("Contents", [])]
        entries += [("prefix", p["Prefix"]) for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            return entries
        marker = page.get("NextMarker") or page["Contents"][-1]["Key"]


LISTED = AWKWARD + ["a-c", "a0", "a/b!", "a\x01", "a/\x7f", "ab/x", "ü", "ü/x", "a/c/", "//"]


@pytest.mark.parametrize("prefix", ["", "a", "a/", "a//", "a/.", ".", "/", "long/", "long/L", "q"])
def test_listing_matches_moto(both, prefix):
    """The same keys listed on both servers: whole, by delimiter, one key per page, after a
    start key, v1 with markers."""
    clients, bucket = both
    for s3 in clients:
        _put_all(s3, bucket, LISTED)
    ours, theirs = clients
    for kwargs in [{}, {"Delimiter": "/"}, {"MaxKeys": 1}, {"MaxKeys": 1, "Delimiter": "/"},
                   {"MaxKeys": 2, "Delimiter": "."}, {"StartAfter": "a/"},
                   {"StartAfter": "a", "Delimiter": "/"}, {"StartAfter": "a//b", "MaxKeys": 3}]:
        args = dict(kwargs, Prefix=prefix)
        assert _pages(ours, bucket, **args) == _pages(theirs, bucket, **args), args
    # v1 markers: moto pages v1 with a delimiter wrongly (every common prefix on every page,
    # an opaque NextMarker), so ours one key per page is held to moto's v2 answer.
    for kwargs in [{}, {"Delimiter": "/"}]:
        args = dict(kwargs, Prefix=prefix)
        in_order = lambda entries: sorted(entries, key=lambda e: e[1].encode())  # noqa: E731
        expected = in_order(entry[:2] for entry in _pages(theirs, bucket, **args))
        assert in_order(_pages_v1(ours, bucket, **args)) == expected, args
        assert in_order(_pages_v1(theirs, bucket, **args)) == expected, args
        assert _pages_v1(ours, bucket, MaxKeys=1, **args) == expected, args


def test_keys_never_leave_the_bucket(server):
    """`..` segments are escaped, `.bl%` names from the client cannot reach the server's own
    files, `.bucketload/...` in a bucket is an ordinary key, and NUL in a key is stored."""
    s3 = make_client(server.endpoint)
    bucket = f"keys-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    root = Path(server.root)
    before = {p for p in root.rglob("*") if not p.is_relative_to(root / bucket)
              and not p.is_relative_to(root / ".bucketload")}
    hostile = ["../x", "../../x", "a/../../../x", "..", f"../{bucket}-twin/x", "../.bucketload/x",
               ".bucketload/meta/" + bucket + "/k", ".bl%self", "k/.bl%self", "k/.bl%name",
               "nul\x00/x", "k/nul\x00"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"the object")
    s3.put_object(Bucket=bucket, Key="k/deeper", Body=b"deeper")
    _put_all(s3, bucket, hostile)
    after = {p for p in root.rglob("*") if not p.is_relative_to(root / bucket)
             and not p.is_relative_to(root / ".bucketload")}
    assert after == before
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"the object"
    for key in hostile:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == _body(key), key
    assert (root / bucket / ".bucketload" / "meta" / bucket / "k").is_file()
    assert (root / bucket / "k" / ".bl%qself").is_file()
    assert (root / bucket / "k" / ".bl%self").read_bytes() == b"the object"
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == sorted(hostile + ["k", "k/deeper"], key=str.encode)


CONTROL_KEYS = ["cr\rkey", "crlf\r\nkey", "lf\nkey", "tab\tkey", "dir\r/inner"]


def _without_url_encoding(s3):
    """boto3 asks listings for encoding-type=url unless told otherwise: a client that does not
    (the AWS SDKs for Go and Rust, object_store) reads keys from the XML as they are."""
    from botocore.handlers import set_list_objects_encoding_type_url

    for op in ("ListObjects", "ListObjectsV2", "ListObjectVersions"):
        s3.meta.events.unregister(f"before-parameter-build.s3.{op}",
                                  set_list_objects_encoding_type_url)


def test_control_characters_in_keys_come_back_exact(store):
    """XML parsers read a raw carriage return as a line feed; S3 writes `&#13;` in every XML
    answer that holds a key (listings, versions, uploads, parts, DeleteObjects, errors)."""
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto writes a carriage return into its XML unescaped")
    _without_url_encoding(s3)
    for key in CONTROL_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    expected = sorted(CONTROL_KEYS, key=str.encode)
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == expected
    assert [o["Key"] for o in s3.list_objects(Bucket=bucket)["Contents"]] == expected
    assert [v["Key"] for v in s3.list_object_versions(Bucket=bucket)["Versions"]] == expected
    prefixes = s3.list_objects_v2(Bucket=bucket, Delimiter="/")["CommonPrefixes"]
    assert [p["Prefix"] for p in prefixes] == ["dir\r/"]
    page = s3.list_objects_v2(Bucket=bucket, StartAfter="cr\rkey", MaxKeys=1)
    assert [o["Key"] for o in page["Contents"]] == ["crlf\r\nkey"]

    upload = s3.create_multipart_upload(Bucket=bucket, Key="up\rload")
    assert upload["Key"] == "up\rload"
    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [u["Key"] for u in uploads] == ["up\rload"]
    part = s3.upload_part(Bucket=bucket, Key="up\rload", UploadId=upload["UploadId"],
                          PartNumber=1, Body=b"part")
    parts = s3.list_parts(Bucket=bucket, Key="up\rload", UploadId=upload["UploadId"])
    assert parts["Key"] == "up\rload"
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="up\rload", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert done["Key"] == "up\rload"

    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="missing\r")
    assert "missing\r " in err.value.response["Error"]["Message"]

    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": k} for k in CONTROL_KEYS]})
    assert sorted(d["Key"] for d in out["Deleted"]) == sorted(CONTROL_KEYS)
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["up\rload"]


def test_a_segment_longer_than_a_file_name_is_stored(store):
    """S3 limits a key to 1024 bytes and its segments not at all: a segment over 255 bytes
    (longer than a file name) is stored, listed and deleted like any key."""
    name, s3, bucket = store
    keys = ["s" * 1024, "d/" + "t" * 300 + "/x"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode()
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == sorted(keys)
    if name == "moto":
        return  # moto stores keys longer than S3's 1024 bytes
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="s" * 1025, Body=b"x")
    assert err.value.response["Error"]["Code"] == "KeyTooLongError"
