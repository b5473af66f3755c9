"""A dataset's manifest that no longer matches the store, against `bucketload serve`: objects
added and deleted with boto3 after `bucketload manifest` (or `bucketload shard`) wrote it. The
CLI's `read` and Python's `Loader` must not read a different set than they say: `--check-manifest`
(``check_manifest=True``) names what changed, a listed object that is gone fails the epoch saying
the manifest is stale, both with the command that refreshes it; `--no-manifest`
(``use_manifest=False``) lists the dataset instead."""

from __future__ import annotations

import json

import pytest

import bucketload
from bucketload.errors import ConfigError, CorruptDataError, NotFoundError

from test_cli_dataset import ok, run
from test_package import env  # noqa: F401  (a fixture)

SAMPLES = 12


@pytest.fixture
def dataset(bucketload_bin, env, s3, request):  # noqa: F811
    """A files dataset with a manifest: its URI, bucket, prefix and sorted keys."""
    bucket = f"stale-{request.node.name.replace('_', '-')[:40].strip('-')}".lower()
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/train"
    ok(bucketload_bin, env, "gen", uri, "--samples", str(SAMPLES), "--classes", "2", "--size",
       "2KB", "--seed", "4")
    ok(bucketload_bin, env, "manifest", uri)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="train/")["Contents"]
                  if not o["Key"].startswith("train/_bucketload/"))
    assert len(keys) == SAMPLES
    return uri, bucket, keys


def _samples(bucketload_bin, env, uri: str, *flags: str) -> int:  # noqa: F811
    report = json.loads(ok(bucketload_bin, env, "read", uri, "--json", *flags))
    return report["epochs"][0]["samples"]


def _add(s3, bucket: str, keys: list[str]) -> str:
    """Copies the first image to a new key of its class folder; returns the key."""
    new = keys[0].rsplit("/", 1)[0] + "/added-later.jpg"
    body = s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
    s3.put_object(Bucket=bucket, Key=new, Body=body)
    return new


def _indices(loader: bucketload.Loader) -> list[int]:
    return [i for _images, _labels, indices in loader for i in indices.tolist()]


def _loader(uri: str, **kw) -> bucketload.Loader:
    return bucketload.Loader(uri, batch_size=4, image_size=16, shuffle=False,
                             return_indices=True, **kw)


def test_cli_check_names_an_added_object_and_no_manifest_reads_it(bucketload_bin, env, s3,  # noqa: F811
                                                                    dataset):
    uri, bucket, keys = dataset
    new = _add(s3, bucket, keys)
    assert _samples(bucketload_bin, env, uri) == SAMPLES  # the manifest does not list it
    checked = run(bucketload_bin, env, "read", uri, "--check-manifest")
    assert checked.returncode == 6, checked.stderr
    error = checked.stderr
    assert f"{uri}/_bucketload/manifest.bin is stale" in error, error
    assert "1 object added since it was written (" + new.removeprefix("train/") + ")" in error
    assert f"refresh it with `bucketload manifest {uri}`" in error, error
    assert "--no-manifest" in error, error
    assert _samples(bucketload_bin, env, uri, "--no-manifest") == SAMPLES + 1
    ok(bucketload_bin, env, "manifest", uri)
    assert _samples(bucketload_bin, env, uri, "--check-manifest") == SAMPLES + 1


def test_cli_epoch_names_a_deleted_object_as_a_stale_manifest(bucketload_bin, env, s3,  # noqa: F811
                                                               dataset):
    uri, bucket, keys = dataset
    s3.delete_object(Bucket=bucket, Key=keys[5])
    failed = run(bucketload_bin, env, "read", uri, "--no-shuffle")
    assert failed.returncode == 3, failed.stderr  # not found
    error = failed.stderr.splitlines()[0]
    assert f"is stale: it lists s3://{bucket}/{keys[5]}, which is not found" in error, error
    assert f"refresh it with `bucketload manifest {uri}`" in error, error
    assert "--no-manifest" in error, error
    checked = run(bucketload_bin, env, "read", uri, "--check-manifest")
    assert "1 object listed but gone (" + keys[5].removeprefix("train/") + ")" in checked.stderr
    assert _samples(bucketload_bin, env, uri, "--no-manifest") == SAMPLES - 1


def test_cli_a_deleted_shard_names_the_command_that_rebuilds_the_shards(bucketload_bin, env,  # noqa: F811
                                                                         s3, dataset):
    uri, bucket, _ = dataset
    shards = f"s3://{bucket}/wds"
    ok(bucketload_bin, env, "shard", uri, shards, "--samples-per-shard", "4")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="wds/")["Contents"]
    tars = sorted(o["Key"] for o in listed if o["Key"].endswith(".tar"))
    assert len(tars) == 3
    s3.delete_object(Bucket=bucket, Key=tars[1])
    failed = run(bucketload_bin, env, "read", shards)
    assert failed.returncode == 3, failed.stderr
    error = failed.stderr.splitlines()[0]
    assert f"it lists s3://{bucket}/{tars[1]}, which is not found" in error, error
    assert f"`bucketload shard {uri} {shards} --overwrite`" in error, error
    checked = run(bucketload_bin, env, "read", shards, "--check-manifest")
    assert "1 object listed but gone (" + tars[1].removeprefix("wds/") + ")" in checked.stderr


def test_stats_and_shard_read_added_objects_with_no_manifest(bucketload_bin, env, s3,  # noqa: F811
                                                              dataset):
    uri, bucket, keys = dataset
    _add(s3, bucket, keys)
    described = json.loads(ok(bucketload_bin, env, "stats", uri, "--json", "--sample", "0"))
    assert (described["from"], described["objects"]) == ("manifest", SAMPLES)
    listed = json.loads(ok(bucketload_bin, env, "stats", uri, "--json", "--sample", "0",
                           "--no-manifest"))
    assert (listed["from"], listed["objects"]) == ("listing", SAMPLES + 1)
    text = ok(bucketload_bin, env, "stats", uri, "--sample", "0", "--no-manifest")
    assert "--no-manifest: listed" in text, text
    shards = f"s3://{bucket}/wds"
    report = json.loads(ok(bucketload_bin, env, "shard", uri, shards, "--no-manifest", "--json"))
    assert report["samples"] == SAMPLES + 1
    report = json.loads(ok(bucketload_bin, env, "shard", uri, f"{shards}-from-manifest", "--json"))
    assert report["samples"] == SAMPLES
    native = json.loads(bucketload._native.shard(uri, f"{shards}-native", use_manifest=False))
    assert native["samples"] == SAMPLES + 1


def test_loader_check_raises_and_use_manifest_false_reads_added_objects(s3, dataset):
    uri, bucket, keys = dataset
    new = _add(s3, bucket, keys)
    assert len(_indices(_loader(uri))) == SAMPLES
    with pytest.raises(CorruptDataError) as err:
        _indices(_loader(uri, check_manifest=True))
    message = str(err.value)
    assert new.removeprefix("train/") in message and "is stale" in message, message
    assert f"`bucketload manifest {uri}` command" in message, message
    assert "use_manifest=False" in message, message
    assert sorted(_indices(_loader(uri, use_manifest=False))) == list(range(SAMPLES + 1))


def test_loader_epoch_raises_not_found_naming_the_stale_manifest(s3, dataset):
    uri, bucket, keys = dataset
    s3.delete_object(Bucket=bucket, Key=keys[3])
    with pytest.raises(NotFoundError) as err:
        _indices(_loader(uri))
    assert isinstance(err.value, FileNotFoundError)
    message = str(err.value)
    assert f"is stale: it lists s3://{bucket}/{keys[3]}, which is not found" in message, message
    assert f"`bucketload manifest {uri}` command" in message, message
    assert "use_manifest=False" in message, message
    assert len(_indices(_loader(uri, use_manifest=False))) == SAMPLES - 1


def test_checking_an_ignored_manifest_is_a_config_error(dataset):
    uri, _, _ = dataset
    with pytest.raises(ConfigError, match="check_manifest"):
        len(_loader(uri, use_manifest=False, check_manifest=True))
