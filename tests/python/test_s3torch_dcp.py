"""bucketload.s3torch.dcp and bucketload.s3torch.lightning: the S3 connector's checkpoint
classes on bucketload's checkpoint objects, against `bucketload serve` on loopback, checked
with boto3 and with torch's own file-system DCP writer and reader.

The connector's own end-to-end tests run in s3torch_e2e_ckpt/; these cover what they do not:
the key layout (against the connector's prefix strategies), keys kept as written, checkpoints
exchanged with another DCP implementation, the read order, and Lightning's Trainer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from conftest import make_client
from test_cli_dataset import moto  # noqa: F401  (a fixture)
from test_package import env  # noqa: F401  (a fixture)

from bucketload.s3torch.dcp import (
    BinaryPrefixStrategy,
    DefaultPrefixStrategy,
    HexPrefixStrategy,
    S3FileSystem,
    S3StorageReader,
    S3StorageWriter,
)
from bucketload.s3torch.dcp import s3_prefix_strategy

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

LAYOUT = Path(__file__).with_name("s3torch_prefix_layout.json")


def keys(s3, bucket, prefix=""):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


def state():
    # Sizes out of key order: DCP writes tensors by size, so file offsets differ from key order.
    return {"a_small": torch.arange(3.0), "b_large": torch.randn(64, 64), "c_mid": torch.randn(100),
            "d_step": torch.tensor(7)}


def zeros_like(sd):
    return {k: torch.zeros_like(v) for k, v in sd.items()}


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("case", json.loads(LAYOUT.read_text())["cases"],
                         ids=lambda c: f"{c['strategy']}-{len(c['arguments'])}")
def test_prefix_strategies_name_files_as_the_connector_does(case):
    """The fixture holds the connector's own strategies' output (v1.5.0)."""
    ranks = json.loads(LAYOUT.read_text())["ranks"]
    strategy = getattr(s3_prefix_strategy, case["strategy"])(**case["arguments"])
    assert [strategy(rank) for rank in ranks] == case["prefixes"]


def test_prefix_strategies_reject_what_the_connector_rejects():
    for bad in [{"min_prefix_length": 0}, {"prefix_count": 0}, {"epoch_num": "1"}]:
        with pytest.raises(ValueError):
            BinaryPrefixStrategy(**bad)
    with pytest.raises(ValueError):
        s3_prefix_strategy.RoundRobinPrefixStrategy([])


def recorded_streams(fs):
    """Wraps ``fs.create_stream``: the list of (uri, mode) it is called with."""
    calls, real = [], fs.create_stream

    def create_stream(path, mode):
        calls.append((str(path), mode))
        return real(path, mode)

    fs.create_stream = create_stream
    return calls


@pytest.mark.parametrize("path, written", [
    ("s3://{b}/a//ckpt", "s3://{b}/a//ckpt/"),
    ("s3://{b}/run/ckpt/", "s3://{b}/run/ckpt/"),
    ("s3://{b}/plain", "s3://{b}/plain/"),
    ("s3://{b}/end//", "s3://{b}/end//"),
])
def test_file_uris_join_the_path_as_written(moto, monkeypatch, path, written):  # noqa: F811
    """os.path.join, as the connector: one '/' unless the path ends with one; '//' kept. On
    moto's server: the embedded server does not store keys with an empty segment yet."""
    endpoint, moto_env = moto
    for name, value in moto_env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    bucket = f"dcp-join-{os.urandom(4).hex()}"
    client = make_client(endpoint, key="moto", secret="moto")
    client.create_bucket(Bucket=bucket)
    path, written = path.format(b=bucket), written.format(b=bucket)
    writer = S3StorageWriter("us-east-1", path, endpoint=endpoint)
    calls = recorded_streams(writer.fs)
    dcp.save(state(), storage_writer=writer)
    assert calls == [
        (written + "__0_0.distcp", "wb"), (written + ".metadata", "wb")]
    prefix = written[len(f"s3://{bucket}/"):]
    assert keys(client, bucket) == [prefix + ".metadata", prefix + "__0_0.distcp"]


def test_keys_are_the_connectors_with_double_slashes(moto, monkeypatch):  # noqa: F811
    """On moto's server (the embedded server does not store keys with an empty segment)."""
    endpoint, moto_env = moto
    for name, value in moto_env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    client = make_client(endpoint, key="moto", secret="moto")
    client.create_bucket(Bucket="dcp-slashes")
    sd = state()
    dcp.save(sd, storage_writer=S3StorageWriter("us-east-1", "s3://dcp-slashes/a//ckpt",
                                                endpoint=endpoint))
    assert keys(client, "dcp-slashes") == ["a//ckpt/.metadata", "a//ckpt/__0_0.distcp"]
    back = zeros_like(sd)
    dcp.load(back, storage_reader=S3StorageReader("us-east-1", "s3://dcp-slashes/a//ckpt",
                                                  endpoint=endpoint))
    assert same(sd, back)


def test_prefix_strategy_places_the_files_and_reads_back(env, s3, bucket):
    uri = f"s3://{bucket}/run/step-1"
    sd = state()
    dcp.save(sd, storage_writer=S3StorageWriter(
        "us-east-1", uri, prefix_strategy=BinaryPrefixStrategy(epoch_num=2, min_prefix_length=3),
        thread_count=2))
    assert keys(s3, bucket) == ["run/step-1/.metadata", "run/step-1/000/epoch_2/__0_0.distcp",
                                "run/step-1/000/epoch_2/__0_1.distcp"]
    target = zeros_like(sd)
    dcp.load(target, storage_reader=S3StorageReader("us-east-1", uri))
    assert same(target, sd)


def test_reads_a_checkpoint_written_by_torchs_file_system_writer(env, s3, bucket, tmp_path):
    """A DCP checkpoint from another implementation (torch's, the connector's default
    layout), copied to S3 key by key, loads."""
    sd = state()
    dcp.save(sd, storage_writer=FileSystemWriter(str(tmp_path / "ckpt"), thread_count=2))
    for file in sorted((tmp_path / "ckpt").iterdir()):
        s3.put_object(Bucket=bucket, Key=f"other/ckpt/{file.name}", Body=file.read_bytes())
    target = zeros_like(sd)
    dcp.load(target, storage_reader=S3StorageReader("us-east-1", f"s3://{bucket}/other/ckpt"))
    assert same(target, sd)


def test_torchs_file_system_reader_reads_what_the_writer_stored(env, s3, bucket, tmp_path):
    """The other way: every key under the path, downloaded as files, is a checkpoint that
    torch's own reader loads (relative paths in .metadata match the keys)."""
    sd = state()
    dcp.save(sd, storage_writer=S3StorageWriter(
        "us-east-1", f"s3://{bucket}/mine/", prefix_strategy=HexPrefixStrategy(min_prefix_length=2)))
    for key in keys(s3, bucket, "mine/"):
        local = tmp_path / key
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    target = zeros_like(sd)
    dcp.load(target, storage_reader=FileSystemReader(str(tmp_path / "mine")))
    assert same(target, sd)
    # Another library unpickles .metadata: it must name torch's classes only.
    assert b"bucketload" not in (tmp_path / "mine" / ".metadata").read_bytes()


def test_the_reader_reads_each_file_front_to_back(env, s3, bucket):
    """Items are loaded in file-offset order (torch's reader slices the file per item)."""
    uri = f"s3://{bucket}/order"
    sd = state()
    dcp.save(sd, storage_writer=S3StorageWriter("us-east-1", uri, thread_count=2))
    reader = S3StorageReader("us-east-1", uri)
    offsets, real = {}, reader._slice_file

    def slice_file(file, info):
        offsets.setdefault(info.relative_path, []).append(info.offset)
        return real(file, info)

    reader._slice_file = slice_file
    target = zeros_like(sd)
    dcp.load(target, storage_reader=reader)
    assert same(target, sd)
    assert sum(map(len, offsets.values())) == len(sd)
    assert all(file == sorted(file) for file in offsets.values()), offsets


def test_the_connectors_arguments_are_accepted(env, s3, bucket):
    class Config:  # stands for S3ClientConfig: read by attribute, not applied
        part_size = 8 * 1024 * 1024
        max_attempts = 3

    uri = f"s3://{bucket}/args"
    writer = S3StorageWriter("us-east-1", uri, Config(), None, 2, overwrite=False)
    assert isinstance(writer.prefix_strategy, DefaultPrefixStrategy) and writer.thread_count == 2
    assert isinstance(writer.fs, S3FileSystem)
    dcp.save(state(), storage_writer=writer)
    reader = S3StorageReader("us-east-1", uri, s3client_config=Config(), reader_constructor=object())
    dcp.load(zeros_like(state()), storage_reader=reader)
    from torch.distributed.checkpoint import CheckpointException
    with pytest.raises(CheckpointException, match="Checkpoint already exists"):
        dcp.save(state(), storage_writer=S3StorageWriter("us-east-1", uri, overwrite=False))
    assert S3StorageWriter.validate_checkpoint_id(uri)
    assert S3StorageReader.validate_checkpoint_id(Path("/local"))
    assert not S3StorageReader.validate_checkpoint_id("gs://elsewhere/x")
    fs = S3FileSystem("us-east-1")
    assert fs.exists(f"{uri}/.metadata") and not fs.exists(f"{uri}/.nothing")


def test_lightning_trainer_saves_and_resumes_through_the_plugin(env, s3, bucket, tmp_path):
    import lightning as L
    from lightning.pytorch.demos.boring_classes import BoringModel

    from bucketload.s3torch.lightning import S3LightningCheckpoint

    io = S3LightningCheckpoint("us-east-1")
    options = dict(accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False,
                   default_root_dir=str(tmp_path), plugins=[io])
    model = BoringModel()
    trainer = L.Trainer(max_steps=2, **options)
    trainer.fit(model)
    uri = f"s3://{bucket}/lightning/step=2.ckpt"
    trainer.save_checkpoint(uri)
    assert keys(s3, bucket) == ["lightning/step=2.ckpt"]

    resumed = BoringModel()
    again = L.Trainer(max_steps=3, **options)
    again.fit(resumed, ckpt_path=uri)
    assert again.global_step == 3
    with pytest.raises(TypeError):
        io.save_checkpoint({}, tmp_path / "local.ckpt")
    io.remove_checkpoint(uri)
    assert keys(s3, bucket) == []


@pytest.mark.parametrize("use_collectives", [True, False])
@pytest.mark.parametrize("writer", ["native", "connector"])
def test_layout_is_torchs_file_system_writers(env, s3, bucket, tmp_path, use_collectives, writer):
    """The files torch's own writer makes, as keys; without collectives each rank writes
    its own ``__{rank}.metadata``."""
    from bucketload import dcp as native

    dcp.save(state(), storage_writer=FileSystemWriter(str(tmp_path), thread_count=2),
             use_collectives=use_collectives)
    uri = f"s3://{bucket}/same"
    storage = (native.S3StorageWriter(uri, thread_count=2) if writer == "native"
               else S3StorageWriter("us-east-1", uri, thread_count=2))
    dcp.save(state(), storage_writer=storage, use_collectives=use_collectives)
    assert keys(s3, bucket) == sorted(f"same/{f.name}" for f in tmp_path.iterdir())
