"""A dataset whose `bucketload shard` run never finished (`shard --part 0/5` leaves what a killed
run leaves: its run record, 4 of 20 shards, no manifest) is refused by `bucketload.Loader` with a
`ConfigError` naming the record and how much is missing; `allow_incomplete=True` reads what is
there; once every part is written and merged it reads whole."""

from __future__ import annotations

import pytest
from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

import bucketload


def test_loader_refuses_an_unfinished_shard_run(bucketload_bin, env, s3):  # noqa: F811
    bucket = "unfinished-run"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/src", "--samples", "100", "--classes", "4",
       "--size", "1KB")
    dst = f"s3://{bucket}/shards"

    def shard(part: str) -> None:
        ok(bucketload_bin, env, "shard", f"s3://{bucket}/src", dst, "--samples-per-shard", "5",
           "--part", part)

    def samples(**kw: object) -> int:
        loader = bucketload.Loader(dst, batch_size=10, decode=False, shuffle=False, **kw)
        return sum(len(batch) for batch in loader)

    shard("0/5")
    with pytest.raises(bucketload.ConfigError) as refused:
        samples()
    message = str(refused.value)
    assert f"{dst}/_bucketload/run.json" in message
    assert "16 shards, 80 samples missing" in message
    assert "allow_incomplete" in message
    assert samples(allow_incomplete=True) == 20

    for part in ("1/5", "2/5", "3/5", "4/5"):
        shard(part)
    ok(bucketload_bin, env, "merge", dst)
    assert samples() == 100
