"""bucketload.checkpoint: streamed saves and loads, atomicity, S3 keys exactly as given
(checked with boto3 on moto's server, which stores any key), and the file contract of its
Reader and Writer."""

from __future__ import annotations

import io
import os

import pytest
import torch

from bucketload import checkpoint
from conftest import make_client
from test_cli_dataset import moto, ok  # noqa: F401  (moto is a fixture)
from test_package import env  # noqa: F401  (a fixture)

MIB = 1 << 20


def big_state(mib: int, tensors: int = 5) -> dict[str, torch.Tensor]:
    """A state dict of `mib` MiB of float32 in `tensors` tensors: more than one 16 MiB part."""
    gen = torch.Generator().manual_seed(mib)
    return {f"layer{i}.weight": torch.rand(mib * MIB // 4 // tensors, generator=gen) for i in range(tensors)}


def same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.fixture
def moto_env(moto):  # noqa: F811
    endpoint, env = moto
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    yield endpoint, env, make_client(endpoint, key="moto", secret="moto")
    os.environ.clear()
    os.environ.update(saved)


def test_streamed_save_is_torch_save_in_parts_and_loads_back(env, s3):
    s3.create_bucket(Bucket="ckpt-stream")
    state = big_state(40)
    saved = checkpoint.save(state, "s3://ckpt-stream/run/step-1.pt")
    body = s3.get_object(Bucket="ckpt-stream", Key="run/step-1.pt")["Body"].read()
    assert saved["bytes"] == len(body) and body == torch_bytes(state)
    assert same(checkpoint.load("s3://ckpt-stream/run/step-1.pt", weights_only=True), state)
    # The background save snapshots the bytes: changing the tensors afterwards changes nothing.
    handle = checkpoint.save(state, "s3://ckpt-stream/run/step-2.pt", background=True)
    expected = torch_bytes(state)
    for t in state.values():
        t.zero_()
    assert handle.wait()["bytes"] == len(expected)
    assert s3.get_object(Bucket="ckpt-stream", Key="run/step-2.pt")["Body"].read() == expected


def test_a_failing_streamed_save_leaves_nothing(env, s3):
    s3.create_bucket(Bucket="ckpt-fail")
    old = {"w": torch.zeros(4)}
    checkpoint.save(old, "s3://ckpt-fail/c.pt")
    # torch.save fails (here before any byte is written).
    with pytest.raises(Exception, match="pickle|lambda"):
        checkpoint.save({"w": torch.ones(4), "z": lambda: None}, "s3://ckpt-fail/c.pt")
    # A failure after several parts were uploaded: the upload is aborted.
    with pytest.raises(RuntimeError, match="stop"):
        with checkpoint.Writer("s3://ckpt-fail/c.pt") as writer:
            torch.save(big_state(40), writer)
            assert writer.tell() > 32 * MIB
            raise RuntimeError("stop")
    assert s3.get_object(Bucket="ckpt-fail", Key="c.pt")["Body"].read() == torch_bytes(old)
    assert s3.list_multipart_uploads(Bucket="ckpt-fail").get("Uploads", []) == []


def test_keys_are_the_uri_byte_for_byte(moto_env, bucketload_bin, tmp_path):
    endpoint, env, client = moto_env
    client.create_bucket(Bucket="exact")
    small, big = {"w": torch.arange(10)}, big_state(20, tensors=2)
    checkpoint.save(small, "s3://exact/a//x.pt")
    checkpoint.save(small, "s3://exact/a/dir/")
    checkpoint.save(big, "s3://exact//lead/big.pt")  # multipart
    checkpoint.save(small, "s3://exact/d//ckpt/x.pt")  # an empty segment inside the prefix
    with checkpoint.Writer("s3://exact/w//writer.pt") as writer:
        torch.save(small, writer)
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="exact")["Contents"])
    assert keys == ["/lead/big.pt", "a//x.pt", "a/dir/", "d//ckpt/x.pt", "w//writer.pt"]
    for key, state in [("a//x.pt", small), ("a/dir/", small), ("/lead/big.pt", big), ("w//writer.pt", small)]:
        body = client.get_object(Bucket="exact", Key=key)["Body"].read()
        assert same(torch.load(io.BytesIO(body), weights_only=True), state), key

    # Objects put by boto3 under such keys are read back, not their normalised namesakes.
    client.put_object(Bucket="exact", Key="b//y.pt", Body=torch_bytes({"v": torch.ones(3)}))
    client.put_object(Bucket="exact", Key="b/y.pt", Body=torch_bytes({"v": torch.zeros(3)}))
    client.put_object(Bucket="exact", Key="b/z/", Body=torch_bytes({"v": torch.full((3,), 7.0)}))
    assert torch.equal(checkpoint.load("s3://exact/b//y.pt")["v"], torch.ones(3))
    assert torch.equal(checkpoint.load("s3://exact/b/y.pt")["v"], torch.zeros(3))
    with checkpoint.Reader("s3://exact/b/z/") as reader:
        assert torch.equal(torch.load(reader)["v"], torch.full((3,), 7.0))
    client.put_object(Bucket="exact", Key="b//big.pt", Body=torch_bytes(big))
    assert same(checkpoint.load("s3://exact/b//big.pt"), big)

    # The CLI's `ckpt save` and `ckpt load` too.
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 * MIB))
    ok(bucketload_bin, env, "ckpt", "save", str(src), "s3://exact/cli//src.bin")
    assert client.get_object(Bucket="exact", Key="cli//src.bin")["Body"].read() == src.read_bytes()
    client.put_object(Bucket="exact", Key="cli/tail/", Body=b"trailing slash")
    ok(bucketload_bin, env, "ckpt", "load", "s3://exact/cli/tail/", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == b"trailing slash"


def test_reader_and_writer_behave_as_files(env, s3):
    s3.create_bucket(Bucket="ckpt-io")
    with checkpoint.Writer("s3://ckpt-io/f.bin") as writer:
        assert writer.writable() and not writer.readable() and not writer.seekable()
        assert writer.write(b"0123") == 4 and writer.write(memoryview(b"456789")) == 6
        assert writer.tell() == 10
        with pytest.raises(io.UnsupportedOperation):
            writer.seek(0)
        with pytest.raises(io.UnsupportedOperation):
            writer.read()
    assert writer.closed and writer.saved["bytes"] == 10
    with pytest.raises(ValueError):
        writer.write(b"more")
    with pytest.raises(ValueError):
        writer.tell()

    reader = checkpoint.Reader("s3://ckpt-io/f.bin")
    assert reader.readable() and reader.seekable() and not reader.writable()
    assert reader.read(None) == b"0123456789" and reader.read() == b"" and reader.read(3) == b""
    for bad, error in [((1.5,), TypeError), ((0, 0.0), TypeError), ((-1,), ValueError), ((0, 3), ValueError),
                       ((-11, io.SEEK_END), OSError), ((-3, io.SEEK_CUR), OSError)]:
        reader.seek(2)
        with pytest.raises(error):
            reader.seek(*bad)
        assert reader.tell() == 2, bad  # a refused seek does not move
    assert reader.seek(-3, io.SEEK_END) == 7 and reader.read(2) == b"78"
    assert reader.seek(-4, io.SEEK_CUR) == 5 and reader.read(-1) == b"56789"
    assert reader.seek(20) == 20 and reader.read() == b""
    reader.seek(1)
    buf = bytearray(4)
    assert reader.readinto(buf) == 4 and buf == b"1234"
    assert reader.readinto(memoryview(buf)[1:3]) == 2 and buf == b"1564"
    reader.close()
    assert reader.closed
    for call in (reader.read, lambda: reader.readinto(bytearray(1)), lambda: reader.seek(0), reader.tell):
        with pytest.raises(ValueError):
            call()
