"""Indexed shards (``format="indexed"``) through the disk cache, against a real `bucketload
serve`, counted by the server and checked with boto3: a warm epoch of a new loader is served
from the cache's blocks of each shard, without a GET of sample data; a shard rewritten in place
to the same size gives its new bytes; a truncated cache file is not served; the cache keeps its
bound."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.request
from pathlib import Path

import pytest

import bucketload

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

SAMPLES = 120
PER_SHARD = 30
SHARDS = SAMPLES // PER_SHARD


def _counters(server) -> dict[str, int]:
    with urllib.request.urlopen(f"{server.endpoint}/_bucketload/counters", timeout=30) as r:
        return json.load(r)


def _gets(server) -> int:
    return _counters(server).get("GetObject", 0)


def _entries(cache: Path) -> list[Path]:
    """The cache's entry files, largest first."""
    files = [p for p in (cache / "entries").rglob("*") if p.is_file()]
    return sorted(files, key=lambda p: p.stat().st_size, reverse=True)


def _samples(uri: str, cache: Path, **kw) -> dict[str, bytes]:
    """One epoch of a new loader: each sample's key and its jpg member."""
    loader = bucketload.Loader(uri, format="indexed", decode=False, batch_size=16,
                               cache_dir=cache, **kw)
    out = {}
    for batch in loader:
        for s in batch:
            assert s["__key__"] not in out, "a sample read twice in one epoch"
            out[s["__key__"]] = bytes(s["jpg"])
    return out


@pytest.fixture()
def dataset(bucketload_bin, env, s3, request):  # noqa: F811
    """Indexed shards of SAMPLES JPEGs: their URI, bucket, and each sample's source bytes as
    boto3 reads them."""
    bucket = f"indexed-cache-{request.node.name.lower().replace('_', '-')[:30]}"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/src", "--samples", str(SAMPLES), "--classes",
       "3", "--size", "8KB", "--seed", "11")
    ok(bucketload_bin, env, "shard", f"s3://{bucket}/src", f"s3://{bucket}/wds",
       "--samples-per-shard", str(PER_SHARD))
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="src/")
    source = {}
    for page in pages:
        for o in page.get("Contents", []):
            key = o["Key"].removeprefix("src/").removesuffix(".jpg")
            source[key] = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    assert len(source) == SAMPLES
    return f"s3://{bucket}/wds", bucket, source


def test_a_warm_epoch_is_served_from_cached_blocks_without_a_get(dataset, server, tmp_path):
    uri, _, source = dataset
    cache = tmp_path / "cache"
    assert _samples(uri, cache) == source
    # One entry per shard's block (the shards are small: one block each) and per index, not one
    # per sample.
    assert len(_entries(cache)) == 2 * SHARDS
    before = _counters(server)
    assert _samples(uri, cache) == source
    after = _counters(server)
    asked = {k: after.get(k, 0) - before.get(k, 0) for k in ("GetObject", "HeadObject")}
    # A HEAD per shard (its version) and per index; one GET, of the dataset's manifest (the new
    # loader's catalog), and none of sample data.
    assert asked == {"GetObject": 1, "HeadObject": 2 * SHARDS}
    before = _counters(server)
    assert _samples(uri, cache, metadata_ttl="indefinite") == source
    after = _counters(server)
    assert after.get("GetObject", 0) - before.get("GetObject", 0) == 1


def test_a_truncated_cache_file_is_not_served(dataset, server, tmp_path):
    uri, _, source = dataset
    cache = tmp_path / "cache"
    _samples(uri, cache)
    largest = _entries(cache)[0]
    with open(largest, "r+b") as f:
        f.truncate(largest.stat().st_size - 100)
    before = _gets(server)
    assert _samples(uri, cache) == source
    # The manifest, and the truncated block alone.
    assert _gets(server) - before == 2


def test_a_shard_rewritten_in_place_is_read_anew(bucketload_bin, env, dataset, s3, tmp_path):  # noqa: F811
    uri, bucket, source = dataset
    cache = tmp_path / "cache"
    assert _samples(uri, cache) == source
    shard = min(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="wds/")["Contents"]
                if o["Key"].endswith(".tar"))
    body = bytearray(s3.get_object(Bucket=bucket, Key=shard)["Body"].read())
    with tarfile.open(fileobj=io.BytesIO(bytes(body))) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    at, size = member.offset_data, member.size
    body[at:at + size] = bytes(b ^ 0x5A for b in body[at:at + size])
    # Same size, new bytes; its index written again to match (`bucketload index`).
    s3.put_object(Bucket=bucket, Key=shard, Body=bytes(body))
    ok(bucketload_bin, env, "index", "--force", f"s3://{bucket}/{shard}")
    got = _samples(uri, cache)
    key = member.name.removesuffix(".jpg")
    assert got[key] == bytes(body[at:at + size]) != source[key]
    assert {k: v for k, v in got.items() if k != key} == {
        k: v for k, v in source.items() if k != key}


def test_the_cache_keeps_its_bound(dataset, tmp_path):
    uri, _, source = dataset
    cache = tmp_path / "cache"
    for _ in range(2):
        assert _samples(uri, cache, cache_size="1MiB") == source
        used = sum(p.stat().st_size for p in _entries(cache))
        assert used <= 1 << 20
