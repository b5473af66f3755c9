"""bucketload on a local Ray cluster (`ray.init(num_cpus=2)`) against the embedded server:
a Ray Train run with 2 workers reads disjoint, equal partitions; a Ray Data pipeline over a
shard dataset yields every sample once per epoch, decoded; sharding fanned out over Ray tasks
gives the same samples as the single-process tool, and `bucketload verify` passes."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import ray

import bucketload.ray as blr

from test_cli_dataset import ok

SAMPLES = 40


def start_ray(**options):
    """ray.init, tried up to three times: on a loaded two-core machine the raylet can miss
    Ray's fixed 30 s registration deadline ("timed out during startup")."""
    for attempt in range(3):
        try:
            ray.init(**options)
            return
        except Exception as e:
            if "timed out during startup" not in str(e) or attempt == 2:
                raise
            ray.shutdown()


@pytest.fixture(scope="module")
def cluster(server):
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
    start_ray(num_cpus=2, include_dashboard=False, log_to_driver=False,
              runtime_env={"env_vars": {k: v for k, v in server.env().items() if k.startswith("AWS_")}})
    yield server.env()
    ray.shutdown()
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def files(bucketload_bin, cluster, s3):
    s3.create_bucket(Bucket="ray-data")
    ok(bucketload_bin, cluster, "gen", "s3://ray-data/train", "--samples", str(SAMPLES),
       "--classes", "4", "--size", "5KB", "--seed", "8")
    return "s3://ray-data/train"


def test_ray_data_over_shards_yields_every_sample_once_decoded(bucketload_bin, cluster, files, s3):
    ok(bucketload_bin, cluster, "shard", files, "s3://ray-data/shards", "--samples-per-shard", "7")
    ds = blr.read_dataset("s3://ray-data/shards", format="shards", override_num_blocks=3)
    ds = ds.map_batches(blr.decode_batch, fn_kwargs={"image_size": 24, "seed": 1},
                        batch_format="numpy", batch_size=8)
    seen = collections.Counter()
    labels = {}
    for batch in ds.iter_batches(batch_size=16, batch_format="numpy"):
        assert batch["image"].dtype == np.float32 and batch["image"].shape[1:] == (3, 24, 24)
        for index, label in zip(batch["index"].tolist(), batch["label"].tolist()):
            seen[index] += 1
            labels[index] = label
    assert len(seen) == SAMPLES and set(seen.values()) == {1}
    # Shard samples are numbered shard << 32 | sample: 6 shards of 7 (the last has 5).
    assert {i >> 32 for i in seen} == set(range(6))
    assert set(labels.values()) == {0, 1, 2, 3}
    raw = blr.read_dataset(files, format="files").take_all()
    assert sorted(r["index"] for r in raw) == list(range(SAMPLES))
    first = min(raw, key=lambda r: r["index"])
    key = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="ray-data", Prefix="train/")["Contents"])[0]
    assert first["key"] == key[len("train/"):]
    assert first["image"] == s3.get_object(Bucket="ray-data", Key=key)["Body"].read()


def test_distributed_sharding_matches_the_single_process_tool(bucketload_bin, cluster, files):
    report = blr.shard(files, "s3://ray-data/fanned", parts=3, samples_per_shard=6)
    assert sorted(p["written"] for p in report["parts"]) == [2, 2, 3]
    assert report["merge"]["samples"] == SAMPLES and report["merge"]["shards"] == 7
    ok(bucketload_bin, cluster, "shard", files, "s3://ray-data/single", "--samples-per-shard", "6")
    ok(bucketload_bin, cluster, "verify", "s3://ray-data/fanned")

    def samples(uri):
        out = ok(bucketload_bin, cluster, "read", uri, "--format", "shards", "--epochs", "1",
                 "--no-shuffle", "--json")
        return json.loads(out)["samples_per_epoch"]

    assert samples("s3://ray-data/fanned") == samples("s3://ray-data/single") == SAMPLES
    fanned = ok(bucketload_bin, cluster, "ls", "s3://ray-data/fanned", "--samples")
    single = ok(bucketload_bin, cluster, "ls", "s3://ray-data/single", "--samples")
    assert sorted(fanned.split()) == sorted(single.split())


def test_train_workers_read_equal_disjoint_parts(files, tmp_path):
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    def loop(config):
        import bucketload
        import ray.train

        rank = ray.train.get_context().get_world_rank()
        data = bucketload.Loader(config["uri"], batch_size=4, image_size=16, seed=3,
                                 return_indices=True)
        seen = [int(i) for _, _, idx in data for i in idx]
        with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
            json.dump(seen, f)

    trainer = TorchTrainer(
        loop, train_loop_config={"uri": files, "out": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
    )
    trainer.fit()
    parts = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == SAMPLES // 2
    assert sorted(parts[0] + parts[1]) == list(range(SAMPLES))


def test_the_benchmark_example_runs_as_a_train_job(cluster, files, s3, tmp_path):
    s3.create_bucket(Bucket="ray-example")
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ray_train_benchmark.py")
    address = ray.get_runtime_context().gcs_address
    out = subprocess.run(
        [sys.executable, example, "--address", address, "--uri", files, "--workers", "2",
         "--cpus-per-worker", "0.5", "--epochs", "2", "--batch-size", "4", "--image-size", "16",
         "--compute-ms", "1", "--ckpt-steps", "2", "--ckpt-uri", "s3://ray-example/ckpt",
         "--ckpt-size-mb", "1", "--log-dir", str(tmp_path), "--name", "ray-example"],
        capture_output=True, text=True, timeout=600, env={**os.environ, **cluster})
    assert out.returncode == 0, out.stderr[-4000:]
    log = json.loads((tmp_path / "ray-example.json").read_text())
    assert log["samples_processed_total"] == 2 * SAMPLES
    # Each worker reads half of every epoch: 2 epochs of SAMPLES / 2.
    assert [w["samples"] for w in log["per_worker"]] == [2 * (SAMPLES // 2)] * 2
    assert log["samples_per_second"] > 0 and 0 < log["accelerator_utilization"] <= 1
    assert {"t_epoch_1", "t_epoch_2", "t_ckpt_1", "t_ckpt_ave"} <= log.keys()
    # Rank 0 saves every 2 of its 10 steps.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ray-example")["Contents"]]
    assert keys == [f"ckpt/step-{s:06d}.pt" for s in (2, 4, 6, 8, 10)]
