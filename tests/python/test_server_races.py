"""Reads racing writes of the same key on `bucketload serve`: every answer describes one version.

A writer replaces keys over and over with versions of the same size (so a size check cannot
tell them apart) while boto3 readers on other threads GET them whole (with
`ChecksumMode=ENABLED`), by range, and HEAD then GET with `If-Match`. Each answer's bytes must be
the version its ETag names, with that version's Content-Length and checksum: a loader files cache
entries and checks manifests by the ETag. On a versioned bucket, a GET of the version a HEAD named answers that version. Bounded by the
writer's iterations, never by time.
Checked against the embedded server and moto's server."""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import threading
import zlib

import pytest
from botocore.exceptions import ClientError

from conftest import make_client
from test_cli_dataset import moto  # noqa: F401  (a fixture)

VERSIONS = 4
WRITES = 60
READERS = 4
# Each reader stops when the writer is done, and after this many reads at most.
MAX_READS = 2000


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def _versions(size: int, salt: str) -> dict[str, bytes]:
    """Distinct bodies of one size, by their ETag (quoted, as S3 answers it)."""
    bodies = [hashlib.sha256(f"{salt}{v}".encode()).digest() * (size // 32) for v in range(VERSIONS)]
    return {f'"{hashlib.md5(b).hexdigest()}"': b for b in bodies}


def _check_get(s3, bucket, key, versions, problems, **kwargs) -> None:
    try:
        out = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED", **kwargs)
    except ClientError as e:
        if e.response["ResponseMetadata"]["HTTPStatusCode"] != 412 or "IfMatch" not in kwargs:
            problems.append(f"GET {key} {kwargs}: {e}")
        return
    body = out["Body"].read()
    etag = out["ETag"]
    expected = versions.get(etag)
    if expected is None:
        problems.append(f"GET {key} {kwargs}: unknown ETag {etag}")
        return
    if "Range" in kwargs:
        first, last = (int(n) for n in kwargs["Range"].removeprefix("bytes=").split("-"))
        expected = expected[first:last + 1]
    elif out.get("ChecksumCRC32") != _crc32(body):
        problems.append(f"GET {key}: checksum {out.get('ChecksumCRC32')} of other bytes")
    if "IfMatch" in kwargs and kwargs["IfMatch"] != etag:
        problems.append(f"GET {key} If-Match {kwargs['IfMatch']} answered {etag}")
    if body != expected:
        problems.append(f"GET {key} {kwargs}: bytes of another version than ETag {etag}")
    if out["ContentLength"] != len(body):
        problems.append(f"GET {key} {kwargs}: Content-Length {out['ContentLength']}")


def _reader(endpoint, creds, bucket, keys, done, turn) -> tuple[int, list[str]]:
    s3 = make_client(endpoint, **creds)
    problems: list[str] = []
    reads = 0
    while not done.is_set() and reads < MAX_READS and not problems:
        for key, versions in keys.items():
            size = len(next(iter(versions.values())))
            if turn == 0:
                _check_get(s3, bucket, key, versions, problems)
            elif turn == 1:
                first = (reads * 4099) % (size - 10)
                _check_get(s3, bucket, key, versions, problems, Range=f"bytes={first}-{first + 9}")
            else:
                head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
                if head["ContentLength"] != size or head["ETag"] not in versions:
                    problems.append(f"HEAD {key}: {head['ETag']} {head['ContentLength']}")
                elif head.get("ChecksumCRC32") != _crc32(versions[head["ETag"]]):
                    problems.append(f"HEAD {key}: checksum of another version than {head['ETag']}")
                _check_get(s3, bucket, key, versions, problems, IfMatch=head["ETag"])
                if "VersionId" in head:
                    got = s3.get_object(Bucket=bucket, Key=key, VersionId=head["VersionId"])
                    body = got["Body"].read()
                    if got["ETag"] != head["ETag"] or body != versions[head["ETag"]]:
                        problems.append(f"GET {key} version {head['VersionId']}: another version")
            reads += 1
    return reads, problems


@pytest.mark.parametrize("size, versioned", [
    (100_000, False), (2 * 1024 * 1024, False), (100_000, True)])
def test_reads_racing_writes_answer_one_version(store, server, request, size, versioned):
    name, s3, bucket = store
    if versioned:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    if name == "bucketload":
        endpoint, creds = server.endpoint, {}
    else:
        endpoint, _ = request.getfixturevalue("moto")
        creds = {"key": "moto", "secret": "moto"}
    keys = {f"k{i}": _versions(size, f"{size}-{i}-") for i in range(2)}
    for key, versions in keys.items():
        s3.put_object(Bucket=bucket, Key=key, Body=next(iter(versions.values())),
                      ChecksumAlgorithm="CRC32")
    done = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
        readers = [pool.submit(_reader, endpoint, creds, bucket, keys, done, t % 3)
                   for t in range(READERS)]
        try:
            bodies = [list(v.values()) for v in keys.values()]
            for n in range(WRITES):
                for key, versions in zip(keys, bodies):
                    s3.put_object(Bucket=bucket, Key=key, Body=versions[n % VERSIONS],
                                  ChecksumAlgorithm="CRC32")
        finally:
            done.set()
        results = [r.result() for r in readers]
    problems = [p for _, found in results for p in found]
    assert not problems, problems[:5]
    assert all(reads > 0 for reads, _ in results)
