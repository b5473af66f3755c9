"""Raw samples through ``bucketload.Loader(decode=False)``, against a real `bucketload serve`:
WebDataset shards (image, text and ``.npy`` members) built here with ``tarfile`` and checked
byte for byte, full batches, resume, ``transform``/``collate_fn`` in DataLoader workers
(fork and spawn), a one-object-per-sample dataset, and examples/any_data.py."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import urllib.request

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import bucketload
from bucketload.errors import ConfigError

from conftest import REPO
from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

SHARDS, PER_SHARD = 3, 10
SAMPLES = SHARDS * PER_SHARD


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _sample(n: int) -> dict[str, bytes]:
    image = Image.new("RGB", (24 + n, 16), (n * 7 % 256, 90, 200 - n))
    jpg = io.BytesIO()
    image.save(jpg, "JPEG")
    npy = io.BytesIO()
    np.save(npy, np.arange(4, dtype=np.float32) + n)
    return {"jpg": jpg.getvalue(), "txt": f"caption {n}".encode(), "npy": npy.getvalue(),
            "cls": str(n % 3).encode()}


@pytest.fixture(scope="module")
def shards(env, s3):  # noqa: F811
    """Tar shards uploaded with boto3: their URI, and each sample's members by key."""
    bucket = "any-data"
    s3.create_bucket(Bucket=bucket)
    expected: dict[str, dict[str, bytes]] = {}
    for shard in range(SHARDS):
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for i in range(PER_SHARD):
                n = shard * PER_SHARD + i
                key = f"sample{n:04d}"
                expected[key] = _sample(n)
                for ext, member in expected[key].items():
                    _member(tar, f"{key}.{ext}", member)
        s3.put_object(Bucket=bucket, Key=f"pairs/shard-{shard:03d}.tar", Body=data.getvalue())
    return f"s3://{bucket}/pairs", expected


def _keys(batches) -> list[str]:
    return [s["__key__"] for batch in batches for s in batch]


def test_each_sample_once_with_its_members_byte_identical(shards):
    uri, expected = shards
    loader = bucketload.Loader(uri, decode=False, batch_size=7, seed=2)
    batches = list(loader)
    assert [len(b) for b in batches] == [7, 7, 7, 7, 2]
    assert len(loader) == 5
    samples = [s for b in batches for s in b]
    assert sorted(s["__key__"] for s in samples) == sorted(expected)
    assert len({s["__index__"] for s in samples}) == SAMPLES
    for s in samples:
        members = expected[s["__key__"]]
        assert set(s) == {"__key__", "__index__", "__label__", *members}
        assert {ext: bytes(s[ext]) for ext in members} == members
        assert s["__label__"] == int(members["cls"])
        assert memoryview(s["jpg"]).readonly  # the loader's memory, not a copy
    # Shuffled from the seed: the same order again, another one for the next epoch.
    assert _keys(batches) == _keys(bucketload.Loader(uri, decode=False, batch_size=7, seed=2))
    assert _keys(loader) != _keys(batches)


def test_drop_last_leaves_out_the_short_batch(shards):
    uri, _ = shards
    loader = bucketload.Loader(uri, decode=False, batch_size=7, drop_last=True)
    assert [len(b) for b in loader] == [7, 7, 7, 7]
    assert len(loader) == 4


def test_state_dict_resumes_mid_epoch(shards):
    uri, _ = shards
    whole = _keys(bucketload.Loader(uri, decode=False, batch_size=4, seed=5))
    loader = bucketload.Loader(uri, decode=False, batch_size=4, seed=5)
    it = iter(loader)
    seen = _keys([next(it), next(it), next(it)])
    state = loader.state_dict()
    del it
    again = bucketload.Loader(uri, decode=False, batch_size=4, seed=5)
    again.load_state_dict(state)
    assert seen + _keys(again) == whole  # nothing repeated, nothing skipped


def test_stateful_dataloader_resumes_raw_samples_through_workers(shards):
    def loader():
        return StatefulDataLoader(
            bucketload.Loader(uri, decode=False, batch_size=4, seed=6, transform=decoded),
            batch_size=None, num_workers=2)

    uri, _ = shards
    whole = [s[0] for b in loader() for s in b]
    assert sorted(whole) == sorted(shards[1])
    first = loader()
    it = iter(first)
    seen = [s[0] for _ in range(3) for s in next(it)]
    state = first.state_dict()
    del it, first
    again = loader()
    again.load_state_dict(state)
    assert seen + [s[0] for b in again for s in b] == whole


def test_ranks_share_the_samples(shards):
    uri, expected = shards
    parts = [_keys(bucketload.Loader(uri, decode=False, batch_size=4, rank=r, world_size=2,
                                     pad=False)) for r in range(2)]
    assert sorted(parts[0] + parts[1]) == sorted(expected)


def test_a_mixture_of_raw_datasets_says_where_each_sample_is_from(shards, bucketload_bin, env, s3):  # noqa: F811
    uri, expected = shards
    s3.create_bucket(Bucket="any-mix")
    ok(bucketload_bin, env, "gen", "s3://any-mix/d", "--samples", "10", "--classes", "2",
       "--size", "1KB", "--seed", "3")
    loader = bucketload.Loader([uri, "s3://any-mix/d"], weights=[0.5, 0.5], decode=False,
                               samples_per_epoch=256, batch_size=32, seed=1)
    samples = [s for b in loader for s in b]
    assert len(samples) == 256
    dataset = [s["__index__"] >> 56 for s in samples]
    assert dataset.count(0) == dataset.count(1) == 128
    for s, d in zip(samples, dataset):
        assert ("txt" in s) == (d == 0)
        if d == 0:
            assert bytes(s["npy"]) == expected[s["__key__"]]["npy"]


@pytest.mark.parametrize(("dtype", "augment"),
                         [("float32", "train"), ("uint8", "train"), ("float32", "eval")])
def test_decode_members_gives_the_image_modes_pixels_next_to_the_raw_members(shards, dtype,
                                                                            augment):
    uri, expected = shards
    settings = {"image_size": 16, "batch_size": 8, "seed": 3, "dtype": dtype,
                "augment": augment}
    pixels = {}
    for images, _, indices in bucketload.Loader(uri, return_indices=True, **settings):
        pixels.update(zip(indices.tolist(), images))
    batches = list(bucketload.Loader(uri, decode=False, decode_members=["jpg"], **settings))
    assert [len(b["__key__"]) for b in batches] == [8, 8, 8, 6]
    for batch in batches:
        images = batch["jpg"]
        assert images.dtype == getattr(torch, dtype)
        assert images.shape[1:] == (3, 16, 16)
        assert set(batch) == {"__key__", "__index__", "__label__", "jpg", "txt", "npy", "cls"}
        for key, index, image, text in zip(batch["__key__"], batch["__index__"], images,
                                           batch["txt"], strict=True):
            assert torch.equal(image, pixels[index])
            assert bytes(text) == expected[key]["txt"]
    assert sum(len(b["__key__"]) for b in batches) == len(pixels) == SAMPLES


def shape_and_text(sample: dict) -> tuple[tuple[int, ...], str]:
    return tuple(sample["jpg"].shape), bytes(sample["txt"]).decode()


def test_decode_members_reach_the_transform_as_tensors(shards):
    uri, _ = shards
    loader = bucketload.Loader(uri, decode=False, decode_members=("jpg",), image_size=16,
                               batch_size=8, transform=shape_and_text)
    got = [item for b in DataLoader(loader, batch_size=None, num_workers=2, timeout=120) for item in b]
    assert len(got) == SAMPLES
    assert {tuple(shape) for shape, _ in got} == {(3, 16, 16)}


def test_decode_members_needs_the_member_in_every_sample(shards):
    uri, _ = shards
    with pytest.raises(ConfigError, match=r"sample sample\d+ has no \"png\" member"):
        list(bucketload.Loader(uri, decode=False, decode_members=("png",), image_size=16))
    with pytest.raises(ConfigError, match="decode=False"):
        bucketload.Loader(uri, decode_members=("jpg",))


def decoded(sample: dict) -> tuple[str, str, float, int]:
    """A transform for DataLoader workers: module level, so that spawned workers unpickle it."""
    features = np.load(io.BytesIO(sample["npy"]))
    return sample["__key__"], bytes(sample["txt"]).decode(), float(features[0]), os.getpid()


def as_dict(samples: list) -> dict:
    return {key: (text, first, pid) for key, text, first, pid in samples}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_transform_and_collate_fn_run_in_dataloader_workers(shards, context):
    uri, expected = shards
    loader = bucketload.Loader(uri, decode=False, batch_size=4, transform=decoded,
                               collate_fn=as_dict)
    batches = list(DataLoader(loader, batch_size=None, num_workers=2,
                              multiprocessing_context=context, timeout=120))
    got = {k: v for batch in batches for k, v in batch.items()}
    assert sum(len(b) for b in batches) == SAMPLES  # each sample once over the workers
    assert sorted(got) == sorted(expected)
    for key, (text, first, _) in got.items():
        n = int(key.removeprefix("sample"))
        assert (text, first) == (f"caption {n}", float(n))
    pids = {pid for _, _, pid in got.values()}
    assert len(pids) == 2 and os.getpid() not in pids


def test_raw_samples_cross_from_workers_as_bytes(shards):
    uri, expected = shards
    loader = bucketload.Loader(uri, decode=False, batch_size=8)
    # timeout: a batch a worker cannot pickle would otherwise leave the DataLoader waiting.
    samples = [s for b in DataLoader(loader, batch_size=None, num_workers=2, timeout=120)
               for s in b]
    assert sorted(s["__key__"] for s in samples) == sorted(expected)
    assert all(s["txt"] == expected[s["__key__"]]["txt"] for s in samples)


def test_a_transform_that_cannot_be_pickled_says_so(shards):
    uri, _ = shards
    loader = bucketload.Loader(uri, decode=False, transform=lambda s: s)
    with pytest.raises(ConfigError, match="transform=.*cannot be pickled.*module level"):
        pickle.dumps(loader)
    with pytest.raises(ConfigError, match="transform=.*cannot be pickled"):
        list(DataLoader(loader, batch_size=None, num_workers=1, multiprocessing_context="spawn"))


def test_transform_needs_raw_samples(shards):
    uri, _ = shards
    with pytest.raises(ConfigError, match="decode=False"):
        bucketload.Loader(uri, transform=decoded)
    with pytest.raises(ConfigError, match="decode=False"):
        bucketload.Loader(uri, collate_fn=as_dict)


def test_one_object_per_sample_under_its_extension_labelled_by_folder(bucketload_bin, env, s3):  # noqa: F811
    bucket = "any-files"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/d", "--samples", "150", "--classes", "3",
       "--size", "1KB", "--seed", "3")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="d/")["Contents"]
    objects = {o["Key"].removeprefix("d/"): o["Key"] for o in listed}
    folders = sorted({k.split("/")[0] for k in objects})
    # More samples per batch than the loader reads ahead: every batch is still full.
    batches = list(bucketload.Loader(f"s3://{bucket}/d", decode=False, batch_size=100))
    assert [len(b) for b in batches] == [100, 50]
    samples = [s for b in batches for s in b]
    assert sorted(s["__key__"] for s in samples) == sorted(objects)
    for s in samples:
        ext = s["__key__"].rsplit(".", 1)[1]
        assert set(s) == {"__key__", "__index__", "__label__", ext}
        body = s3.get_object(Bucket=bucket, Key=objects[s["__key__"]])["Body"].read()
        assert bytes(s[ext]) == body
        assert s["__label__"] == folders.index(s["__key__"].split("/")[0])


def test_the_example_runs(shards, env):  # noqa: F811
    uri, _ = shards
    out = subprocess.run([sys.executable, str(REPO / "examples" / "any_data.py"), uri,
                          "--workers", "2", "--epochs", "2", "--batch-size", "8"],
                         check=False, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split(";")[0] for line in lines] == [f"epoch {e}: {SAMPLES} samples"
                                                       for e in range(2)]
    assert "images (" in lines[0] and ", 3, 32, 32)" in lines[0]
    assert "features (" in lines[0] and ", 4)" in lines[0] and "text 'caption " in lines[0]


def _counters(server) -> dict[str, int]:
    with urllib.request.urlopen(f"{server.endpoint}/_bucketload/counters", timeout=30) as r:
        return json.load(r)


@pytest.mark.parametrize("ttl", [None, "indefinite", 3600])
def test_a_warm_epoch_from_the_cache_asks_the_store_only_without_a_metadata_ttl(
        shards, server, tmp_path, ttl):
    uri, expected = shards
    loader = bucketload.Loader(uri, decode=False, batch_size=8, cache_dir=tmp_path / "cache",
                               metadata_ttl=ttl)
    cold = sorted(_keys(loader))
    before = _counters(server)
    warm = [s for b in loader for s in b]
    after = _counters(server)
    assert cold == sorted(s["__key__"] for s in warm) == sorted(expected)
    assert all(bytes(s["jpg"]) == expected[s["__key__"]]["jpg"] for s in warm)
    asked = {k: after.get(k, 0) - before.get(k, 0) for k in ("GetObject", "HeadObject")}
    # One HEAD per shard each epoch by default (a shard rewritten in place is read anew);
    # none within a TTL. Never a GET: every block is cached.
    assert asked == {"GetObject": 0, "HeadObject": SHARDS if ttl is None else 0}


@pytest.mark.parametrize("ttl", [-1, "forever", True, float("nan")])
def test_a_metadata_ttl_that_is_not_a_time_is_refused(shards, ttl):
    with pytest.raises(ConfigError, match="metadata_ttl"):
        bucketload.Loader(shards[0], decode=False, metadata_ttl=ttl)
