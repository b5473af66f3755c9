"""Indexed shards fetch their indexes when their shard comes up: ``bucketload.Loader`` opening
a dataset with a manifest, counting its batches and saving or restoring its state reads the
manifest and no shard index. Against a real `bucketload serve`, counted by the server."""

from __future__ import annotations

import json
import urllib.request

import bucketload

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

SAMPLES = 400
SHARDS = 40


def _gets(server) -> int:
    with urllib.request.urlopen(f"{server.endpoint}/_bucketload/counters", timeout=30) as r:
        return json.load(r).get("GetObject", 0)


def _keys(s3, bucket: str, suffix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="wds/")
    return [o["Key"] for page in pages for o in page.get("Contents", [])
            if o["Key"].endswith(suffix)]


def test_open_len_and_state_dict_read_no_index(bucketload_bin, env, s3, server):  # noqa: F811
    bucket = "index-demand"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/src", "--samples", str(SAMPLES), "--classes",
       "4", "--size", "1KB", "--seed", "3")
    ok(bucketload_bin, env, "shard", f"s3://{bucket}/src", f"s3://{bucket}/wds",
       "--samples-per-shard", str(SAMPLES // SHARDS))
    assert len(_keys(s3, bucket, ".tar.idx")) == SHARDS, "boto3 sees an index per shard"
    uri = f"s3://{bucket}/wds"

    before = _gets(server)
    loader = bucketload.Loader(uri, format="indexed", rank=0, world_size=8, batch_size=5,
                               image_size=16)
    assert len(loader) == SAMPLES // 8 // 5
    state = loader.state_dict()
    again = bucketload.Loader(uri, format="indexed", rank=0, world_size=8, batch_size=5,
                              image_size=16)
    again.load_state_dict(state)
    assert len(again) == len(loader)
    assert _gets(server) - before == 2, "two manifests, no index"

    labels = [label for _images, batch in again for label in batch.tolist()]
    assert len(labels) == SAMPLES // 8
    # The rank's 50 samples lie in at most 40 shards: at most one index GET each, one ranged
    # GET per sample at most.
    read = _gets(server) - before - 2
    assert 0 < read <= SHARDS + SAMPLES // 8


def test_a_tiny_index_cache_still_reads_every_sample(bucketload_bin, env, s3, server):  # noqa: F811
    bucket = "index-cache"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/src", "--samples", "120", "--classes", "3",
       "--size", "1KB", "--seed", "5")
    ok(bucketload_bin, env, "shard", f"s3://{bucket}/src", f"s3://{bucket}/wds",
       "--samples-per-shard", "10")
    uri = f"s3://{bucket}/wds"

    def epoch(**kw) -> tuple[list[int], int]:
        """The samples of a second epoch, and the GETs it sent."""
        loader = bucketload.Loader(uri, format="indexed", decode=False, batch_size=8, seed=1,
                                   rank=0, world_size=1, **kw)
        first = sorted(s["__index__"] for batch in loader for s in batch)
        before = _gets(server)
        indices = sorted(s["__index__"] for batch in loader for s in batch)
        assert indices == first
        return indices, _gets(server) - before

    default, default_gets = epoch()
    tiny, tiny_gets = epoch(index_cache=1)
    assert len(default) == 120 and len(set(default)) == 120
    assert tiny == default, "every sample once, whatever the bound"
    # The default bound keeps the 12 indexes from the first epoch; a bound of one byte keeps
    # only the one in use, so the second epoch fetches the others again.
    assert tiny_gets >= default_gets + 11, (tiny_gets, default_gets)
    assert epoch(index_cache="1KiB")[0] == default


def test_a_bad_index_cache_is_a_config_error() -> None:
    for bad in (-1, "lots", "12 parsecs"):
        try:
            bucketload.Loader("s3://nowhere/x", index_cache=bad)
        except bucketload.ConfigError as e:
            assert "index_cache" in str(e), e
        else:
            raise AssertionError(f"index_cache={bad!r} was accepted")
