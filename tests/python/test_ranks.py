"""Ranks of a distributed job read disjoint parts of the dataset through DataLoader workers:
2 gloo ranks started by torch.multiprocessing.spawn (rank only in init_process_group) or by
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (as torchrun starts them), workers by fork and by
spawn, persistent or not. Every sample reaches exactly one rank once per epoch, in a new order
every epoch, for
``bucketload.Loader`` and ``S3IterableDataset(enable_sharding=True)``. A process that cannot
tell its rank raises instead of reading everything. Against a real `bucketload serve`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import bucketload
from bucketload.s3torch import S3IterableDataset

from test_cli_dataset import ok
from test_package import SAMPLES, env  # noqa: F401  (a fixture)

JOB = str(Path(__file__).with_name("ranks_job.py"))
RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(env) -> dict[str, str]:  # noqa: F811
    clean = {k: v for k, v in env.items() if k not in RANK_VARS}
    clean["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return clean


def _run(launch: str, uri: str, env, context: str, persistence: str,  # noqa: F811
         out: Path) -> list[dict]:
    port = str(_free_port())
    args = [sys.executable, JOB, launch, uri, env["AWS_ENDPOINT_URL"], context, persistence, port,
            str(out)]
    if launch == "spawn":
        procs = [subprocess.Popen(args, env=_clean_env(env), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)]
    else:
        procs = []
        for rank in range(2):
            rank_env = _clean_env(env)
            rank_env.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=port)
            procs.append(subprocess.Popen(args, env=rank_env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    results = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(2)]
    assert sorted(r["rank"] for r in results) == [0, 1]
    return results


@pytest.fixture(scope="module")
def dataset(bucketload_bin, env, s3):  # noqa: F811
    """40 JPEGs in 4 class folders; their URI and the keys boto3 lists."""
    bucket = "ranks-data"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/train", "--samples", str(SAMPLES), "--classes",
       "4", "--size", "2KB", "--seed", "3")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="train/")["Contents"])
    assert len(keys) == SAMPLES
    return f"s3://{bucket}/train", keys


@pytest.mark.parametrize("launch,context,persistence", [
    ("spawn", "spawn", "fresh"),
    ("spawn", "spawn", "persistent"),
    ("spawn", "fork", "fresh"),
    ("env", "spawn", "persistent"),
    ("env", "fork", "fresh"),
])
def test_every_sample_reaches_one_rank_once_per_epoch(dataset, env, launch, context,  # noqa: F811
                                                       persistence, tmp_path):
    uri, keys = dataset
    results = _run(launch, uri, env, context, persistence, tmp_path)
    for epoch in range(2):
        indices = [i for r in results for i in r["loader"][epoch]]
        assert sorted(indices) == list(range(SAMPLES)), f"Loader, epoch {epoch}"
        seen = [k for r in results for k in r["keys"][epoch]]
        assert sorted(seen) == sorted(keys), f"S3IterableDataset, epoch {epoch}"
        for r in results:
            assert len(r["loader"][epoch]) == len(r["keys"][epoch]) == SAMPLES // 2
    for r in results:  # a new order (and new augmentations) every epoch, on every rank
        assert r["loader"][0] != r["loader"][1] and r["keys"][0] != r["keys"][1]


@pytest.fixture
def no_rank(monkeypatch):
    for var in RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_a_configured_job_without_a_process_group_raises(dataset, env, no_rank):  # noqa: F811
    """MASTER_ADDR/MASTER_PORT set (an mp.spawn job) but no process group where the dataset
    was built and no RANK: the rank is unknown, so reading raises rather than giving this
    process the whole dataset."""
    uri = dataset[0]
    no_rank.setenv("MASTER_ADDR", "127.0.0.1")
    no_rank.setenv("MASTER_PORT", "29500")
    with pytest.raises(bucketload.ConfigError, match="init_process_group"):
        next(iter(bucketload.Loader(uri, batch_size=4, image_size=8)))
    ds = S3IterableDataset(uri, endpoint=env["AWS_ENDPOINT_URL"], enable_sharding=True)
    with pytest.raises(bucketload.ConfigError, match="init_process_group"):
        next(iter(ds))
    # Without sharding every reader reads everything, as the connector does: no rank needed.
    assert len(list(S3IterableDataset(uri, endpoint=env["AWS_ENDPOINT_URL"]))) == SAMPLES


@pytest.mark.parametrize("present,missing", [("WORLD_SIZE", "RANK"), ("RANK", "WORLD_SIZE")])
def test_half_a_rank_environment_raises(dataset, no_rank, present, missing):  # noqa: F811
    no_rank.setenv(present, "1" if present == "RANK" else "2")
    with pytest.raises(bucketload.ConfigError, match=f"{present}=.* is set but {missing} is not"):
        next(iter(bucketload.Loader(dataset[0], batch_size=4, image_size=8)))


def test_explicit_rank_wins_over_the_environment(dataset, no_rank):  # noqa: F811
    no_rank.setenv("RANK", "1")
    no_rank.setenv("WORLD_SIZE", "4")
    data = bucketload.Loader(dataset[0], batch_size=4, image_size=8, rank=0, world_size=2,
                             return_indices=True)
    assert sum(len(batch[2]) for batch in data) == SAMPLES // 2
