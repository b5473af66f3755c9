"""`bucketload.s3torch` as a drop-in for `s3torchconnector` 1.5: every public name, the client
settings, `from_objects`, key-prefix listing, one reader per object (the connector's tar
pattern with WebDataset), plain tar shards, the readers' io contract and the exceptions.
Against a real `bucketload serve` (the suite's `server`), data written and checked with boto3.
The connector's own end-to-end tests run in tests/python/s3torch_e2e."""

from __future__ import annotations

import array
import dataclasses
import io
import operator
import os
import subprocess
import tarfile

import pytest
from torch.utils.data import DataLoader

import bucketload
from test_cli_dataset import moto, ok  # noqa: F401  (moto is a fixture)
from test_package import env  # noqa: F401  (a fixture)


def _names(module) -> set[str]:
    return set(module.__all__)


def test_every_public_name_of_the_connector_imports():
    import bucketload.s3torch as s3torch
    from bucketload.s3torch import (  # noqa: F401
        S3Checkpoint, S3ClientConfig, S3Exception, S3IterableDataset, S3MapDataset, S3Reader,
        S3ReaderConstructor, S3Writer, __version__,
    )
    from bucketload.s3torch.s3reader import (  # noqa: F401
        DCPOptimizedS3Reader, DCPS3ReaderConstructorProtocol, GetStreamCallable, RangedS3Reader,
        S3ReaderConstructorProtocol, SequentialS3Reader,
    )

    connector = {"S3IterableDataset", "S3MapDataset", "S3Checkpoint", "S3Reader",
                 "S3ReaderConstructor", "S3Writer", "S3Exception", "S3ClientConfig", "__version__"}
    assert connector <= _names(s3torch)
    assert __version__ == bucketload.__version__


def test_client_config_is_the_connectors_frozen_dataclass():
    from bucketload.s3torch import S3ClientConfig

    fields = {f.name: f.default for f in dataclasses.fields(S3ClientConfig)}
    assert fields == {"throughput_target_gbps": 10.0, "part_size": 8 * 1024 * 1024,
                      "unsigned": False, "force_path_style": False, "max_attempts": 10,
                      "profile": None}
    with pytest.raises(dataclasses.FrozenInstanceError):
        S3ClientConfig().profile = "x"


def test_reader_constructors_build_the_connectors_readers():
    from functools import partial

    from bucketload.s3torch import S3ReaderConstructor
    from bucketload.s3torch.s3reader import (
        DCPOptimizedS3Reader, RangedS3Reader, S3ReaderConstructorProtocol, SequentialS3Reader,
    )

    for constructor, cls, kind in [
        (S3ReaderConstructor.default(), SequentialS3Reader, "sequential"),
        (S3ReaderConstructor.sequential(), SequentialS3Reader, "sequential"),
        (S3ReaderConstructor.range_based(buffer_size=16), RangedS3Reader, "range_based"),
    ]:
        assert isinstance(constructor, partial) and constructor.func is cls
        assert isinstance(constructor, S3ReaderConstructorProtocol)
        assert S3ReaderConstructor.get_reader_type_string(constructor) == kind
    dcp = S3ReaderConstructor.dcp_optimized()
    assert S3ReaderConstructor.get_reader_type_string(dcp) == "dcp_optimized"
    assert hasattr(dcp, "set_item_ranges_by_file") and DCPOptimizedS3Reader


@pytest.fixture(scope="module")
def objects(env, s3):  # noqa: F811
    """Keys sharing prefixes the way a partial prefix must tell apart, and a folder marker;
    returns bucket and {key: bytes}."""
    bucket = "dropin-objects"
    s3.create_bucket(Bucket=bucket)
    contents = {f"train/class_00/{i}.bin": os.urandom(100 + i) for i in range(3)}
    contents.update({"train/class_001.jpg": os.urandom(50), "train/class_01/a.bin": b"a" * 7,
                     "train/other.bin": b"o"})
    for key, body in contents.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    s3.put_object(Bucket=bucket, Key="train/class_00/", Body=b"")
    return bucket, contents


def test_from_prefix_matches_keys_by_prefix_like_s3(objects):
    from bucketload.s3torch import S3IterableDataset, S3MapDataset, S3ReaderConstructor

    bucket, contents = objects
    uri = f"s3://{bucket}/train/class_00"
    expected = sorted(k for k in contents if k.startswith("train/class_00"))
    assert expected == ["train/class_00/0.bin", "train/class_00/1.bin", "train/class_00/2.bin",
                        "train/class_001.jpg"]
    mapped = S3MapDataset.from_prefix(uri, region="us-east-1")
    assert [mapped[i].key for i in range(len(mapped))] == expected
    assert all(mapped[i].read() == contents[mapped[i].key] for i in range(len(mapped)))
    for constructor in (S3ReaderConstructor.sequential(), S3ReaderConstructor.range_based()):
        stream = S3IterableDataset.from_prefix(uri, region="us-east-1",
                                               reader_constructor=constructor)
        got = [(r.key, r.read()) for r in stream]
        assert got == [(k, contents[k]) for k in expected]


def test_folder_markers_are_skipped(objects):
    from bucketload.s3torch import S3IterableDataset, S3MapDataset, S3ReaderConstructor

    bucket, contents = objects
    for uri in (f"s3://{bucket}/train/", f"s3://{bucket}/train"):
        mapped = S3MapDataset.from_prefix(uri, region="us-east-1")
        assert [mapped[i].key for i in range(len(mapped))] == sorted(contents)
        for constructor in (S3ReaderConstructor.sequential(), S3ReaderConstructor.range_based()):
            keys = list(S3IterableDataset.from_prefix(uri, transform=lambda r: r.key,
                                                      reader_constructor=constructor))
            assert keys == sorted(contents), (uri, constructor)


def test_double_slash_keys_are_kept_as_stored(moto, monkeypatch):  # noqa: F811
    """`a//b` is listed as stored and read as itself, never as `a/b` (tests/python/test_keys.py
    runs the whole table of keys on both servers)."""
    from bucketload.s3torch import S3IterableDataset, S3MapDataset
    from conftest import make_client

    endpoint, moto_env = moto
    for key, value in moto_env.items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    client = make_client(endpoint, key="moto", secret="moto")
    client.create_bucket(Bucket="dropin-double")
    for key in ("d//x.bin", "d/x.bin", "d/y.bin"):
        client.put_object(Bucket="dropin-double", Key=key, Body=key.encode())
    mapped = S3MapDataset.from_prefix("s3://dropin-double/d/", endpoint=endpoint)
    keys = [mapped[i].key for i in range(len(mapped))]
    assert keys == ["d//x.bin", "d/x.bin", "d/y.bin"]
    assert [mapped[i].read() for i in range(3)] == [b"d//x.bin", b"d/x.bin", b"d/y.bin"]
    doubled = S3IterableDataset.from_prefix("s3://dropin-double/d//", endpoint=endpoint,
                                            transform=lambda r: (r.key, r.read()))
    assert list(doubled) == [("d//x.bin", b"d//x.bin")]


def test_iterable_from_objects_takes_the_connectors_arguments(objects):
    from bucketload.s3torch import S3ClientConfig, S3IterableDataset, S3ReaderConstructor

    bucket, contents = objects
    keys = ["train/other.bin", "train/class_001.jpg", "train/class_00/2.bin"]
    for constructor in (None, S3ReaderConstructor.range_based(buffer_size=0)):
        ds = S3IterableDataset.from_objects(
            [f"s3://{bucket}/{k}" for k in keys], region="us-east-1", endpoint=None,
            transform=lambda r: (r.key, r.read()), s3client_config=S3ClientConfig(),
            enable_sharding=False, reader_constructor=constructor)
        assert list(ds) == [(k, contents[k]) for k in keys]
    one = S3IterableDataset.from_objects(f"s3://{bucket}/{keys[0]}", region="us-east-1")
    assert [r.read() for r in one] == [contents[keys[0]]]
    # Two DataLoader workers with sharding split the objects.
    ds = S3IterableDataset.from_objects([f"s3://{bucket}/{k}" for k in keys], region="us-east-1",
                                        transform=lambda r: r.key, enable_sharding=True)
    seen = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(seen) == sorted(keys)


KEY_MISSING = "Service error: The key does not exist"
BUCKET_MISSING = "Service error: The bucket does not exist"
NOT_FOUND = "Service error: The object was not found"


def _raises_connector_words(call, words: str, uri: str) -> None:
    """``call()`` raises what the connector raises (the same words, an ``S3Exception``), which
    is also a ``FileNotFoundError`` and names what is missing."""
    from bucketload.s3torch import S3Exception

    with pytest.raises(S3Exception) as caught:
        call()
    assert str(caught.value) == words
    assert isinstance(caught.value, FileNotFoundError)
    assert isinstance(caught.value, bucketload.NotFoundError)
    assert caught.value.uri == uri
    assert uri in str(caught.value.__cause__)


def test_not_found_errors_carry_the_connectors_words(objects, tmp_path):
    """Every request of the drop-in that finds nothing raises the connector's words, as its
    `S3Exception`, for each operation: a GET, a HEAD (the ranged reader asks the size first),
    a listing, a checkpoint read or write, a Lightning load or delete, a DCP rename."""
    from bucketload.s3torch import (
        S3Checkpoint,
        S3IterableDataset,
        S3MapDataset,
        S3ReaderConstructor,
    )
    from bucketload.s3torch.dcp import S3FileSystem
    from bucketload.s3torch.lightning import S3LightningCheckpoint

    bucket, _ = objects
    missing = f"s3://{bucket}/train/none.bin"
    nobucket = "s3://no-such-bucket-dropin"
    ranged = S3ReaderConstructor.range_based()
    lightning = S3LightningCheckpoint("us-east-1")
    cases = [
        (lambda: S3MapDataset.from_objects(missing)[0].read(), KEY_MISSING, missing),
        (lambda: S3MapDataset.from_objects(missing, reader_constructor=ranged)[0].read(),
         NOT_FOUND, missing),
        (lambda: list(S3IterableDataset.from_objects([missing], transform=lambda r: r.read())),
         KEY_MISSING, missing),
        (lambda: list(S3IterableDataset.from_objects(missing, reader_constructor=ranged,
                                                     transform=lambda r: r.read())),
         NOT_FOUND, missing),
        (lambda: len(S3MapDataset.from_prefix(f"{nobucket}/x")), BUCKET_MISSING, nobucket),
        (lambda: list(S3IterableDataset.from_prefix(f"{nobucket}/x/")), BUCKET_MISSING,
         nobucket),
        (lambda: S3MapDataset.from_objects(f"{nobucket}/k")[0].read(), BUCKET_MISSING,
         nobucket),
        (lambda: S3Checkpoint("us-east-1").reader(missing).read(), KEY_MISSING, missing),
        (lambda: lightning.load_checkpoint(missing), KEY_MISSING, missing),
        (lambda: lightning.remove_checkpoint(f"{nobucket}/k.ckpt"), BUCKET_MISSING, nobucket),
        (lambda: S3FileSystem("us-east-1").rename(missing, f"s3://{bucket}/train/new.bin"),
         NOT_FOUND, missing),
    ]
    for n, (call, words, uri) in enumerate(cases):
        try:
            _raises_connector_words(call, words, uri)
        except (AssertionError, pytest.fail.Exception) as e:
            raise AssertionError(f"case {n}: {e}") from e

    def write() -> None:
        writer = S3Checkpoint("us-east-1").writer(f"{nobucket}/ckpt.pt")
        writer.write(b"x" * (20 << 20))  # more than a part: the upload starts
        writer.close()

    _raises_connector_words(write, BUCKET_MISSING, f"{nobucket}/ckpt.pt")


def test_dcp_file_system_answers_missing_objects_as_the_connector(objects, caplog):
    """`exists` is False for a missing object (the connector's own code compares the words),
    `rm_file` of a missing object succeeds and in a missing bucket logs, as the connector."""
    from bucketload.s3torch.dcp import S3FileSystem

    bucket, _ = objects
    fs = S3FileSystem("us-east-1")
    assert not fs.exists(f"s3://{bucket}/train/none.bin")
    assert fs.exists(f"s3://{bucket}/train/other.bin")
    fs.rm_file(f"s3://{bucket}/train/none.bin")
    fs.rm_file("s3://no-such-bucket-dropin/k")
    assert "Failed to remove object from S3" in caplog.text


def test_store_errors_are_s3exception_and_bucketload_errors(objects):
    from bucketload.s3torch import S3Exception, S3IterableDataset, S3MapDataset

    bucket, _ = objects
    assert issubclass(bucketload.StoreError, S3Exception)
    assert issubclass(bucketload.NotFoundError, S3Exception)
    assert issubclass(bucketload.PermissionDeniedError, S3Exception)
    missing = S3MapDataset.from_objects(f"s3://{bucket}/train/none.bin", region="us-east-1")
    with pytest.raises(S3Exception) as caught:
        missing[0].read()
    assert isinstance(caught.value, FileNotFoundError)
    gone = S3IterableDataset.from_objects([f"s3://{bucket}/train/none.bin"], region="us-east-1")
    with pytest.raises(bucketload.NotFoundError) as caught:
        list(gone)
    assert caught.value.uri == f"s3://{bucket}/train/none.bin"
    with pytest.raises(S3Exception):
        len(S3MapDataset.from_prefix("s3://no-such-bucket-dropin/x", region="us-east-1"))


def test_client_config_unsigned_and_profile_reach_the_store(objects, monkeypatch, tmp_path, env):  # noqa: F811
    from bucketload.s3torch import S3ClientConfig, S3Exception, S3MapDataset

    bucket, contents = objects
    uri = f"s3://{bucket}/train/class_00"
    # The server checks signatures: unsigned requests are refused.
    with pytest.raises(S3Exception) as refused:
        len(S3MapDataset.from_prefix(uri, s3client_config=S3ClientConfig(unsigned=True)))
    assert isinstance(refused.value, bucketload.PermissionDeniedError)
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[dropin]\naws_access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n"
        "[stranger]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    ds = S3MapDataset.from_prefix(uri, s3client_config=S3ClientConfig(profile="dropin",
                                                                      force_path_style=True))
    assert len(ds) == 4 and ds[3].read() == contents["train/class_001.jpg"]
    with pytest.raises(bucketload.PermissionDeniedError):
        len(S3MapDataset.from_prefix(uri, s3client_config=S3ClientConfig(profile="stranger")))


def _tar(members: dict[str, bytes], gnu_format: bool = False) -> bytes:
    out = io.BytesIO()
    fmt = tarfile.GNU_FORMAT if gnu_format else tarfile.PAX_FORMAT
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture(scope="module")
def plain_shards(env, s3, tmp_path_factory):  # noqa: F811
    """Two WebDataset tars without index or manifest: one written by Python's tarfile, one by
    GNU tar; returns the URI and {sample key: {ext: bytes}}."""
    bucket = "dropin-plain-shards"
    s3.create_bucket(Bucket=bucket)
    samples = {f"s{i:03d}": {"jpg": os.urandom(300 + i), "cls": str(i % 3).encode()}
               for i in range(6)}
    first = {f"{k}.{ext}": v for k in list(samples)[:3] for ext, v in samples[k].items()}
    s3.put_object(Bucket=bucket, Key="shards/shard-000.tar", Body=_tar(first))
    folder = tmp_path_factory.mktemp("gnutar")
    names = []
    for k in list(samples)[3:]:
        for ext, data in samples[k].items():
            (folder / f"{k}.{ext}").write_bytes(data)
            names.append(f"{k}.{ext}")
    subprocess.run(["tar", "cf", str(folder / "shard-001.tar"), *names], cwd=folder, check=True)
    s3.put_object(Bucket=bucket, Key="shards/shard-001.tar",
                  Body=(folder / "shard-001.tar").read_bytes())
    return f"s3://{bucket}/shards/", samples


def test_the_connectors_tar_pattern_with_webdataset(plain_shards):
    """The connector's documented pattern: each `.tar` object is a reader that WebDataset's
    `tar_file_expander` reads."""
    import webdataset
    from bucketload.s3torch import S3IterableDataset, S3Reader

    uri, samples = plain_shards
    s3_dataset = S3IterableDataset.from_prefix(
        uri, region="us-east-1", transform=lambda obj: {"url": obj.key, "stream": obj})
    readers = list(S3IterableDataset.from_prefix(uri, region="us-east-1"))
    assert [r.key for r in readers] == ["shards/shard-000.tar", "shards/shard-001.tar"]
    assert all(isinstance(r, S3Reader) for r in readers)
    files = {}
    for member in webdataset.tariterators.tar_file_expander(s3_dataset):
        if member:  # an empty dict marks the end of each shard
            files[member["fname"]] = member["data"]
    assert files == {f"{k}.{ext}": v for k, exts in samples.items() for ext, v in exts.items()}
    # The same with tarfile in stream mode, as scripts without WebDataset do.
    for reader in S3IterableDataset.from_prefix(uri, region="us-east-1"):
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for info in tar:
                assert tar.extractfile(info).read() == files[info.name]


def _sample_dict(sample) -> tuple[str, dict]:
    return sample.key, dict(sample.members)


def test_plain_tar_shards_stream_without_an_index(plain_shards, bucketload_bin, env):  # noqa: F811
    from bucketload.s3torch import S3IterableDataset

    uri, samples = plain_shards
    expected = {k: v for k, v in samples.items()}
    for fmt in ("shards", "auto", "indexed"):
        ds = S3IterableDataset(uri, format=fmt, transform=_sample_dict)
        assert dict(ds) == expected, fmt
    out = ok(bucketload_bin, env, "read", uri, "--format", "shards")
    assert "6 samples" in out


def test_plain_tar_shards_feed_the_loader(plain_shards, env):  # noqa: F811
    """`Loader` detects the shards (format auto) and plans them without an index; samples whose
    images cannot be decoded are named, which proves each was read."""
    uri, samples = plain_shards
    loader = bucketload.Loader(uri, batch_size=3, image_size=16, shuffle=False, skip_corrupt=True)
    assert len(loader) == 2
    list(loader)


def _reader(data: bytes, kind: str):
    from bucketload.s3torch.s3reader import RangedS3Reader, SequentialS3Reader
    from bucketload.s3torch.s3reader._types import ObjectInfo

    def stream(start=None, end=None):
        yield data if start is None else data[start:end]

    info = lambda: ObjectInfo("k", len(data))  # noqa: E731
    if kind == "sequential":
        return SequentialS3Reader("b", "k", info, stream)
    return RangedS3Reader("b", "k", info, stream, buffer_size=4 if kind == "ranged" else 0)


@pytest.mark.parametrize("kind", ["sequential", "ranged", "unbuffered"])
def test_readers_keep_the_io_contract(kind):
    data = bytes(range(64))
    r = _reader(data, kind)
    with pytest.raises(TypeError):
        r.seek(1.5)
    with pytest.raises(TypeError):
        r.seek(0, 1.0)
    with pytest.raises(TypeError):
        r.read(2.0)
    with pytest.raises(ValueError):
        r.seek(-1)
    with pytest.raises(ValueError):
        r.seek(0, 7)
    assert r.seek(-4, io.SEEK_END) == 60 and r.read(None) == data[60:]
    assert r.seek(1000) == 64 and r.read() == b""  # beyond the end: at the end, as the connector
    assert r.seek(10) == 10 and r.seek(5, io.SEEK_CUR) == 15 and r.read(3) == data[15:18]
    r.seek(0)
    ints = array.array("i", [0] * 4)
    assert r.readinto(memoryview(ints)) == 16 and ints.tobytes() == data[:16]
    grid = memoryview(bytearray(8)).cast("B", (2, 4))
    assert r.readinto(grid) == 8 and grid.tobytes() == data[16:24]
    with pytest.raises(TypeError):
        r.readinto(b"read-only")
    assert r.tell() == 24
    r.close()
    assert r.closed
    for call in (r.read, r.tell, lambda: r.seek(0), lambda: r.readinto(bytearray(2))):
        with pytest.raises(ValueError):
            call()


def test_client_config_max_attempts_counts_the_first_try(tmp_path, monkeypatch):
    """Against a server that fails every request: `max_attempts=3` is the first try and two
    retries, `max_attempts=1` the first try alone."""
    from bucketload.s3torch import S3ClientConfig, S3Exception, S3MapDataset
    from conftest import start_server, stop_server

    failing = start_server(tmp_path, "--fault-rate", "1")
    try:
        for key, value in failing.env().items():
            if key.startswith("AWS_"):
                monkeypatch.setenv(key, value)
        uri = "s3://faulty/x.bin"
        with pytest.raises(S3Exception, match="after 2 retries"):
            S3MapDataset.from_objects(uri, s3client_config=S3ClientConfig(max_attempts=3))[0].read()
        with pytest.raises(bucketload.StoreError) as once:
            S3MapDataset.from_objects(uri, s3client_config=S3ClientConfig(max_attempts=1))[0].read()
        assert " after " not in str(once.value), once.value
    finally:
        stop_server(failing)


def test_checkpoint_writer_takes_the_client_configs_part_size(env, s3):  # noqa: F811
    from bucketload.s3torch import S3Checkpoint, S3ClientConfig

    s3.create_bucket(Bucket="dropin-ckpt")
    data = os.urandom(12 << 20)
    sized = S3Checkpoint(region="us-east-1",
                         s3client_config=S3ClientConfig(part_size=5 << 20))
    with sized.writer("s3://dropin-ckpt/sized.pt") as writer:
        writer.write(data)
    with S3Checkpoint(region="us-east-1").writer("s3://dropin-ckpt/default.pt") as writer:
        writer.write(data)
    # A multipart ETag ends in the number of parts: 12 MiB in 5 MiB parts is 3; in
    # bucketload's 16 MiB parts, one (a single PUT: an ETag without a count).
    for key, parts in (("sized.pt", 3), ("default.pt", 1)):
        etag = s3.head_object(Bucket="dropin-ckpt", Key=key)["ETag"].strip('"')
        assert (int(etag.split("-")[1]) if "-" in etag else 1) == parts, (key, etag)
        assert s3.get_object(Bucket="dropin-ckpt", Key=key)["Body"].read() == data


@pytest.fixture(scope="module")
def sharded(bucketload_bin, env, s3):  # noqa: F811
    """A prefix made by `bucketload shard` (tars, their indexes, `_bucketload/*`), and the
    keys of every object under it as boto3 lists them."""
    bucket = "dropin-sharded"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/train", "--samples", "24", "--classes", "3",
       "--size", "1KB")
    ok(bucketload_bin, env, "shard", f"s3://{bucket}/train", f"s3://{bucket}/shards",
       "--samples-per-shard", "4")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="shards/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    assert any(k.startswith("shards/_bucketload/") for k in keys)
    assert any(k.endswith(".tar") for k in keys) and any(not k.endswith(".tar") for k in keys)
    return bucket, keys


def test_every_way_of_listing_a_sharded_prefix_yields_what_s3_lists(sharded, s3):
    """Every object under a prefix made by `bucketload shard`, in S3's listing order, however
    the dataset is built and read, as the connector yields them (manifest or not)."""
    from bucketload.s3torch import S3IterableDataset, S3MapDataset, S3ReaderConstructor

    bucket, keys = sharded
    key = operator.attrgetter("key")
    for uri in (f"s3://{bucket}/shards/", f"s3://{bucket}/shards"):
        mapped = S3MapDataset.from_prefix(uri)
        assert [mapped[i].key for i in range(len(mapped))] == keys, uri
        for constructor in (None, S3ReaderConstructor.sequential(),
                            S3ReaderConstructor.range_based()):
            stream = S3IterableDataset.from_prefix(uri, transform=key,
                                                   reader_constructor=constructor)
            assert list(stream) == keys, (uri, constructor)
        for options in ({"use_manifest": False}, {"format": "files"}, {"shuffle": True}):
            stream = S3IterableDataset.from_prefix(uri, transform=key, **options)
            got = list(stream)
            assert sorted(got) == keys if options.get("shuffle") else got == keys, options
        # Split over DataLoader workers, the objects are the same.
        sharded_stream = S3IterableDataset.from_prefix(uri, transform=key, enable_sharding=True)
        seen = list(DataLoader(sharded_stream, batch_size=None, num_workers=2))
        assert sorted(seen) == keys
    readers = list(S3IterableDataset.from_prefix(f"s3://{bucket}/shards/"))
    assert all(r.read() == s3.get_object(Bucket=bucket, Key=r.key)["Body"].read()
               for r in readers)
