"""The Python package on an S3 Express One Zone directory bucket (`name--zone--x-s3`) of the
embedded server, which makes such buckets behave as S3 Express does (sessions on every
request, listings not in key order within a page, prefixes that end in `/`, no
`start-after`, ETags that are not MD5s, consecutive part numbers): the Loader in every format,
checkpoints (streamed, multipart, DCP) and the S3 connector drop-in. boto3, which opens S3
Express sessions itself, writes the fixtures and checks every effect.
"""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest
import torch
import torch.distributed.checkpoint as dcp
from test_directory_buckets import listed, ok
from test_package import env  # noqa: F401  (a fixture)
from test_server_sessions import directory_bucket, express_client

import bucketload
from bucketload import checkpoint
from bucketload.s3torch import S3Checkpoint, S3IterableDataset, S3MapDataset, S3ReaderConstructor

pytestmark = [pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
              pytest.mark.filterwarnings("ignore:Detected an existing checkpoint")]

MIB = 1 << 20
#: More than one listing page (1,000 keys), so the server scrambles several pages.
SAMPLES = 1050


@pytest.fixture(scope="module")
def dataset(server, env):  # noqa: F811
    """A files dataset of SAMPLES JPEGs in 3 class folders made by `bucketload gen`, and its
    tar shards made by `bucketload shard`, on a directory bucket; the bytes boto3 reads."""
    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    ok(env, "gen", f"s3://{bucket}/train", "--samples", str(SAMPLES), "--classes", "3",
       "--size", "2KB", "--seed", "11")
    ok(env, "shard", f"s3://{bucket}/train", f"s3://{bucket}/shards", "--samples-per-shard",
       "100", "--json")
    files = {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read()
             for k in listed(s3, bucket, "train/") if k.endswith(".jpg")}
    assert len(files) == SAMPLES
    shards = sorted(k for k in listed(s3, bucket, "shards/") if k.endswith(".tar"))
    assert len(shards) == 11
    return s3, bucket, files, shards


def _samples(loader) -> list[dict]:
    return [sample for batch in loader for sample in batch]


def test_loader_reads_every_file_once_per_epoch_with_boto3s_bytes(dataset):
    _, bucket, files, _ = dataset
    loader = bucketload.Loader(f"s3://{bucket}/train", format="files", decode=False,
                               batch_size=64, seed=3)
    assert len(loader) == -(-SAMPLES // 64)
    for _ in range(2):
        samples = _samples(loader)
        assert len(samples) == SAMPLES
        assert sorted(s["__index__"] for s in samples) == list(range(SAMPLES))
        # Keys relative to the dataset's folder.
        keys = ["train/" + s["__key__"] for s in samples]
        assert sorted(keys) == sorted(files)
        assert all(bytes(s["jpg"]) == files[k] for s, k in zip(samples, keys, strict=True))
        # The label is the class folder's index among the sorted class folders.
        classes = sorted({k.split("/")[1] for k in files})
        assert all(s["__label__"] == classes.index(k.split("/")[1])
                   for s, k in zip(samples, keys, strict=True))


@pytest.mark.parametrize("fmt", ["shards", "indexed"])
def test_loader_streams_and_indexes_the_shards(dataset, fmt):
    s3, bucket, files, shards = dataset
    members: dict[str, bytes] = {}
    for key in shards:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            for m in tar.getmembers():
                if m.name.endswith(".jpg"):
                    members[m.name.removesuffix(".jpg")] = tar.extractfile(m).read()
    assert len(members) == SAMPLES and sorted(members.values()) == sorted(files.values())
    loader = bucketload.Loader(f"s3://{bucket}/shards", format=fmt, decode=False,
                               batch_size=50, seed=4)
    for _ in range(2):
        samples = _samples(loader)
        assert sorted(s["__key__"] for s in samples) == sorted(members)
        # A shard sample's index packs its shard and position: distinct, not 0..n.
        assert len({s["__index__"] for s in samples}) == SAMPLES
        assert all(bytes(s["jpg"]) == members[s["__key__"]] for s in samples)


def _key_and_members(sample):
    return sample.key, {ext: bytes(data) for ext, data in sample.members.items()}


@pytest.mark.parametrize("fmt", ["shards", "indexed"])
def test_s3torch_iterable_dataset_over_shards_in_workers(dataset, env, fmt):  # noqa: F811
    from torch.utils.data import DataLoader

    _, bucket, files, _ = dataset
    ds = S3IterableDataset.from_prefix(f"s3://{bucket}/shards", region="us-east-1",
                                       endpoint=env["AWS_ENDPOINT_URL"], format=fmt,
                                       enable_sharding=True, transform=_key_and_members)
    got = list(DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork"))
    assert len(got) == SAMPLES and len({k for k, _ in got}) == SAMPLES
    assert sorted(m["jpg"] for _, m in got) == sorted(files.values())


def test_decoded_batches_from_a_directory_bucket(dataset):
    _, bucket, _, _ = dataset
    loader = bucketload.Loader(f"s3://{bucket}/train", batch_size=128, image_size=16,
                               return_indices=True, seed=5)
    indices = []
    for images, labels, batch_indices in loader:
        assert images.shape[1:] == (3, 16, 16) and len(labels) == len(batch_indices)
        indices += batch_indices.tolist()
    assert sorted(indices) == list(range(SAMPLES))


def _state(mib: int, tensors: int = 4) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(mib)
    return {f"layer{i}.weight": torch.rand(mib * MIB // 4 // tensors, generator=gen)
            for i in range(tensors)}


def _torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_save_and_load_small_and_multipart(server, env):  # noqa: F811
    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    small = {"w": torch.arange(10.0)}
    checkpoint.save(small, f"s3://{bucket}/run/small.pt")
    assert s3.get_object(Bucket=bucket, Key="run/small.pt")["Body"].read() == _torch_bytes(small)

    big = _state(40)  # 40 MiB: three 16 MiB parts
    saved = checkpoint.save(big, f"s3://{bucket}/run/step-1.pt")
    expected = _torch_bytes(big)
    body = s3.get_object(Bucket=bucket, Key="run/step-1.pt")["Body"].read()
    assert saved["bytes"] == len(body) == len(expected)
    assert hashlib.sha256(body).digest() == hashlib.sha256(expected).digest()
    attrs = s3.get_object_attributes(Bucket=bucket, Key="run/step-1.pt",
                                     ObjectAttributes=["ObjectParts"])
    parts = attrs["ObjectParts"]
    # 16 MiB parts, numbered 1, 2, 3 (a directory bucket takes consecutive numbers only).
    assert parts["TotalPartsCount"] == 3
    assert [p["PartNumber"] for p in parts["Parts"]] == [1, 2, 3]
    assert _same(checkpoint.load(f"s3://{bucket}/run/step-1.pt", weights_only=True), big)

    # A background save, and a streamed Writer/Reader.
    handle = checkpoint.save(small, f"s3://{bucket}/run/step-2.pt", background=True)
    assert handle.wait()["bytes"] == len(_torch_bytes(small))
    assert s3.get_object(Bucket=bucket, Key="run/step-2.pt")["Body"].read() == _torch_bytes(small)
    with checkpoint.Writer(f"s3://{bucket}/run/w.bin") as writer:
        writer.write(b"0123456789")
    with checkpoint.Reader(f"s3://{bucket}/run/w.bin") as reader:
        assert reader.seek(-4, io.SEEK_END) == 6 and reader.read() == b"6789"
    # An abandoned multipart save leaves the old checkpoint and no upload.
    with pytest.raises(RuntimeError, match="stop"):
        with checkpoint.Writer(f"s3://{bucket}/run/step-1.pt") as writer:
            torch.save(_state(40), writer)
            raise RuntimeError("stop")
    assert s3.get_object(Bucket=bucket, Key="run/step-1.pt")["Body"].read() == body
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def _dcp_state():
    return {"a_small": torch.arange(3.0), "b_large": torch.randn(256, 256),
            "c_mid": torch.randn(100), "d_step": torch.tensor(7)}


def test_dcp_native_storage_writer_and_reader(server, env):  # noqa: F811
    from bucketload.dcp import S3StorageReader, S3StorageWriter

    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/run/step-7"
    sd = _dcp_state()
    dcp.save(sd, storage_writer=S3StorageWriter(uri, thread_count=2))
    keys = sorted(listed(s3, bucket, "run/"))
    assert keys == ["run/step-7/.metadata", "run/step-7/__0_0.distcp", "run/step-7/__0_1.distcp"]
    back = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(back, storage_reader=S3StorageReader(uri))
    assert _same(back, sd)


def test_dcp_through_the_connectors_classes(server, env):  # noqa: F811
    from bucketload.s3torch.dcp import S3FileSystem, S3StorageReader, S3StorageWriter

    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/ckpt/epoch-1"
    sd = _dcp_state()
    dcp.save(sd, storage_writer=S3StorageWriter("us-east-1", uri, thread_count=2))
    assert sorted(listed(s3, bucket, "ckpt/")) == [
        "ckpt/epoch-1/.metadata", "ckpt/epoch-1/__0_0.distcp", "ckpt/epoch-1/__0_1.distcp"]
    back = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(back, storage_reader=S3StorageReader("us-east-1", uri))
    assert _same(back, sd)
    # Written again over itself.
    sd2 = {k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}
    dcp.save(sd2, storage_writer=S3StorageWriter("us-east-1", uri, overwrite=True))
    dcp.load(back, storage_reader=S3StorageReader("us-east-1", uri))
    assert _same(back, sd2)
    # The file system's rename (a copy and a delete), exists and rm_file.
    fs = S3FileSystem("us-east-1", endpoint=env["AWS_ENDPOINT_URL"])
    metadata = s3.get_object(Bucket=bucket, Key="ckpt/epoch-1/.metadata")["Body"].read()
    fs.rename(f"{uri}/.metadata", f"{uri}/.metadata.moved")
    assert s3.get_object(Bucket=bucket, Key="ckpt/epoch-1/.metadata.moved")["Body"].read() == metadata
    assert not fs.exists(f"{uri}/.metadata") and fs.exists(f"{uri}/.metadata.moved")
    fs.rm_file(f"{uri}/.metadata.moved")
    assert sorted(listed(s3, bucket, "ckpt/")) == ["ckpt/epoch-1/__0_0.distcp",
                                                   "ckpt/epoch-1/__0_1.distcp"]


@pytest.fixture(scope="module")
def objects(server, env):  # noqa: F811
    """Objects put by boto3 whose keys share partial prefixes (`train/class_00` must match
    `train/class_00/…` and `train/class_001.jpg`), more than a listing page of them."""
    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    contents = {f"train/class_00/{i:04d}.bin": f"sample {i}".encode() * (1 + i % 5)
                for i in range(1010)}
    contents.update({"train/class_001.jpg": b"jpeg-ish", "train/class_01/a.bin": b"a" * 7,
                     "train/other.bin": b"o"})
    for key, body in contents.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    s3.put_object(Bucket=bucket, Key="train/class_00/", Body=b"")  # a folder marker
    return s3, bucket, contents


@pytest.mark.parametrize("prefix", ["train/", "train", "train/class_00", "train/class_00/",
                                    "train/class_00/000", "train/cl"])
def test_s3torch_datasets_from_prefix(objects, env, prefix):  # noqa: F811
    s3, bucket, contents = objects
    endpoint = env["AWS_ENDPOINT_URL"]
    expected = sorted(k for k in contents if k.startswith(prefix))
    assert expected  # every prefix matches something
    uri = f"s3://{bucket}/{prefix}"
    mapped = S3MapDataset.from_prefix(uri, region="us-east-1", endpoint=endpoint)
    assert len(mapped) == len(expected)
    got = {mapped[i].key: mapped[i].read() for i in range(len(mapped))}
    assert got == {k: contents[k] for k in expected}
    for constructor in (S3ReaderConstructor.sequential(), S3ReaderConstructor.range_based()):
        stream = S3IterableDataset.from_prefix(uri, region="us-east-1", endpoint=endpoint,
                                               reader_constructor=constructor)
        pairs = [(r.key, r.read()) for r in stream]
        assert sorted(k for k, _ in pairs) == expected
        assert dict(pairs) == {k: contents[k] for k in expected}
    # What boto3 reads, for a few of them.
    for key in expected[:3]:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == got[key]


def test_s3torch_checkpoint_round_trip(server, env):  # noqa: F811
    s3 = express_client(server.endpoint)
    bucket = directory_bucket()
    s3.create_bucket(Bucket=bucket)
    ckpt = S3Checkpoint(region="us-east-1", endpoint=env["AWS_ENDPOINT_URL"])
    for name, state in [("small.ckpt", {"w": torch.arange(64.0)}), ("big.ckpt", _state(20, 2))]:
        uri = f"s3://{bucket}/run/{name}"
        with ckpt.writer(uri) as writer:
            torch.save(state, writer)
        body = s3.get_object(Bucket=bucket, Key=f"run/{name}")["Body"].read()
        assert hashlib.sha256(body).digest() == hashlib.sha256(_torch_bytes(state)).digest()
        with ckpt.reader(uri) as reader:
            assert _same(torch.load(reader), state)
    # A checkpoint put by boto3 is read back by the connector's reader.
    s3.put_object(Bucket=bucket, Key="run/boto3.ckpt", Body=_torch_bytes({"v": torch.ones(5)}))
    with ckpt.reader(f"s3://{bucket}/run/boto3.ckpt") as reader:
        assert torch.equal(torch.load(reader)["v"], torch.ones(5))
    # An exception inside the block abandons the save.
    with pytest.raises(RuntimeError, match="stop"):
        with ckpt.writer(f"s3://{bucket}/run/small.ckpt") as writer:
            writer.write(b"half")
            raise RuntimeError("stop")
    assert torch.equal(torch.load(io.BytesIO(
        s3.get_object(Bucket=bucket, Key="run/small.ckpt")["Body"].read()))["w"], torch.arange(64.0))
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_loader_resumes_mid_epoch_with_nothing_repeated_or_skipped(dataset):
    """A second loader opened while the first is mid-epoch (its fetch stage waiting for its
    consumer) resumes from the first's state. It used to hang at open: a request of the first
    loader queued for the bucket's session, and left unpolled, held the session's lock."""
    _, bucket, files, _ = dataset
    uri = f"s3://{bucket}/train"
    loader = bucketload.Loader(uri, format="files", decode=False, batch_size=100, seed=6)
    batches = iter(loader)
    first = [s["__key__"] for _ in range(4) for s in next(batches)]
    state = loader.state_dict()
    resumed = bucketload.Loader(uri, format="files", decode=False, batch_size=100, seed=6)
    resumed.load_state_dict(state)
    rest = [s["__key__"] for s in _samples(resumed)]
    assert len(first) == 400 and len(first) + len(rest) == SAMPLES
    assert sorted("train/" + k for k in first + rest) == sorted(files)
