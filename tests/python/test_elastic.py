"""Resuming an epoch at another world size, with gloo: a world of 4 reads a few batches, rank
0's ``Loader.state_dict()`` is saved and a world of 2 and a world of 8 resume from it (one job
of 8 processes, elastic_job.py). The indices gathered over the ranks cover the epoch with no
sample repeated or skipped: with the default padding, repeats are only the padding of the new
world; with ``pad=False``, every sample exactly once. Against a real `bucketload serve`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)
from test_ranks import _clean_env, _free_port

JOB = str(Path(__file__).with_name("elastic_job.py"))
SAMPLES = 50


@pytest.fixture(scope="module")
def result(bucketload_bin, env, s3, tmp_path_factory):  # noqa: F811
    bucket = "elastic-data"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/train", "--samples", str(SAMPLES),
       "--classes", "2", "--size", "2KB", "--seed", "5")
    out = tmp_path_factory.mktemp("elastic")
    args = [sys.executable, JOB, f"s3://{bucket}/train", str(_free_port()), str(out)]
    proc = subprocess.run(args, env=_clean_env(env), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "result.json").read_text())


def test_the_state_names_the_world_that_saved_it(result):
    state = json.loads(result["pad"]["state"]["state"])
    assert (state["rank"], state["world_size"], state["consumed"]) == (0, 4, [6])


@pytest.mark.parametrize("world", [2, 8])
def test_another_world_size_neither_repeats_nor_skips(result, world):
    run = result["pad"]
    before = [i for rank in run["before"] for i in rank]
    assert len(before) == len(set(before)) == 4 * 6
    after = [i for rank in run[f"after{world}"] for i in rank]
    assert not set(before) & set(after), "a consumed sample came back"
    assert set(before) | set(after) == set(range(SAMPLES)), "a sample skipped"
    # 26 samples left: 13 per rank of 2; 4 per rank of 8, of which 6 repeat as padding.
    per_rank = -(-(SAMPLES - 24) // world)
    assert all(len(r) == per_rank for r in run[f"after{world}"][:world])
    repeats = sum(n - 1 for n in Counter(after).values())
    assert repeats == per_rank * world - (SAMPLES - 24)


@pytest.mark.parametrize("world", [2, 8])
def test_without_padding_every_sample_exactly_once(result, world):
    run = result["exact"]
    every = [i for rank in run["before"] + run[f"after{world}"] for i in rank]
    assert sorted(every) == list(range(SAMPLES))
    counts = [len(r) for r in run[f"after{world}"][:world]]
    assert max(counts) - min(counts) <= 1

