"""pytest plugin loaded into the vendored s3-tests run (`-p conformance_plugin`).

It changes how the suite cleans up between tests, never a test body:

- The suite empties each bucket it made by listing object *versions* (ListObjectVersions),
  which a server without versioning refuses (501 NotImplemented). When, and only when, that
  listing is refused, the bucket is emptied instead with ListObjectsV2 + DeleteObjects, its
  multipart uploads in progress are aborted, and it is deleted. A server that answers
  ListObjectVersions is cleaned as the suite does it, except that when deleting the emptied
  bucket answers 409 BucketNotEmpty (bucketload keeps a bucket with multipart uploads in
  progress), the uploads are aborted and the delete tried once more.
- A bucket that cannot be deleted fails the teardown of the test that made it (the suite's own
  behaviour) and is then left alone: without this, every later test's setup would fail on the
  same leftover bucket and one failure would turn the rest of the run into errors.

It also records, per test, every answer of status 500 or above (except 501 NotImplemented) and
every broken connection (from urllib3, under both boto3 and requests) as the JUnit property
`server_5xx`, so that a server error is seen even where a test expected a failure and passed.
"""

from __future__ import annotations

import pytest
import urllib3.connectionpool
from botocore.exceptions import ClientError

import s3tests.functional as s3f

_suite_nuke_bucket = s3f.nuke_bucket
_suite_get_buckets_list = s3f.get_buckets_list
# Buckets whose deletion failed once; later setups and teardowns skip them.
_undeletable: set[str] = set()


def _refused(err: ClientError) -> bool:
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return err.response.get("Error", {}).get("Code") == "NotImplemented" or status == 501


def _not_empty(err: ClientError) -> bool:
    return err.response.get("Error", {}).get("Code") == "BucketNotEmpty"


def _empty_without_versions(client, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    _abort_uploads(client, bucket)


def _abort_uploads(client, bucket: str) -> None:
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    for upload in uploads:
        client.abort_multipart_upload(
            Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
        )


def nuke_bucket(client, bucket: str) -> None:
    try:
        try:
            _suite_nuke_bucket(client, bucket)
        except ClientError as err:
            if _refused(err):
                _empty_without_versions(client, bucket)
            elif _not_empty(err):
                _abort_uploads(client, bucket)
            else:
                raise
            client.delete_bucket(Bucket=bucket)
    except Exception:
        _undeletable.add(bucket)
        raise


def get_buckets_list(client=None, prefix=None):
    return [b for b in _suite_get_buckets_list(client, prefix) if b not in _undeletable]


s3f.nuke_bucket = nuke_bucket
s3f.get_buckets_list = get_buckets_list


# Server errors seen during the current test: "500 PUT /bucket/key" or "ProtocolError PUT /...".
_server_errors: list[str] = []
_suite_urlopen = urllib3.connectionpool.HTTPConnectionPool.urlopen


def _urlopen(self, method, url, *args, **kwargs):
    path = url.split("?", 1)[0][:120]
    try:
        response = _suite_urlopen(self, method, url, *args, **kwargs)
    except Exception as err:
        _server_errors.append(f"{type(err).__name__} {method} {path}")
        raise
    # 501 NotImplemented is a deliberate refusal, not a server error.
    if response.status >= 500 and response.status != 501:
        _server_errors.append(f"{response.status} {method} {path}")
    return response


urllib3.connectionpool.HTTPConnectionPool.urlopen = _urlopen


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _server_errors.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and _server_errors:
        item.user_properties.append(("server_5xx", "; ".join(dict.fromkeys(_server_errors))))
