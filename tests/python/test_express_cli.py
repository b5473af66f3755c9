"""The CLI on S3 Express One Zone directory buckets (`base--zone--x-s3`) of `bucketload serve`,
which refuses any request to them not signed with a session from CreateSession. boto3, with
its own S3 Express support, is the independent client that checks each effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid

import pytest
from conftest import make_client

PERMISSION = 4  # the CLI's exit code for permission and credential errors


def directory_bucket(s3) -> str:
    bucket = f"t{uuid.uuid4().hex[:10]}--use1-az4--x-s3"
    s3.create_bucket(
        Bucket=bucket,
        CreateBucketConfiguration={
            "Location": {"Type": "AvailabilityZone", "Name": "use1-az4"},
            "Bucket": {"DataRedundancy": "SingleAvailabilityZone", "Type": "Directory"},
        },
    )
    return bucket


def create_sessions(endpoint: str) -> int:
    with urllib.request.urlopen(f"{endpoint}/_bucketload/counters") as response:
        return json.load(response).get("CreateSession", 0)


def run(server, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [os.environ["BUCKETLOAD_BIN"], *args],
        env=env or server.env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def express(server):
    # boto3 as a user of a directory bucket configures it: it opens its own sessions.
    return make_client(server.endpoint, addressing=None)


def test_cp_and_ls_on_a_directory_bucket(server, express, tmp_path):
    bucket = directory_bucket(express)
    src = tmp_path / "src"
    (src / "imgs").mkdir(parents=True)
    small = {f"imgs/{i}.jpg": os.urandom(1000 + i) for i in range(5)}
    for key, data in small.items():
        (src / key).write_bytes(data)
    big = os.urandom(11 << 20)  # three parts of 5 MiB: a multipart upload
    (src / "ckpt.pt").write_bytes(big)

    up = run(server, "cp", "-r", "--part-size", "5MiB", str(src), f"s3://{bucket}/run/")
    assert up.returncode == 0, up.stderr
    for key, data in small.items():
        assert express.get_object(Bucket=bucket, Key=f"run/{key}")["Body"].read() == data
    assert express.get_object(Bucket=bucket, Key="run/ckpt.pt")["Body"].read() == big

    # Payloads signed with their SHA-256, as --sign-payload asks.
    signed = run(server, "cp", "--sign-payload", str(src / "imgs/0.jpg"),
                 f"s3://{bucket}/signed/0.jpg")
    assert signed.returncode == 0, signed.stderr
    assert express.get_object(Bucket=bucket, Key="signed/0.jpg")["Body"].read() == small["imgs/0.jpg"]

    listed = run(server, "ls", f"s3://{bucket}/run/imgs/")
    assert listed.returncode == 0, listed.stderr
    assert sorted(n for n in small if n.split("/")[-1] in listed.stdout) == sorted(small)

    # Bucket to bucket (CopyObject), then back to a local folder.
    copied = run(server, "cp", f"s3://{bucket}/run/imgs/3.jpg", f"s3://{bucket}/copy/3.jpg")
    assert copied.returncode == 0, copied.stderr
    assert express.get_object(Bucket=bucket, Key="copy/3.jpg")["Body"].read() == small["imgs/3.jpg"]
    down = run(server, "cp", "-r", f"s3://{bucket}/run/", str(tmp_path / "back"))
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "back" / "ckpt.pt").read_bytes() == big
    for key, data in small.items():
        assert (tmp_path / "back" / key).read_bytes() == data


def test_one_session_per_command_and_none_for_general_buckets(server, express, s3, bucket,
                                                              tmp_path):
    directory = directory_bucket(express)
    express.put_object(Bucket=directory, Key="d/a", Body=b"a")
    express.put_object(Bucket=directory, Key="d/b", Body=b"b")
    (tmp_path / "f").write_bytes(b"general")
    before = create_sessions(server.endpoint)
    out = run(server, "cp", "-r", f"s3://{directory}/d/", str(tmp_path / "d"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "d" / "a").read_bytes() == b"a"
    assert (tmp_path / "d" / "b").read_bytes() == b"b"
    # A general purpose bucket beside it: no session, as before.
    out = run(server, "cp", str(tmp_path / "f"), f"s3://{bucket}/f")
    assert out.returncode == 0, out.stderr
    assert run(server, "ls", f"s3://{bucket}/").returncode == 0
    assert s3.get_object(Bucket=bucket, Key="f")["Body"].read() == b"general"
    assert create_sessions(server.endpoint) - before == 1


def test_a_refused_session_names_bucket_and_permission(server, express, tmp_path):
    bucket = directory_bucket(express)
    express.put_object(Bucket=bucket, Key="k", Body=b"v")
    env = server.env()
    env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    out = run(server, "cp", f"s3://{bucket}/k", str(tmp_path / "k"), env=env)
    assert out.returncode == PERMISSION, out.stderr
    assert (
        f"cannot open a session on directory bucket `{bucket}` (s3express:CreateSession): "
        "SignatureDoesNotMatch" in out.stderr
    ), out.stderr
    assert not (tmp_path / "k").exists()
