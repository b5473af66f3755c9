"""An epoch either delivers every sample it planned or raises: a crafted shard index (valid
checksum, members out of order) and objects deleted mid-epoch reach ``bucketload.Loader`` and
``S3IterableDataset`` as exceptions naming the object, never as an epoch that ends early as if
it were whole. Against a real `bucketload serve`, the data checked with boto3."""

from __future__ import annotations

import struct

import pytest
from torch.utils.data import DataLoader

import bucketload
from bucketload.s3torch import S3IterableDataset

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

SAMPLES = 200
INDEX = "shard-000000.tar.idx"


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli), as the index trailer holds it; written here, independent of ours."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def members_reversed(index: bytes) -> bytes:
    """The index with its first sample's members in reverse order and a valid checksum (the
    layout of docs/FORMATS.md: a 64-byte header, then each sample's key and members)."""
    body = index[:-4]
    assert crc32c(body) == struct.unpack("<I", index[-4:])[0], "independent CRC32C agrees"
    pos = 64
    (key_len,) = struct.unpack_from("<H", body, pos)
    pos += 2 + key_len
    (count,) = struct.unpack_from("<H", body, pos)
    pos += 2
    start, members = pos, []
    for _ in range(count):
        ext_len = body[pos]
        size = 1 + ext_len + 8 + 8 + 8 + 4
        members.append(body[pos:pos + size])
        pos += size
    assert len(members) >= 2, "a sample holds its image and its label"
    crafted = body[:start] + b"".join(reversed(members)) + body[pos:]
    return crafted + struct.pack("<I", crc32c(crafted))


def _dataset(bucketload_bin, env, s3, bucket: str) -> str:  # noqa: F811
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/src", "--samples", str(SAMPLES), "--classes",
       "4", "--size", "2KB", "--seed", "5")
    ok(bucketload_bin, env, "shard", f"s3://{bucket}/src", f"s3://{bucket}/wds",
       "--samples-per-shard", "50")
    return f"s3://{bucket}/wds"


@pytest.fixture(scope="module")
def crafted(bucketload_bin, env, s3):  # noqa: F811
    """Indexed shards of 200 samples whose first index lists a sample's members out of order."""
    bucket = "integrity-crafted"
    uri = _dataset(bucketload_bin, env, s3, bucket)
    good = s3.get_object(Bucket=bucket, Key=f"wds/{INDEX}")["Body"].read()
    s3.put_object(Bucket=bucket, Key=f"wds/{INDEX}", Body=members_reversed(good))
    return uri


def test_loader_over_a_crafted_index_raises_naming_it(crafted):
    data = bucketload.Loader(crafted, format="indexed", batch_size=16, image_size=16)
    seen = 0
    with pytest.raises(bucketload.CorruptDataError, match=INDEX.replace(".", r"\.")) as raised:
        for _images, labels in data:
            seen += len(labels)
    assert "bucketload index" in str(raised.value)
    assert seen == 0


def test_s3_iterable_dataset_over_a_crafted_index_raises_naming_it(crafted, env):  # noqa: F811
    ds = S3IterableDataset(crafted, endpoint=env["AWS_ENDPOINT_URL"], format="indexed")
    seen = 0
    with pytest.raises(bucketload.CorruptDataError, match=INDEX.replace(".", r"\.")):
        for _sample in ds:
            seen += 1
    assert seen < SAMPLES


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_raise_on_a_crafted_index(crafted, env, context):  # noqa: F811
    ds = S3IterableDataset(crafted, endpoint=env["AWS_ENDPOINT_URL"], format="indexed",
                           enable_sharding=True)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context,
                        collate_fn=_keep)
    with pytest.raises(Exception, match=INDEX.replace(".", r"\.")):
        for _sample in loader:
            pass


def _keep(sample):
    return sample


def _delete_prefix(s3, bucket: str, prefix: str) -> None:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])


@pytest.fixture
def files(bucketload_bin, env, bucket):  # noqa: F811
    """200 objects with a manifest, in a bucket of the test's own."""
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/d", "--samples", str(SAMPLES), "--classes",
       "4", "--size", "2KB", "--seed", "9")
    ok(bucketload_bin, env, "manifest", f"s3://{bucket}/d")
    return bucket


def test_objects_deleted_mid_epoch_raise_from_the_loader(files, s3):
    data = bucketload.Loader(f"s3://{files}/d", batch_size=8, image_size=16, concurrency=2,
                             shuffle=False)
    assert len(data) == SAMPLES // 8
    seen = 0
    with pytest.raises(bucketload.NotFoundError, match=f"s3://{files}/d/class_"):
        for _images, labels in data:
            if seen == 0:
                _delete_prefix(s3, files, "d/class_")
            seen += len(labels)
    assert 0 < seen < SAMPLES


def test_objects_deleted_mid_epoch_raise_from_the_iterable_dataset(files, s3, env):  # noqa: F811
    """The connector's words (a GET that finds nothing), and the object named in ``uri``."""
    ds = S3IterableDataset(f"s3://{files}/d", endpoint=env["AWS_ENDPOINT_URL"], concurrency=2)
    seen = 0
    with pytest.raises(FileNotFoundError, match="Service error: The key does not exist") as e:
        for _reader in ds:
            if seen == 0:
                _delete_prefix(s3, files, "d/class_")
            seen += 1
    assert 0 < seen < SAMPLES
    assert e.value.uri.startswith(f"s3://{files}/d/class_")


def test_an_object_changed_since_the_manifest_raises_naming_it(files, s3, env):  # noqa: F811
    """One object rewritten (same size) after `bucketload manifest`: the Loader raises naming it
    instead of training on bytes the manifest does not describe. `S3IterableDataset` yields
    objects as S3 lists them, as the connector does, whatever the manifest says: the new
    bytes."""
    key = s3.list_objects_v2(Bucket=files, Prefix="d/class_0")["Contents"][3]["Key"]
    body = s3.get_object(Bucket=files, Key=key)["Body"].read()
    s3.put_object(Bucket=files, Key=key, Body=bytes(b ^ 0x01 for b in body))
    pattern = f"s3://{files}/{key}".replace(".", r"\.")
    with pytest.raises(bucketload.CorruptDataError, match=pattern):
        for _batch in bucketload.Loader(f"s3://{files}/d", batch_size=8, image_size=16):
            pass
    ds = S3IterableDataset(f"s3://{files}/d", endpoint=env["AWS_ENDPOINT_URL"],
                           transform=lambda r: (r.key, r.read()))
    assert dict(ds)[key] == bytes(b ^ 0x01 for b in body)
