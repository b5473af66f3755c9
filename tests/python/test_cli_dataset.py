"""`bucketload gen`, `stats` and `cp` checked with an independent client (boto3),
on the embedded server and on moto's server."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _free_port, _wait_listening, make_client


def run(bucketload_bin, env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([bucketload_bin, *args], env=env, capture_output=True, text=True, timeout=300)


def ok(bucketload_bin, env, *args: str) -> str:
    out = run(bucketload_bin, env, *args)
    assert out.returncode == 0, f"bucketload {' '.join(args)} exited {out.returncode}:\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    exe = Path(sys.executable).parent / "moto_server"
    if not exe.exists():
        pytest.fail(f"{exe} missing; run scripts/setup.sh")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    _wait_listening(port, proc, "moto_server")
    endpoint = f"http://127.0.0.1:{port}"
    env = dict(os.environ, AWS_ACCESS_KEY_ID="moto", AWS_SECRET_ACCESS_KEY="moto", AWS_REGION="us-east-1",
               AWS_ENDPOINT_URL=endpoint)
    env.pop("AWS_PROFILE", None)
    yield endpoint, env
    proc.terminate()
    proc.wait(timeout=10)


def test_gen_layout_verified_with_boto3(bucketload_bin, server, s3, bucket):
    ok(bucketload_bin, server.env(), "gen", f"s3://{bucket}/train", "--samples", "60", "--classes", "3",
       "--size", "20KB", "--seed", "11")
    objs = [o for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="train/")
            for o in p.get("Contents", [])]
    assert len(objs) == 60
    per_class = collections.Counter(o["Key"].split("/")[1] for o in objs)
    assert len(per_class) == 3 and sum(per_class.values()) == 60
    assert all(abs(o["Size"] - 20_000) <= 2_000 for o in objs), [o["Size"] for o in objs]
    assert all(o["Key"].endswith(".jpg") for o in objs)
    first = s3.get_object(Bucket=bucket, Key=objs[0]["Key"])["Body"].read()
    assert first[:3] == b"\xff\xd8\xff" and first[-2:] == b"\xff\xd9"

    stats = json.loads(ok(bucketload_bin, server.env(), "stats", f"s3://{bucket}/train", "--json"))
    text = json.dumps(stats)
    assert "60" in text


def test_gen_is_deterministic(bucketload_bin, server, s3, bucket):
    for prefix in ("one", "two"):
        ok(bucketload_bin, server.env(), "gen", f"s3://{bucket}/{prefix}", "--samples", "8", "--classes", "2",
           "--size", "10KB", "--seed", "5")
    tags = {}
    for prefix in ("one", "two"):
        listing = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")["Contents"]
        tags[prefix] = {o["Key"].split("/", 1)[1]: o["ETag"] for o in listing}
    assert tags["one"] == tags["two"]


def test_cp_roundtrip_through_moto(bucketload_bin, moto, tmp_path):
    endpoint, env = moto
    client = make_client(endpoint, key="moto", secret="moto")
    client.create_bucket(Bucket="cp-moto")
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    files = {"a.bin": os.urandom(3 * 1024 * 1024 + 5), "nested/b.txt": b"bee"}
    for name, data in files.items():
        (src / name).write_bytes(data)

    ok(bucketload_bin, env, "cp", "--recursive", str(src), "s3://cp-moto/up")
    for name, data in files.items():
        assert client.get_object(Bucket="cp-moto", Key=f"up/{name}")["Body"].read() == data

    out = tmp_path / "out"
    ok(bucketload_bin, env, "cp", "--recursive", "s3://cp-moto/up", str(out))
    for name, data in files.items():
        assert (out / name).read_bytes() == data


def test_bad_input_is_one_clear_line(bucketload_bin, server, bucket):
    env = server.env()
    res = run(bucketload_bin, env, "ls", "ftp://nowhere/x")
    assert res.returncode != 0 and "ftp://" in res.stderr and "panicked" not in res.stderr

    res = run(bucketload_bin, env, "stats", f"s3://no-such-bucket-{bucket}/x")
    assert res.returncode != 0 and f"no-such-bucket-{bucket}" in res.stderr

    res = run(bucketload_bin, env, "cp", f"s3://{bucket}/missing.bin", "/tmp/should-not-exist.bin")
    assert res.returncode == 3, res.stderr
    assert f"s3://{bucket}/missing.bin" in res.stderr
    assert not Path("/tmp/should-not-exist.bin").exists()

    bad = dict(env, AWS_SECRET_ACCESS_KEY="wrong")
    res = run(bucketload_bin, bad, "ls", f"s3://{bucket}/")
    assert res.returncode == 4, res.stderr

    closed = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{_free_port()}")
    res = run(bucketload_bin, closed, "--max-retries", "0", "ls", f"s3://{bucket}/")
    assert res.returncode == 5, res.stderr
    for r in (res,):
        assert "Traceback" not in r.stderr and "panicked" not in r.stderr


def test_cp_keeps_unicode_and_spaces_in_keys(bucketload_bin, server, s3, bucket, tmp_path):
    local = tmp_path / "source file.bin"
    local.write_bytes(b"payload")
    key = "dir/ünïcødé and space.bin"
    ok(bucketload_bin, server.env(), "cp", str(local), f"s3://{bucket}/{key}")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == [key]
    back = tmp_path / "back.bin"
    ok(bucketload_bin, server.env(), "cp", f"s3://{bucket}/{key}", str(back))
    assert back.read_bytes() == b"payload"
