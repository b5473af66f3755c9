"""examples/train.py, run as users run it: one process, then `torchrun` with two processes
resuming the one-process checkpoint mid-epoch. The validation loop must count every
validation image exactly once (an odd count over two ranks), whatever the number of ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_dataset import ok

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train.py"
TRAIN, VAL = 48, 21  # VAL odd: two ranks cannot split it evenly


@pytest.fixture(scope="module")
def env(server):
    return {**os.environ, **server.env()}


@pytest.fixture(scope="module")
def sets(bucketload_bin, env, s3):
    s3.create_bucket(Bucket="ex-train")
    ok(bucketload_bin, env, "gen", "s3://ex-train/train", "--samples", str(TRAIN), "--classes",
       "4", "--size", "4KB", "--seed", "1")
    ok(bucketload_bin, env, "gen", "s3://ex-train/val", "--samples", str(VAL), "--classes", "4",
       "--size", "4KB", "--seed", "2")
    return "s3://ex-train/train", "s3://ex-train/val"


def train(env, sets, log: Path, *args: str, procs: int = 1) -> list[dict]:
    launcher = [sys.executable]
    if procs > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={procs}"]
    out = subprocess.run(
        [*launcher, str(EXAMPLE), "--train", sets[0], "--val", sets[1], "--batch-size", "8",
         "--image-size", "32", "--num-classes", "4", "--metrics", str(log), *args],
        check=False, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
        timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_train_validates_every_image_once_and_resumes_on_more_processes(env, sets, s3, tmp_path):
    log = tmp_path / "log.jsonl"
    # One process: 3 of the 6 steps of epoch 0, then a checkpoint and stop.
    assert train(env, sets, log, "--epochs", "2", "--ckpt-uri", "s3://ex-train/ckpt",
                 "--max-steps", "3") == []
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="ex-train", Prefix="ckpt/")["Contents"]] \
        == ["ckpt/latest.pt"]
    # Two processes continue epoch 0 from the checkpoint, then run epoch 1.
    epochs = train(env, sets, log, "--epochs", "2", "--ckpt-uri", "s3://ex-train/ckpt",
                   "--resume", procs=2)
    assert [e["epoch"] for e in epochs] == [0, 1]
    # Epoch 0's remaining 24 samples over 2 ranks: 12 each, one batch of 8 each (drop_last);
    # epoch 1: 48 over 2 ranks, 3 batches of 8 each.
    assert [e["train_images"] for e in epochs] == [8, 24]
    assert [e["step"] for e in epochs] == [4, 7]
    for e in epochs:
        assert e["val_images"] == VAL, e
        assert 0.0 <= e["val_accuracy"] <= 1.0
