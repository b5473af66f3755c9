"""`bucketload shard` output read by independent tools: boto3 downloads, Python's tarfile,
GNU tar and the webdataset library see every sample once with the right label; the manifest's
checksums match the bytes boto3 returns. Run against the embedded server and moto's server."""

from __future__ import annotations

import collections
import hashlib
import io
import json
import subprocess
import tarfile

import pytest
import webdataset as wds

from conftest import make_client
from test_cli_dataset import moto, ok  # noqa: F401  (moto is a fixture)


def shard_and_download(bucketload_bin, env, s3, bucket, tmp_path):
    src, dst = f"s3://{bucket}/train", f"s3://{bucket}/shards"
    ok(bucketload_bin, env, "gen", src, "--samples", "45", "--classes", "3", "--size", "4KB")
    report = json.loads(ok(bucketload_bin, env, "shard", src, dst, "--samples-per-shard", "10",
                           "--shuffle", "--seed", "5", "--md5", "--json",
                           "--manifest-format", "1"))
    assert report["written"] == 5 and report["samples"] == 45
    manifest = json.loads(s3.get_object(Bucket=bucket, Key="shards/_bucketload/manifest.json")["Body"].read())
    files = []
    for shard in manifest["shards"]:
        body = s3.get_object(Bucket=bucket, Key=f"shards/{shard['name']}")["Body"].read()
        assert len(body) == shard["bytes"]
        assert hashlib.md5(body).hexdigest() == shard["md5"]
        path = tmp_path / shard["name"]
        path.write_bytes(body)
        files.append(path)
    originals = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="train/"):
        for obj in page.get("Contents", []):
            if not obj["Key"].startswith("train/_bucketload/"):
                originals[obj["Key"][len("train/"):]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return manifest, files, originals


def check_with_tarfile_and_webdataset(manifest, files, originals):
    classes = [c["name"] for c in manifest["classes"]]
    seen = collections.Counter()
    for path in files:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                data = tar.extractfile(member).read()
                if member.name.endswith(".jpg"):
                    assert data == originals[member.name], member.name
                else:
                    folder = member.name.split("/")[0]
                    assert data == str(classes.index(folder)).encode(), member.name
                seen[member.name] += 1
    assert all(n == 1 for n in seen.values())
    assert len([n for n in seen if n.endswith(".jpg")]) == len(originals) == 45
    samples = list(wds.WebDataset([str(p) for p in files], shardshuffle=False))
    assert len(samples) == 45
    for sample in samples:
        key = sample["__key__"]
        assert sample["jpg"] == originals[key + ".jpg"]
        assert int(sample["cls"]) == classes.index(key.split("/")[0])
    listing = subprocess.run(["tar", "-tf", str(files[0])], capture_output=True, text=True, check=True)
    assert len(listing.stdout.split()) == 2 * manifest["shards"][0]["samples"]


def test_shards_read_with_tarfile_webdataset_and_gnu_tar(bucketload_bin, server, s3, bucket, tmp_path):
    manifest, files, originals = shard_and_download(bucketload_bin, server.env(), s3, bucket, tmp_path)
    check_with_tarfile_and_webdataset(manifest, files, originals)


def test_sharding_on_moto(bucketload_bin, moto, tmp_path):  # noqa: F811
    endpoint, env = moto
    client = make_client(endpoint, "moto", "moto")
    client.create_bucket(Bucket="shard-on-moto")
    manifest, files, originals = shard_and_download(bucketload_bin, env, client, "shard-on-moto", tmp_path)
    check_with_tarfile_and_webdataset(manifest, files, originals)
    out = subprocess.run([bucketload_bin, "verify", "s3://shard-on-moto/shards"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
