"""Fixtures: a real `bucketload serve` process on loopback, and independent clients
(boto3, the AWS CLI) pointed at it.

The binary comes from $BUCKETLOAD_BIN (scripts/test.sh builds it); the tests never mock
the store.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

ACCESS_KEY = "pytest-access"
SECRET_KEY = "pytest-secret"
REPO = Path(__file__).resolve().parents[2]


def _binary() -> str:
    path = os.environ.get("BUCKETLOAD_BIN", str(REPO / "target" / "debug" / "bucketload"))
    if not os.path.exists(path):
        pytest.fail(f"{path}: bucketload binary not found; build it with `cargo build -p bucketload-cli` "
                    "or run scripts/test.sh")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within 30 s")


class Server:
    """A running server process and how to reach it."""

    def __init__(self, proc: subprocess.Popen, endpoint: str, root: Path):
        self.proc = proc
        self.endpoint = endpoint
        self.root = root

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=self.endpoint,
        )
        env.pop("AWS_PROFILE", None)
        env.pop("AWS_SESSION_TOKEN", None)
        return env


def start_server(tmp: Path, *extra: str) -> Server:
    port = _free_port()
    root = tmp / f"root-{port}"
    root.mkdir()
    log = open(tmp / f"serve-{port}.log", "wb")
    proc = subprocess.Popen(
        [_binary(), "serve", "--root", str(root), "--addr", f"127.0.0.1:{port}",
         "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, *extra],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, proc, "bucketload serve")
    except Exception:
        proc.kill()
        proc.wait()
        log.close()
        sys.stderr.write((tmp / f"serve-{port}.log").read_text(errors="replace"))
        raise
    return Server(proc, f"http://127.0.0.1:{port}", root)


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    srv = start_server(tmp_path_factory.mktemp("serve"))
    yield srv
    stop_server(srv)


def make_client(endpoint: str, key: str = ACCESS_KEY, secret: str = SECRET_KEY,
                addressing: str | None = "path", **cfg):
    """boto3 on `endpoint`; `addressing=None` leaves the addressing style to boto3, as a user of
    a directory bucket does (boto3 then opens S3 Express sessions itself)."""
    s3 = {"addressing_style": addressing} if addressing else None
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3=s3, retries={"max_attempts": 1}, **cfg),
    )


@pytest.fixture(scope="session")
def s3(server):
    return make_client(server.endpoint)


_counter = itertools.count()


@pytest.fixture
def bucket(s3) -> str:
    name = f"t{next(_counter)}-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def aws_cli() -> str:
    path = shutil.which("aws", path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail("the AWS CLI is not installed in the virtualenv; run scripts/setup.sh")
    return path


@pytest.fixture(scope="session")
def bucketload_bin() -> str:
    return _binary()


@pytest.fixture(params=["bucketload", "moto"])
def store(request, server):
    """``(name, boto3 client, fresh bucket)`` on the embedded server or on moto's server (a
    module using it imports the ``moto`` fixture from test_cli_dataset)."""
    if request.param == "bucketload":
        client = make_client(server.endpoint)
    else:
        endpoint, _ = request.getfixturevalue("moto")
        client = make_client(endpoint, key="moto", secret="moto")
    bucket = f"{request.module.__name__.removeprefix('test_').replace('_', '-')[:20]}-{os.urandom(5).hex()}"
    client.create_bucket(Bucket=bucket)
    return request.param, client, bucket
