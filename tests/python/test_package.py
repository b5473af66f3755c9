"""The Python package (`import bucketload`) against the embedded server, checked with boto3:
the Loader's batches (every sample once, labels right, equal disjoint ranks, resume
mid-epoch), DataLoader workers under fork and spawn, the drop-in connector classes used as the
connector's documentation shows, checkpoints, and errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import DataLoader

import bucketload
from bucketload import checkpoint
from bucketload.s3torch import S3Checkpoint, S3IterableDataset, S3MapDataset

from test_cli_dataset import moto, ok  # noqa: F401  (moto is a fixture)

SAMPLES, CLASSES = 40, 4


@pytest.fixture(scope="module")
def env(server):
    """The AWS environment of the server, for this process and its DataLoader workers."""
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
    yield server.env()
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def dataset(bucketload_bin, env, s3):
    """40 JPEGs in 4 class folders, and what boto3 sees: sorted keys, bytes, labels."""
    bucket = "pkg-data"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/train", "--samples", str(SAMPLES), "--classes",
       str(CLASSES), "--size", "6KB", "--seed", "3")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="train/")["Contents"])
    classes = sorted({k.split("/")[1] for k in keys})
    labels = [classes.index(k.split("/")[1]) for k in keys]
    return f"s3://{bucket}/train", bucket, keys, labels


def collect(batches):
    """indices and labels of every image of `(images, labels, indices)` batches."""
    indices, labels = [], []
    for images, batch_labels, batch_indices in batches:
        assert images.dtype == torch.float32 and images.shape[1:] == (3, 32, 32)
        assert len(batch_labels) == len(batch_indices) == images.shape[0]
        indices += batch_indices.tolist()
        labels += batch_labels.tolist()
    return indices, labels


def loader(uri, **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("image_size", 32)
    return bucketload.Loader(uri, return_indices=True, **kw)


def test_loader_yields_every_sample_once_with_its_label(dataset):
    uri, _, keys, labels = dataset
    data = loader(uri, seed=1)
    assert len(data) == SAMPLES // 8
    first, first_labels = collect(data)
    assert sorted(first) == list(range(SAMPLES))
    assert first_labels == [labels[i] for i in first]
    images, _, _ = next(iter(loader(uri, seed=1)))
    # Normalised with ImageNet's statistics: roughly zero-centred, not 0..255.
    assert -3 < images.mean().item() < 3 and images.abs().max().item() < 3
    second, _ = collect(data)  # the next epoch: a new order, the same samples
    assert sorted(second) == list(range(SAMPLES)) and second != first


def test_uint8_batches_are_nchw_channels_last(dataset):
    images, labels = next(iter(bucketload.Loader(dataset[0], batch_size=4, image_size=16, dtype="uint8")))
    assert images.dtype == torch.uint8 and images.shape == (4, 3, 16, 16)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_batches_let_go_are_written_again_and_batches_kept_never(dataset, dtype):
    def epoch(**kw):
        return bucketload.Loader(dataset[0], batch_size=2, image_size=16, seed=5, dtype=dtype, **kw)

    # A loop that lets each batch go: its buffer comes back, and the pipeline makes only the
    # few that are in flight at once (filled ahead, waiting, being used).
    data = epoch()
    assert data.decode_stats() is None  # nothing read yet in this process
    copies = [images.clone() for images, _ in data]
    stats = data.decode_stats()
    assert stats["images"] == SAMPLES and len(copies) == SAMPLES // 2
    assert stats["buffers_allocated"] <= 6, stats
    # A loop that keeps every batch: one buffer each, and none written over while kept.
    data = epoch()
    kept = [images for images, _ in data]
    assert data.decode_stats()["buffers_allocated"] == len(kept)
    assert all(torch.equal(a, b) for a, b in zip(kept, copies, strict=True))
    # Freed in a forked child: its copy is freed as plain memory (the pipeline's lock is the
    # parent's business), and the child exits cleanly.
    pid = os.fork()
    if pid == 0:
        kept.clear()
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    # Freed after the loader is gone: nothing to go back to, nothing fails.
    del data
    kept.clear()


def test_jpeg_decode_modes_region_whole_and_scaled(dataset):
    def batches(mode):
        data = bucketload.Loader(dataset[0], batch_size=8, image_size=24, seed=4, shuffle=False,
                                 dtype="uint8", jpeg_decode=mode)
        return [images.clone() for images, _ in data]

    region, whole, scaled = batches("region"), batches("whole"), batches("region-scaled")
    # Decoding only the crop box gives exactly the pixels of a whole decode.
    assert all(torch.equal(a, b) for a, b in zip(region, whole, strict=True))
    # DCT scaling (the boxes of these ~60-pixel images often span twice 24 pixels) filters
    # differently: close, not equal.
    diffs = [(a.float() - b.float()).abs().mean().item() for a, b in zip(region, scaled, strict=True)]
    assert 0 < max(diffs) < 12
    with pytest.raises(bucketload.ConfigError, match="jpeg_decode"):
        next(iter(bucketload.Loader(dataset[0], jpeg_decode="fast")))


def test_ranks_are_equal_and_disjoint(dataset):
    uri = dataset[0]
    parts = [collect(loader(uri, rank=r, world_size=3, seed=5))[0] for r in range(3)]
    assert [len(p) for p in parts] == [14, 14, 14]  # 40 padded to 42 so no rank waits
    every = parts[0] + parts[1] + parts[2]
    assert set(every) == set(range(SAMPLES)) and len(every) - len(set(every)) == 2
    trimmed = [collect(loader(uri, rank=r, world_size=3, seed=5, drop_last=True))[0] for r in range(3)]
    assert [len(p) for p in trimmed] == [8, 8, 8]  # 13 each, the short batch dropped
    assert len(set(sum(trimmed, []))) == 24


def test_pad_false_reads_every_sample_exactly_once(bucketload_bin, env, s3):
    """Evaluation: 3 ranks over 10 samples in dataset order, no padding: 4, 3 and 3 samples."""
    bucket = "pkg-eval"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/val", "--samples", "10", "--classes", "2",
       "--size", "2KB")
    uri = f"s3://{bucket}/val"
    ranks = [loader(uri, rank=r, world_size=3, shuffle=False, pad=False, batch_size=3)
             for r in range(3)]
    assert [len(r) for r in ranks] == [2, 1, 1]  # each rank's own batches
    parts = [collect(r)[0] for r in ranks]
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert sorted(i for part in parts for i in part) == list(range(10))
    padded = [collect(loader(uri, rank=r, world_size=3, shuffle=False, batch_size=3))[0]
              for r in range(3)]
    assert [len(p) for p in padded] == [4, 4, 4]  # the default repeats two
    with pytest.raises(bucketload.ConfigError, match="pad=False"):
        loader(uri, pad=False, drop_last=True)


def test_resume_mid_epoch_neither_repeats_nor_skips(dataset):
    uri = dataset[0]
    data = loader(uri, seed=9)
    it = iter(data)
    seen = []
    for _ in range(2):
        seen += next(it)[2].tolist()
    state = json.loads(json.dumps(data.state_dict()))  # survives a JSON round trip
    del it
    again = loader(uri, seed=9)
    again.load_state_dict(state)
    rest, _ = collect(again)
    assert len(seen) == 16 and len(rest) == SAMPLES - 16
    assert sorted(seen + rest) == list(range(SAMPLES))
    whole, _ = collect(loader(uri, seed=9))
    assert seen + rest == whole  # the same order as an uninterrupted epoch


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_workers_read_disjoint_parts(dataset, context, workers):
    uri = dataset[0]
    data = loader(uri, seed=2)
    len(data)  # the parent opens the loader (runtime, connections) before forking
    kw = dict(multiprocessing_context=context) if workers else {}
    indices, _ = collect(DataLoader(data, batch_size=None, num_workers=workers, **kw))
    assert sorted(indices) == list(range(SAMPLES))


def test_distributed_gloo_ranks_get_equal_disjoint_parts(dataset, tmp_path):
    uri = dataset[0]
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, sys
        import torch.distributed as dist
        import bucketload
        dist.init_process_group("gloo")
        data = bucketload.Loader({uri!r}, batch_size=8, image_size=32, seed=4, return_indices=True)
        seen = [int(i) for _, _, idx in data for i in idx]
        with open(os.path.join({str(tmp_path)!r}, f"rank{{dist.get_rank()}}.json"), "w") as f:
            json.dump(seen, f)
        dist.destroy_process_group()
    """))
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(29500 + os.getpid() % 1000))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env))
    for p in procs:
        assert p.wait(timeout=120) == 0
    parts = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == SAMPLES // 2
    assert sorted(parts[0] + parts[1]) == list(range(SAMPLES))


def test_a_corrupt_image_is_named_or_skipped_and_counted(bucketload_bin, env, s3):
    bucket = "pkg-corrupt"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/d", "--samples", "6", "--classes", "1",
       "--size", "4KB")
    s3.put_object(Bucket=bucket, Key="d/class_000/zz-broken.jpg", Body=b"\xff\xd8\xff\xe0 not a jpeg")
    with pytest.raises(bucketload.CorruptDataError, match="zz-broken.jpg"):
        for _ in bucketload.Loader(f"s3://{bucket}/d", batch_size=4, image_size=16):
            pass
    data = bucketload.Loader(f"s3://{bucket}/d", batch_size=4, image_size=16, skip_corrupt=True)
    images = sum(len(labels) for _, labels in data)
    assert images == 6
    assert [k for k, _ in data.skipped] == ["class_000/zz-broken.jpg"]


def test_missing_dataset_is_file_not_found(env):
    with pytest.raises(FileNotFoundError):
        bucketload.Loader("s3://pkg-no-such-bucket/train", batch_size=4).__len__()
    with pytest.raises(bucketload.ConfigError):
        bucketload.Loader("s3://pkg-data/train", format="parquet").__len__()


def test_s3_map_dataset_as_the_connector_documents(dataset, env, s3):
    uri, bucket, keys, _ = dataset
    endpoint = env["AWS_ENDPOINT_URL"]
    ds = S3MapDataset.from_prefix(uri, region="us-east-1", endpoint=endpoint)
    assert len(ds) == SAMPLES
    item = ds[0]
    assert (item.bucket, item.key) == (bucket, keys[0])
    assert item.read() == s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
    sized = S3MapDataset.from_prefix(uri, region="us-east-1", endpoint=endpoint,
                                     transform=lambda r: (r.key, len(r.read())))
    got = list(DataLoader(sized, batch_size=None, num_workers=2, multiprocessing_context="fork"))
    assert [k for k, _ in got] == keys
    part = S3MapDataset.from_objects([f"s3://{bucket}/{keys[3]}"], region="us-east-1", endpoint=endpoint)
    assert part[0].key == keys[3]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_s3_iterable_dataset_shards_across_workers(dataset, env, s3, context):
    uri, bucket, keys, _ = dataset
    ds = S3IterableDataset.from_prefix(uri, region="us-east-1", endpoint=env["AWS_ENDPOINT_URL"],
                                       enable_sharding=True, transform=_key_and_size)
    got = list(DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context))
    assert sorted(k for k, _ in got) == keys
    size = s3.head_object(Bucket=bucket, Key=keys[5])["ContentLength"]
    assert dict(got)[keys[5]] == size


def _key_and_size(reader):
    return reader.key, len(reader.read())


def model_state():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).state_dict()


def same_state(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_s3_checkpoint_as_the_connector_documents(env, s3):
    s3.create_bucket(Bucket="pkg-ckpt")
    ckpt = S3Checkpoint(region="us-east-1", endpoint=env["AWS_ENDPOINT_URL"])
    state = model_state()
    with ckpt.writer("s3://pkg-ckpt/run/epoch0.ckpt") as writer:
        torch.save(state, writer)
    body = s3.get_object(Bucket="pkg-ckpt", Key="run/epoch0.ckpt")["Body"].read()
    assert same_state(torch.load(io.BytesIO(body)), state)
    with ckpt.reader("s3://pkg-ckpt/run/epoch0.ckpt") as reader:
        assert same_state(torch.load(reader), state)
    # An exception inside the block abandons the save: nothing new becomes visible.
    with pytest.raises(RuntimeError, match="stop"):
        with ckpt.writer("s3://pkg-ckpt/run/epoch0.ckpt") as writer:
            writer.write(b"half a checkpoint")
            raise RuntimeError("stop")
    assert s3.get_object(Bucket="pkg-ckpt", Key="run/epoch0.ckpt")["Body"].read() == body
    assert s3.list_multipart_uploads(Bucket="pkg-ckpt").get("Uploads", []) == []


def test_checkpoint_save_load_and_background(env, s3, tmp_path):
    s3.create_bucket(Bucket="pkg-save")
    state = model_state()
    saved = checkpoint.save(state, "s3://pkg-save/run/step-1.pt")
    assert saved["bytes"] > 0
    assert same_state(checkpoint.load("s3://pkg-save/run/step-1.pt"), state)
    handle = checkpoint.save({"step": 2, "model": state}, "s3://pkg-save/run/step-2.pt", background=True)
    info = handle.wait()
    assert handle.done() and info["uri"].endswith("run/step-2.pt")
    loaded = torch.load(io.BytesIO(s3.get_object(Bucket="pkg-save", Key="run/step-2.pt")["Body"].read()))
    assert loaded["step"] == 2 and same_state(loaded["model"], state)
    local = tmp_path / "ckpt" / "local.pt"
    local.parent.mkdir()
    checkpoint.save(state, str(local))
    assert same_state(torch.load(local), state)
    with pytest.raises(FileNotFoundError):
        checkpoint.load("s3://pkg-save/run/missing.pt")


def test_s3_checkpoint_on_moto(moto):
    endpoint, env = moto
    from conftest import make_client
    client = make_client(endpoint, key="moto", secret="moto")
    client.create_bucket(Bucket="pkg-moto")
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    try:
        ckpt = S3Checkpoint(region="us-east-1", endpoint=endpoint)
        state = model_state()
        with ckpt.writer("s3://pkg-moto/ckpt.pt") as writer:
            torch.save(state, writer)
        body = client.get_object(Bucket="pkg-moto", Key="ckpt.pt")["Body"].read()
        assert same_state(torch.load(io.BytesIO(body)), state)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_the_workshop_benchmark_example_runs_and_logs(dataset, env, s3, tmp_path):
    s3.create_bucket(Bucket="pkg-example")
    out = subprocess.run(
        [sys.executable, str(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "benchmark.py")),
         "--uri", dataset[0], "--format", "files", "--epochs", "2", "--batch-size", "8",
         "--image-size", "32", "--compute-ms", "1", "--ckpt-steps", "4", "--ckpt-uri",
         "s3://pkg-example/ckpt", "--ckpt-size-mb", "1", "--async-ckpt", "--log-dir", str(tmp_path),
         "--name", "example"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    log = json.loads((tmp_path / "example.json").read_text())
    assert log["samples_processed_total"] == 2 * SAMPLES
    assert log["samples_per_second"] > 0 and 0 < log["accelerator_utilization"] <= 1
    assert {"t_epoch_1", "t_epoch_2", "t_ckpt_1", "t_ckpt_2", "t_ckpt_ave"} <= log.keys()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="pkg-example")["Contents"]]
    assert keys == ["ckpt/step-000004.pt", "ckpt/step-000008.pt"]
    assert torch.load(io.BytesIO(s3.get_object(Bucket="pkg-example", Key=keys[0])["Body"].read()))["w"].numel() == (1 << 20) // 4


def test_distributed_checkpoint_storage_without_rename(env, s3):
    import torch.distributed.checkpoint as dcp
    from bucketload.dcp import S3StorageReader, S3StorageWriter

    s3.create_bucket(Bucket="pkg-dcp")
    state = {"model": model_state(), "step": torch.tensor(7)}
    uri = "s3://pkg-dcp/run/step-7"
    dcp.save(state, storage_writer=S3StorageWriter(uri, endpoint=env["AWS_ENDPOINT_URL"]))
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="pkg-dcp")["Contents"])
    assert "run/step-7/.metadata" in keys and not any(k.endswith(".tmp") for k in keys), keys
    target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}, "step": torch.tensor(0)}
    dcp.load(target, storage_reader=S3StorageReader(uri, endpoint=env["AWS_ENDPOINT_URL"]))
    assert same_state(target["model"], state["model"]) and target["step"].item() == 7
    from torch.distributed.checkpoint.api import CheckpointException
    # DCP wraps each rank's error; bucketload's names the missing object.
    with pytest.raises(CheckpointException, match="run/none/.metadata: object not found"):
        dcp.load(target, storage_reader=S3StorageReader("s3://pkg-dcp/run/none",
                                                        endpoint=env["AWS_ENDPOINT_URL"]))
