"""The exception class of each error category, against the embedded server.

The categories are those of the CLI's exit codes (docs/CLI.md) and the mount's errnos: not
found, permission, invalid input and corrupt data each have their class; every class is a
``BucketloadError``.
"""

from __future__ import annotations

import pytest

import bucketload
from bucketload import errors

from test_cli_dataset import ok  # noqa: F401
from test_package import env  # noqa: F401  (a fixture)


def opened(uri: str, **kw) -> int:
    """The number of batches of a loader over `uri`: opening it reads the dataset's metadata."""
    return len(bucketload.Loader(uri, batch_size=2, image_size=16, **kw))


def test_not_found_is_a_file_not_found_error(env):
    with pytest.raises(errors.NotFoundError) as caught:
        opened("s3://errors-no-such-bucket/train")
    assert isinstance(caught.value, FileNotFoundError)
    assert isinstance(caught.value, errors.BucketloadError)
    assert "errors-no-such-bucket" in str(caught.value)
    # The store's advice names Python's argument, not the CLI's flag.
    assert "endpoint=" in str(caught.value)
    assert "--endpoint" not in str(caught.value)


def test_refused_credentials_are_a_permission_error(bucketload_bin, env, s3, monkeypatch):
    s3.create_bucket(Bucket="errors-perm")
    ok(bucketload_bin, env, "gen", "s3://errors-perm/d", "--samples", "2", "--classes", "1",
       "--size", "2KB")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(errors.PermissionDeniedError) as caught:
        opened("s3://errors-perm/d")
    assert isinstance(caught.value, PermissionError)
    assert isinstance(caught.value, errors.StoreError)
    assert "s3://errors-perm/d" in str(caught.value)
    assert "<?xml" not in str(caught.value)


def test_invalid_input_is_a_value_error(env):
    for uri in ["ftp://host/x", "s3://bad name/x", "gs://b/../x"]:
        with pytest.raises(errors.ConfigError) as caught:
            opened(uri)
        assert isinstance(caught.value, ValueError)


def test_corrupt_shards_and_manifests_are_corrupt_data(bucketload_bin, env, s3):
    s3.create_bucket(Bucket="errors-corrupt")
    ok(bucketload_bin, env, "gen", "s3://errors-corrupt/img", "--samples", "4", "--classes",
       "1", "--size", "2KB")
    ok(bucketload_bin, env, "shard", "s3://errors-corrupt/img", "s3://errors-corrupt/shards",
       "--samples-per-shard", "2")
    s3.put_object(Bucket="errors-corrupt", Key="shards/shard-000001.tar", Body=b"\x07" * 3072)
    with pytest.raises(errors.CorruptDataError, match="shard-000001.tar"):
        for _ in bucketload.Loader("s3://errors-corrupt/shards", format="shards", batch_size=2,
                                   image_size=16):
            pass
    s3.put_object(Bucket="errors-corrupt", Key="img/_bucketload/manifest.json", Body=b'{"bad": ')
    with pytest.raises(errors.CorruptDataError, match="manifest.json"):
        opened("s3://errors-corrupt/img")
    # Format 2, truncated: read first, refused whole, named.
    s3.put_object(Bucket="errors-corrupt", Key="img/_bucketload/manifest.bin",
                  Body=b"\x89BLMF\r\n\x1a\x02\x00\x00")
    with pytest.raises(errors.CorruptDataError, match="manifest.bin.*truncated"):
        opened("s3://errors-corrupt/img")


def test_engine_advice_names_pythons_arguments_not_cli_flags(env, s3):
    # A file outside any class folder cannot be labelled by folder: the remedy names the
    # keyword argument a Python caller passes, never the CLI's flag.
    s3.create_bucket(Bucket="errors-labels")
    s3.put_object(Bucket="errors-labels", Key="src/cats/a.jpg", Body=b"a")
    s3.put_object(Bucket="errors-labels", Key="src/top.jpg", Body=b"b")
    with pytest.raises(errors.ConfigError) as caught:
        bucketload._native.shard("s3://errors-labels/src", "s3://errors-labels/dst",
                                 label_from="folder")
    message = str(caught.value)
    assert "top.jpg" in message and "`label_from`" in message, message
    assert "--label-from" not in message, message
