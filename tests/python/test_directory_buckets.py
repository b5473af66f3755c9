"""Every command on an S3 Express One Zone directory bucket (`name--zone--x-s3`) of the
embedded server, which makes such buckets behave as S3 Express does: sessions from
CreateSession on every request, listings not in key order, prefixes that end in `/`, ETags
that are not MD5s, appends. boto3, which implements the S3 Express protocol itself, checks
each effect; GNU tar reads the shards.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
from conftest import _binary
from test_mount import mounter
from test_server_sessions import counters, express_client


def run(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_binary(), *args], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def ok(env, *args: str) -> str:
    out = run(env, *args)
    assert out.returncode == 0, f"bucketload {' '.join(args)} exited {out.returncode}:\n{out.stderr}"
    return out.stdout


@pytest.fixture
def dbucket(server) -> str:
    name = f"d{uuid.uuid4().hex[:10]}--use1-az4--x-s3"
    express_client(server.endpoint).create_bucket(Bucket=name)
    return name


def listed(s3, bucket: str, prefix: str = "") -> dict[str, dict]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o for page in pages for o in page.get("Contents", [])}


def test_a_files_dataset_end_to_end(server, dbucket, tmp_path):
    s3 = express_client(server.endpoint)
    env = server.env()
    src = f"s3://{dbucket}/train"
    ok(env, "gen", src, "--samples", "60", "--classes", "3", "--size", "6KB", "--seed", "3")
    objects = listed(s3, dbucket, "train/")
    assert len(objects) == 60 and all(k.endswith(".jpg") for k in objects)

    # ls: the class folders, and recursively every object (as boto3 lists them).
    top = ok(env, "ls", f"{src}/")
    assert sorted(line.split()[-1] for line in top.splitlines()) == sorted(
        {k.split("/")[1] + "/" for k in objects})
    recursive = ok(env, "ls", "-r", f"{src}/")
    assert sorted(line.split()[-1] for line in recursive.splitlines()) == sorted(
        k.removeprefix("train/") for k in objects)

    stats = json.loads(ok(env, "stats", src, "--json"))
    assert "60" in json.dumps(stats)

    # The manifest, verify, and a read of every sample.
    ok(env, "manifest", src)
    assert "train/_bucketload/manifest.bin" in listed(s3, dbucket, "train/")
    ok(env, "verify", src)
    report = json.loads(ok(env, "read", src, "--format", "files", "--json", "--epochs", "2"))
    assert [e["samples"] for e in report["epochs"]] == [60, 60]

    # cp down: the same bytes as boto3 reads.
    ok(env, "cp", "-r", f"{src}/", str(tmp_path / "down"))
    for key in list(objects)[:10]:
        local = tmp_path / "down" / key.removeprefix("train/")
        assert local.read_bytes() == s3.get_object(Bucket=dbucket, Key=key)["Body"].read()

    # A deleted object: verify says so and exits 6.
    gone = sorted(objects)[7]
    s3.delete_object(Bucket=dbucket, Key=gone)
    out = run(env, "verify", src)
    assert out.returncode == 6, out.stderr
    assert gone.removeprefix("train/") in out.stdout + out.stderr


def test_shards_streamed_and_indexed(server, dbucket, tmp_path):
    s3 = express_client(server.endpoint)
    env = server.env()
    src, dst = f"s3://{dbucket}/train", f"s3://{dbucket}/shards"
    ok(env, "gen", src, "--samples", "50", "--classes", "5", "--size", "5KB", "--seed", "4")
    report = json.loads(ok(env, "shard", src, dst, "--samples-per-shard", "8", "--json"))
    assert (report["samples"], report["shards"]) == (50, 7)
    shards = sorted(k for k in listed(s3, dbucket, "shards/") if k.endswith(".tar"))
    assert len(shards) == 7
    members = 0
    for key in shards:
        path = tmp_path / Path(key).name
        path.write_bytes(s3.get_object(Bucket=dbucket, Key=key)["Body"].read())
        names = subprocess.run(["tar", "-tf", str(path)], capture_output=True, text=True,
                               check=True).stdout.split()
        members += sum(n.endswith(".jpg") for n in names)
        with tarfile.open(path) as t:
            assert t.getmembers()
    assert members == 50
    ok(env, "verify", dst)
    for fmt in ("shards", "indexed"):
        report = json.loads(ok(env, "read", dst, "--format", fmt, "--json"))
        assert report["epochs"][0]["samples"] == 50, fmt


def test_checkpoints_save_load_list_prune(server, dbucket, tmp_path):
    s3 = express_client(server.endpoint)
    env = server.env()
    blob = os.urandom(12 * 1024 * 1024 + 123)
    (tmp_path / "w.pt").write_bytes(blob)
    for step in (1, 2, 3):
        ok(env, "ckpt", "save", str(tmp_path / "w.pt"), f"s3://{dbucket}/run/step-{step}.pt",
           "--part-size", "5MiB")
    body = s3.get_object(Bucket=dbucket, Key="run/step-2.pt")["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(blob).digest()
    ok(env, "ckpt", "load", f"s3://{dbucket}/run/step-3.pt", str(tmp_path / "back.pt"))
    assert (tmp_path / "back.pt").read_bytes() == blob
    names = ok(env, "ckpt", "ls", f"s3://{dbucket}/run/")
    assert all(f"step-{s}.pt" in names for s in (1, 2, 3)), names
    ok(env, "ckpt", "prune", f"s3://{dbucket}/run/", "--keep-last", "1")
    assert sorted(listed(s3, dbucket, "run/")) == ["run/step-3.pt"]
    # No upload left behind by any of it.
    assert not s3.list_multipart_uploads(Bucket=dbucket).get("Uploads")


@pytest.fixture
def dmount(server, tmp_path):
    """Mounts a bucket (named by the test) on a temporary directory; unmounts after the test."""
    start, stop = mounter(server, tmp_path)
    yield start
    stop()


def test_the_mount_appends_on_a_directory_bucket(server, dbucket, dmount):
    s3 = express_client(server.endpoint)
    s3.put_object(Bucket=dbucket, Key="logs/run.log", Body=b"start\n")
    point = dmount(dbucket, "--allow-overwrite")
    log = point / "logs" / "run.log"
    subprocess.run(f"echo one >> '{log}'", shell=True, check=True)
    subprocess.run(["tee", "-a", str(log)], input=b"two\n", check=True, capture_output=True)
    with open(log, "a") as f:
        f.write("three\n")
    expected = b"start\none\ntwo\nthree\n"
    assert s3.get_object(Bucket=dbucket, Key="logs/run.log")["Body"].read() == expected
    assert log.read_bytes() == expected
    # `>>` to a new name makes the object.
    subprocess.run(f"echo new >> '{point}/logs/new.log'", shell=True, check=True)
    assert s3.get_object(Bucket=dbucket, Key="logs/new.log")["Body"].read() == b"new\n"

    # Another writer appends while the file is open: the mount's append is refused for its
    # offset, appends nothing, and the close says so.
    f = open(log, "ab", buffering=0)  # noqa: SIM115  (its close is what must fail)
    f.write(b"mine\n")
    s3.put_object(Bucket=dbucket, Key="logs/run.log", Body=b"theirs\n", WriteOffsetBytes=len(expected))
    with pytest.raises(OSError):
        f.close()
    assert s3.get_object(Bucket=dbucket, Key="logs/run.log")["Body"].read() == expected + b"theirs\n"


def test_general_purpose_buckets_still_refuse_appends_through_the_mount(server, bucket, s3, dmount):
    s3.put_object(Bucket=bucket, Key="run.log", Body=b"start\n")
    point = dmount(bucket, "--allow-overwrite")
    out = subprocess.run(f"echo one >> '{point}/run.log'", shell=True, capture_output=True, text=True,
                         check=False)
    assert out.returncode != 0
    assert s3.get_object(Bucket=bucket, Key="run.log")["Body"].read() == b"start\n"


def test_no_session_is_opened_for_a_general_purpose_bucket(server, bucket, s3):
    before = counters(server.endpoint).get("CreateSession", 0)
    ok(server.env(), "gen", f"s3://{bucket}/g", "--samples", "4", "--classes", "1", "--size", "2KB")
    ok(server.env(), "ls", f"s3://{bucket}/g/")
    assert counters(server.endpoint).get("CreateSession", 0) == before


def test_the_aws_cli_and_bucketload_share_a_directory_bucket(aws_cli, server, dbucket, tmp_path):
    """The AWS CLI (botocore's own S3 Express support) writes, bucketload reads, and back."""
    from test_server_awscli import aws

    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(9 * 1024 * 1024 + 5))
    aws(aws_cli, server, "s3", "cp", str(big), f"s3://{dbucket}/in/big.bin")
    ok(server.env(), "cp", f"s3://{dbucket}/in/big.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == big.read_bytes()
    ok(server.env(), "cp", str(big), f"s3://{dbucket}/out/big.bin")
    listing = aws(aws_cli, server, "s3", "ls", "--recursive", f"s3://{dbucket}/")
    assert "in/big.bin" in listing and "out/big.bin" in listing, listing
    aws(aws_cli, server, "s3", "cp", f"s3://{dbucket}/out/big.bin", str(tmp_path / "aws.bin"))
    assert (tmp_path / "aws.bin").read_bytes() == big.read_bytes()
