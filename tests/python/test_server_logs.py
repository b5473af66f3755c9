"""`bucketload serve -vv` logs every request, but never what would let a reader of the log
sign or replay one: no request signature (Authorization header, presigned URL), no secret
key. The secret key can come from a file (`--secret-key-file`), so it is not on the command
line for `ps` to show."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request

import pytest

from conftest import SECRET_KEY, _binary, _free_port, _wait_listening, make_client, start_server, stop_server


def _signed_requests(endpoint: str, secret: str, key: str = "pytest-access") -> list[str]:
    """Header-signed requests and a presigned GET; the signatures they carried."""
    signatures: list[str] = []

    def keep_signature(request, **_):
        auth = request.headers.get("Authorization")
        if auth:
            signatures.append(re.search(r"Signature=([0-9a-f]+)", auth.decode() if isinstance(auth, bytes) else auth).group(1))

    s3 = make_client(endpoint, key=key, secret=secret, signature_version="s3v4")
    s3.meta.events.register("before-send.s3", keep_signature)
    bucket = f"logs-{os.urandom(4).hex()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=600)
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.read() == b"data"
    signatures.append(re.search(r"X-Amz-Signature=([0-9a-f]+)", url).group(1))
    assert len(signatures) >= 3
    return signatures


def _assert_clean(log: str, signatures: list[str], secret: str) -> None:
    for signature in signatures:
        assert signature not in log, f"signature {signature} in the log"
    assert secret not in log
    # The requests were logged, only without their secrets.
    assert "request" in log and "status=200" in log, log[-2000:]


def test_debug_log_holds_no_signature_and_no_secret(tmp_path):
    server = start_server(tmp_path, "-vv")
    try:
        signatures = _signed_requests(server.endpoint, SECRET_KEY)
    finally:
        stop_server(server)
    log = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("serve-*.log"))
    assert "DEBUG" in log
    _assert_clean(log, signatures, SECRET_KEY)


def test_secret_key_file_keeps_the_secret_off_the_command_line(tmp_path):
    secret = "file-secret-" + os.urandom(8).hex()
    secret_file = tmp_path / "secret"
    secret_file.write_text(secret + "\n")
    port = _free_port()
    log_path = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "RUST_LOG"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [_binary(), "serve", "-vv", "--root", str(tmp_path / "root"), "--addr", f"127.0.0.1:{port}",
             "--access-key", "file-user", "--secret-key-file", str(secret_file)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )
    try:
        _wait_listening(port, proc, "bucketload serve")
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert secret.encode() not in f.read()
        signatures = _signed_requests(f"http://127.0.0.1:{port}", secret, key="file-user")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    _assert_clean(log_path.read_text(errors="replace"), signatures, secret)
