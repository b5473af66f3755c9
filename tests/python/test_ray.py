"""bucketload on a local Ray cluster (`ray.init(num_cpus=2)`) against the embedded server:
a Ray Train run with 2 workers reads disjoint, equal partitions; a Ray Data pipeline over a
shard dataset yields every sample once per epoch, decoded; sharding fanned out over Ray tasks
gives the same samples as the single-process tool, and `bucketload verify` passes."""

from __future__ import annotations

import collections
import glob
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import ray

import bucketload
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


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_read_images_decodes_in_the_read_tasks_the_crops_decode_batch_makes(cluster, files, dtype):
    # Two paths to the same pixels: decoding inside the read tasks, and the encoded bytes
    # decoded by a map stage. The crop of each image depends on (seed, epoch, index) only.
    decoded = blr.read_images(files, format="files", image_size=24, seed=5, epoch=2, dtype=dtype,
                              shuffle=True, override_num_blocks=3).take_all()
    mapped = blr.read_dataset(files, format="files", seed=5, epoch=2, shuffle=True).map_batches(
        blr.decode_batch, fn_kwargs={"image_size": 24, "seed": 5, "epoch": 2, "dtype": dtype},
        batch_format="numpy", batch_size=8).take_all()
    assert sorted(r["index"] for r in decoded) == list(range(SAMPLES))
    by_index = {r["index"]: r for r in mapped}
    shape = (3, 24, 24) if dtype == "float32" else (24, 24, 3)
    for row in decoded:
        assert row["image"].dtype == np.dtype(dtype) and row["image"].shape == shape
        assert row["label"] == by_index[row["index"]]["label"] != -1
        np.testing.assert_array_equal(row["image"], by_index[row["index"]]["image"])
    # Another epoch crops differently.
    other = {r["index"]: r["image"] for r in blr.read_images(
        files, format="files", image_size=24, seed=5, epoch=3, dtype=dtype).take_all()}
    assert sum(not np.array_equal(other[i], by_index[i]["image"]) for i in other) > SAMPLES // 2


def test_each_execution_of_a_dataset_reads_the_next_epoch(cluster, files):
    # A Train run executes its dataset once per epoch; each execution must bring that epoch's
    # order and crops, not epoch 0's again.
    def rows(ds):
        return [(r["index"], r["image"]) for r in ds.take_all()]

    ds = blr.read_images(files, format="files", image_size=16, seed=2, shuffle=True,
                         override_num_blocks=1)
    first, second = rows(ds), rows(ds)
    fresh = rows(blr.read_images(files, format="files", image_size=16, seed=2, shuffle=True,
                                 epoch=1, override_num_blocks=1))
    assert [i for i, _ in first] != [i for i, _ in second]
    assert [i for i, _ in second] == [i for i, _ in fresh]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(second, fresh, strict=True))
    raw = blr.read_dataset(files, format="files", shuffle=True, seed=2, override_num_blocks=1)
    assert [r["index"] for r in raw.take_all()] == [i for i, _ in first]
    assert [r["index"] for r in raw.take_all()] == [i for i, _ in second]


def test_a_read_task_yields_whole_blocks_not_slivers(cluster, files):
    # Left to itself, Ray cut the one read task's output into as many blocks as the
    # parallelism it asked for, and every later stage paid its per-block work on slivers.
    raw = blr.read_dataset(files, format="files").materialize()
    assert raw.num_blocks() == 1 and raw.count() == SAMPLES
    decoded = blr.read_images(files, format="files", image_size=16).materialize()
    assert decoded.num_blocks() == 1 and decoded.count() == SAMPLES
    # Asked for tasks, it makes as many, one block each.
    assert blr.read_dataset(files, format="files", override_num_blocks=4).materialize().num_blocks() == 4


def test_read_images_names_a_corrupt_image_and_counts_what_it_skips(bucketload_bin, cluster, s3):
    s3.create_bucket(Bucket="ray-corrupt")
    ok(bucketload_bin, cluster, "gen", "s3://ray-corrupt/train", "--samples", "6",
       "--classes", "2", "--size", "5KB", "--seed", "4")
    s3.put_object(Bucket="ray-corrupt", Key="train/class_001/broken.jpg", Body=b"\xff\xd8 not a jpeg")
    with pytest.raises(bucketload.CorruptDataError, match="broken.jpg"):
        blr.read_images("s3://ray-corrupt/train", format="files", image_size=16).take_all()
    skipping = blr.read_images("s3://ray-corrupt/train", format="files", image_size=16,
                               skip_corrupt=True)
    # Ray's count is the rows there are, not the images listed.
    assert skipping.count() == 6
    rows = skipping.take_all()
    assert len(rows) == 6
    # The worker that left it out says so in its log (Ray shows it on the driver).
    logs = ray._private.worker.global_worker.node.get_logs_dir_path()
    said = [line for path in glob.glob(os.path.join(logs, "worker-*"))
            for line in pathlib.Path(path).read_text(errors="replace").splitlines()
            if "skipped 1 corrupt image" in line]
    assert said and "broken.jpg" in said[0], said


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


@pytest.mark.parametrize("source", ["loader", "ray-data"])
def test_the_benchmark_example_runs_as_a_train_job(cluster, files, s3, tmp_path, source):
    bucket = f"ray-example-{source}"
    s3.create_bucket(Bucket=bucket)
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ray_train_benchmark.py")
    address = ray.get_runtime_context().gcs_address
    out = subprocess.run(
        [sys.executable, example, "--address", address, "--uri", files, "--workers", "2",
         "--cpus-per-worker", "0.5", "--epochs", "2", "--batch-size", "4", "--image-size", "16",
         "--compute-ms", "1", "--ckpt-steps", "2",
         "--ckpt-uri", f"s3://{bucket}/ckpt", "--ckpt-size-mb", "1", "--input", source,
         "--log-dir", str(tmp_path), "--name", "ray-example"],
        capture_output=True, text=True, timeout=600, env={**os.environ, **cluster})
    assert out.returncode == 0, out.stderr[-4000:]
    log = json.loads((tmp_path / "ray-example.json").read_text())
    assert log["samples_processed_total"] == 2 * SAMPLES
    # Each worker reads half of every epoch: 2 epochs of SAMPLES / 2.
    assert [w["samples"] for w in log["per_worker"]] == [2 * (SAMPLES // 2)] * 2
    assert log["samples_per_second"] > 0 and 0 < log["accelerator_utilization"] <= 1
    assert {"t_epoch_1", "t_epoch_2", "t_ckpt_1", "t_ckpt_ave"} <= log.keys()
    # Rank 0 saves every 2 of its 10 steps.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == [f"ckpt/step-{s:06d}.pt" for s in (2, 4, 6, 8, 10)]
