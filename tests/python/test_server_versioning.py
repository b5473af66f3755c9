"""S3 versioning on `bucketload serve`, checked with boto3 against the embedded server and moto's
server: PutBucketVersioning / GetBucketVersioning, a version per write while enabled (PutObject,
CopyObject, CompleteMultipartUpload), the `null` version (written before versioning was enabled,
or while it is suspended), GET / HEAD of a version, delete markers (404 NoSuchKey with
`x-amz-delete-marker`; 405 for GET of the marker's version), permanent deletes of versions (the
next newest becomes current), DeleteObjects with versions, copies of a version, and
ListObjectVersions in S3's order with its key-marker / version-id-marker pagination.

Where moto's server departs from S3's documentation, the case runs against bucketload only and
says why."""

from __future__ import annotations

import json
import os

import pytest
from botocore.exceptions import ClientError

from conftest import make_client
from test_cli_dataset import moto  # noqa: F401  (a fixture)


def _enable(s3, bucket, status="Enabled"):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})


def _error(call, **kwargs) -> tuple[int, str, dict]:
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    r = err.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"], \
        r["ResponseMetadata"]["HTTPHeaders"]


def _versions(s3, bucket, **kwargs) -> list[tuple[str, str, bool, bool]]:
    """(key, version id, is latest, is delete marker), in the listing's order for one key:
    newest first; versions and markers merged by the order S3 gives (newest first per key)."""
    out = s3.list_object_versions(Bucket=bucket, **kwargs)
    entries = [(v["Key"], v["VersionId"], v["IsLatest"], False, v["LastModified"])
               for v in out.get("Versions", [])]
    entries += [(m["Key"], m["VersionId"], m["IsLatest"], True, m["LastModified"])
                for m in out.get("DeleteMarkers", [])]
    return entries


def _body(s3, bucket, key, **kwargs) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read()


def test_status_enabled_then_suspended_never_back(store):
    _, s3, bucket = store
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    _enable(s3, bucket)
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    _enable(s3, bucket, "Suspended")
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    _enable(s3, bucket)
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"


def test_two_puts_two_versions_newest_first(store):
    _, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"two!")["VersionId"]
    assert v1 and v2 and v1 != v2 and "null" not in (v1, v2)
    listed = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"]) for v in listed] == \
        [("k", v2, True, 4), ("k", v1, False, 3)]
    assert _body(s3, bucket, "k") == b"two!"
    got = s3.get_object(Bucket=bucket, Key="k", VersionId=v1)
    assert (got["Body"].read(), got["VersionId"]) == (b"one", v1)
    head = s3.head_object(Bucket=bucket, Key="k", VersionId=v1)
    assert (head["ContentLength"], head["VersionId"]) == (3, v1)
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == v2
    # Current objects list as before.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]


def test_delete_marker_hides_the_object_until_it_is_deleted(store):
    name, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"kept")["VersionId"]
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert deleted["DeleteMarker"] is True
    marker = deleted["VersionId"]
    assert marker not in (v1, "null")
    status, code, headers = _error(s3.get_object, Bucket=bucket, Key="k")
    assert (status, code) == (404, "NoSuchKey")
    head_status, _, head_headers = _error(s3.head_object, Bucket=bucket, Key="k")
    assert head_status == 404
    # S3 documents x-amz-delete-marker and the marker's x-amz-version-id on this 404; moto's
    # server sends neither.
    if name == "bucketload":
        assert headers["x-amz-delete-marker"] == "true"
        assert headers["x-amz-version-id"] == marker
        assert head_headers["x-amz-delete-marker"] == "true"
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    listing = s3.list_object_versions(Bucket=bucket)
    assert [(m["Key"], m["VersionId"], m["IsLatest"]) for m in listing["DeleteMarkers"]] == \
        [("k", marker, True)]
    assert [(v["VersionId"], v["IsLatest"]) for v in listing["Versions"]] == [(v1, False)]
    # The older version is still readable by ID.
    assert _body(s3, bucket, "k", VersionId=v1) == b"kept"
    # Deleting the marker brings the object back. S3 answers x-amz-delete-marker: true (the
    # version removed was a marker); moto's server does not.
    undone = s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    assert undone["VersionId"] == marker
    if name == "bucketload":
        assert undone["DeleteMarker"] is True
    got = s3.get_object(Bucket=bucket, Key="k")
    assert (got["Body"].read(), got["VersionId"]) == (b"kept", v1)
    assert "DeleteMarkers" not in s3.list_object_versions(Bucket=bucket)


def test_get_of_a_delete_marker_version_is_405(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto's server answers 400 for GET of a delete marker's version; "
                    "S3 documents 405 MethodNotAllowed")
    _enable(s3, bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    status, code, headers = _error(s3.get_object, Bucket=bucket, Key="k", VersionId=marker)
    assert (status, code) == (405, "MethodNotAllowed")
    assert headers["x-amz-delete-marker"] == "true"
    assert headers["x-amz-version-id"] == marker
    status, _, headers = _error(s3.head_object, Bucket=bucket, Key="k", VersionId=marker)
    assert status == 405 and headers["x-amz-delete-marker"] == "true"


def test_deleting_versions_for_good(store):
    _, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"1")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"22")["VersionId"]
    v3 = s3.put_object(Bucket=bucket, Key="k", Body=b"333")["VersionId"]
    # A noncurrent version: gone, the current one stays.
    out = s3.delete_object(Bucket=bucket, Key="k", VersionId=v2)
    assert out["VersionId"] == v2 and "DeleteMarker" not in out
    assert [v[1] for v in _versions(s3, bucket)] == [v3, v1]
    assert _error(s3.get_object, Bucket=bucket, Key="k", VersionId=v2)[0] == 404
    # The current one: the next newest becomes current.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=v3)
    got = s3.get_object(Bucket=bucket, Key="k")
    assert (got["Body"].read(), got["VersionId"]) == (b"1", v1)
    assert [(v[1], v[2]) for v in _versions(s3, bucket)] == [(v1, True)]
    # The last one: the key is gone, and the bucket can be deleted.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=v1)
    assert _versions(s3, bucket) == []
    assert _error(s3.get_object, Bucket=bucket, Key="k")[:2] == (404, "NoSuchKey")
    s3.delete_bucket(Bucket=bucket)


def test_bucket_with_versions_left_is_not_empty(store):
    _, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"x")["VersionId"]
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    assert _error(s3.delete_bucket, Bucket=bucket)[:2] == (409, "BucketNotEmpty")
    s3.delete_object(Bucket=bucket, Key="k", VersionId=v1)
    assert _error(s3.delete_bucket, Bucket=bucket)[:2] == (409, "BucketNotEmpty")
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    s3.delete_bucket(Bucket=bucket)


def test_null_version_before_enabling(store):
    name, s3, bucket = store
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"old")
    assert "VersionId" not in put
    assert "VersionId" not in s3.get_object(Bucket=bucket, Key="k")
    _enable(s3, bucket)
    # S3 answers x-amz-version-id: null for the null version of a versioned bucket; moto's
    # server leaves the header out.
    if name == "bucketload":
        assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == "null"
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"new")["VersionId"]
    assert [(v[1], v[2]) for v in _versions(s3, bucket)] == [(v1, True), ("null", False)]
    assert _body(s3, bucket, "k", VersionId="null") == b"old"


def test_suspended_writes_replace_the_null_version(store):
    name, s3, bucket = store
    if name == "moto":
        pytest.skip("moto's server drops the versions written while versioning was enabled "
                    "when a suspended write replaces the current one (S3 keeps them)")
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["VersionId"]
    _enable(s3, bucket, "Suspended")
    for body in (b"n1", b"n2"):
        # The write makes the null version; S3 answers it without x-amz-version-id.
        assert "VersionId" not in s3.put_object(Bucket=bucket, Key="k", Body=body)
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == "null"
    assert [(v[1], v[2]) for v in _versions(s3, bucket)] == [("null", True), (v1, False)]
    assert _body(s3, bucket, "k") == b"n2"
    assert _body(s3, bucket, "k", VersionId=v1) == b"v1"
    # A delete while suspended makes a null delete marker in place of the null version.
    out = s3.delete_object(Bucket=bucket, Key="k")
    assert (out["DeleteMarker"], out["VersionId"]) == (True, "null")
    entries = _versions(s3, bucket)
    assert sorted((v[1], v[2], v[3]) for v in entries) == \
        sorted([("null", True, True), (v1, False, False)])
    # Enabled again: new versions stack on the null marker.
    _enable(s3, bucket)
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"v2")["VersionId"]
    assert v2 not in ("null", v1)
    assert _body(s3, bucket, "k") == b"v2"


def test_list_versions_paginates_one_entry_at_a_time(store):
    name, s3, bucket = store
    _enable(s3, bucket)
    ids = {}
    for key in ["b", "a", "c"]:
        ids[key] = [s3.put_object(Bucket=bucket, Key=key, Body=key.encode() * n)["VersionId"]
                    for n in (1, 2)]
    marker = s3.delete_object(Bucket=bucket, Key="c")["VersionId"]
    # Keys ascending, each key's versions newest first (the marker is c's newest).
    expected = [("a", ids["a"][1]), ("a", ids["a"][0]), ("b", ids["b"][1]), ("b", ids["b"][0]),
                ("c", marker), ("c", ids["c"][1]), ("c", ids["c"][0])]
    full = s3.list_object_versions(Bucket=bucket)
    assert full["IsTruncated"] is False
    seen, kwargs = [], {}
    while True:
        page = s3.list_object_versions(Bucket=bucket, MaxKeys=1, **kwargs)
        entries = page.get("Versions", []) + page.get("DeleteMarkers", [])
        assert len(entries) == 1
        seen.append((entries[0]["Key"], entries[0]["VersionId"]))
        if not page["IsTruncated"]:
            break
        assert page["NextKeyMarker"] == entries[0]["Key"]
        assert page["NextVersionIdMarker"] == entries[0]["VersionId"]
        kwargs = {"KeyMarker": page["NextKeyMarker"],
                  "VersionIdMarker": page["NextVersionIdMarker"]}
    assert seen == expected
    # A key marker alone starts after every version of that key (S3: keys greater than the
    # marker); moto's server lists the marker's key again.
    if name == "bucketload":
        after_a = s3.list_object_versions(Bucket=bucket, KeyMarker="a")
        assert {v["Key"] for v in after_a["Versions"]} == {"b", "c"}


def test_list_versions_prefix_delimiter_and_url_encoding(store):
    name, s3, bucket = store
    _enable(s3, bucket)
    for key in ["dir/one", "dir/two", "top", "dir2/x y"]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    s3.delete_object(Bucket=bucket, Key="dir/two")
    out = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in out["CommonPrefixes"]] == ["dir/", "dir2/"]
    assert [v["Key"] for v in out["Versions"]] == ["top"]
    out = s3.list_object_versions(Bucket=bucket, Prefix="dir/")
    assert sorted(v["Key"] for v in out["Versions"]) == ["dir/one", "dir/two"]
    assert [m["Key"] for m in out["DeleteMarkers"]] == ["dir/two"]
    # boto3 asks for encoding-type=url and decodes the keys it gets back; S3 echoes
    # EncodingType, moto's server does not.
    out = s3.list_object_versions(Bucket=bucket, Prefix="dir2/")
    assert [v["Key"] for v in out["Versions"]] == ["dir2/x y"]
    if name == "bucketload":
        assert out["EncodingType"] == "url"


def test_delete_objects_with_versions(store):
    name, s3, bucket = store
    _enable(s3, bucket)
    a1 = s3.put_object(Bucket=bucket, Key="a", Body=b"a1")["VersionId"]
    a2 = s3.put_object(Bucket=bucket, Key="a", Body=b"a2")["VersionId"]
    s3.put_object(Bucket=bucket, Key="b", Body=b"b1")
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "a", "VersionId": a1},
        {"Key": "b"},
    ]})
    by_key = {d["Key"]: d for d in out["Deleted"]}
    assert by_key["a"]["VersionId"] == a1 and not by_key["a"].get("DeleteMarker")
    assert by_key["b"]["DeleteMarker"] is True
    marker = by_key["b"]["DeleteMarkerVersionId"]
    assert [(v[0], v[1], v[3]) for v in _versions(s3, bucket) if v[0] == "a"] == \
        [("a", a2, False)]
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "b", "VersionId": marker},
    ]})
    assert out["Deleted"][0]["VersionId"] == marker
    # S3 says the version removed was a delete marker; moto's server does not.
    if name == "bucketload":
        assert out["Deleted"][0]["DeleteMarker"] is True
        assert out["Deleted"][0]["DeleteMarkerVersionId"] == marker
    assert _body(s3, bucket, "b") == b"b1"


def test_copy_from_a_version(store):
    _, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="src", Body=b"first")["VersionId"]
    s3.put_object(Bucket=bucket, Key="src", Body=b"second")
    out = s3.copy_object(Bucket=bucket, Key="dst",
                         CopySource={"Bucket": bucket, "Key": "src", "VersionId": v1})
    assert out["CopySourceVersionId"] == v1
    assert out["VersionId"] not in (None, "null", v1)
    assert _body(s3, bucket, "dst") == b"first"
    # Copying an older version onto its own key restores it as a new version.
    restored = s3.copy_object(Bucket=bucket, Key="src",
                              CopySource={"Bucket": bucket, "Key": "src", "VersionId": v1})
    assert _body(s3, bucket, "src") == b"first"
    assert len([v for v in _versions(s3, bucket) if v[0] == "src"]) == 3
    assert s3.head_object(Bucket=bucket, Key="src")["VersionId"] == restored["VersionId"]


def test_multipart_upload_makes_a_version(store):
    _, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="big", Body=b"small")["VersionId"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=1,
                          Body=b"p" * 1000)
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    v2 = done["VersionId"]
    assert v2 not in (None, "null", v1)
    assert [(v[1], v[2]) for v in _versions(s3, bucket)] == [(v2, True), (v1, False)]
    assert _body(s3, bucket, "big", VersionId=v1) == b"small"
    assert len(_body(s3, bucket, "big")) == 1000


def test_tags_of_a_version(store):
    _, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"1", Tagging="gen=one")["VersionId"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"2", Tagging="gen=two")
    got = s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=v1)
    assert (got["TagSet"], got["VersionId"]) == ([{"Key": "gen", "Value": "one"}], v1)
    s3.put_object_tagging(Bucket=bucket, Key="k", VersionId=v1,
                          Tagging={"TagSet": [{"Key": "gen", "Value": "old"}]})
    assert s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=v1)["TagSet"] == \
        [{"Key": "gen", "Value": "old"}]
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == \
        [{"Key": "gen", "Value": "two"}]


def test_object_attributes_of_a_version(store):
    name, s3, bucket = store
    _enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"12345")["VersionId"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    got = s3.get_object_attributes(Bucket=bucket, Key="k", VersionId=v1,
                                   ObjectAttributes=["ObjectSize", "ETag"])
    assert got["ObjectSize"] == 5 and got["VersionId"] == v1


def test_unversioned_bucket_keeps_its_files(server):
    """A bucket whose versioning was never enabled: no version IDs, no versions directory, and
    sidecars as before (bucketload's on-disk layout; nothing to compare with moto)."""
    s3 = make_client(server.endpoint)
    bucket = f"plain-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    assert "VersionId" not in s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    assert "VersionId" not in s3.put_object(Bucket=bucket, Key="k", Body=b"2")
    assert "VersionId" not in s3.head_object(Bucket=bucket, Key="k")
    out = s3.delete_object(Bucket=bucket, Key="k")
    assert "DeleteMarker" not in out and "VersionId" not in out
    s3.put_object(Bucket=bucket, Key="k", Body=b"3")
    assert not (server.root / ".bucketload" / "versions" / bucket).exists()
    sidecar = json.loads((server.root / ".bucketload" / "meta" / bucket / "k").read_text())
    assert "version_id" not in sidecar
    listed = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in listed] == [("k", "null", True)]
    # What s3-tests' cleanup does: delete every listed version.
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k", "VersionId": "null"}]})
    s3.delete_bucket(Bucket=bucket)


def test_mfa_delete_is_refused(server):
    s3 = make_client(server.endpoint)
    bucket = f"mfa-{os.urandom(5).hex()}"
    s3.create_bucket(Bucket=bucket)
    status, code, _ = _error(s3.put_bucket_versioning, Bucket=bucket, VersioningConfiguration={
        "Status": "Enabled", "MFADelete": "Enabled"})
    assert (status, code) == (501, "NotImplemented")
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
