"""Keys exactly as written, on every path: a table of keys (every printable ASCII character in
a folder and a file name, unicode, ``//``, a leading and a trailing ``/``, control
characters, ``.`` and ``..`` segments) written and read by every API, against the embedded
server and moto's server, checked with boto3 both ways: what bucketload writes boto3 reads at
the same key, and what boto3 writes bucketload reads. Both servers, like S3 and boto3, take
``a/../b`` as a literal key."""

from __future__ import annotations

import io
import json
import os
import string

import pytest
import torch
from conftest import make_client
from test_cli_dataset import moto, ok, run  # noqa: F401  (moto is a fixture)

from bucketload import checkpoint
from bucketload.s3torch import S3Checkpoint, S3MapDataset

# Keys with `.` and `..` segments, which HTTP clients that resolve URLs would send as others.
DOTS = ["dots/./x.pt", "dots/../x.pt", "dots/..", "x/.", "..", "./lead.pt"]

# Every printable ASCII character but `/` in a folder and in a file name (item: the folder
# was percent-encoded), unicode, and the keys object_store's paths cannot spell.
KEYS = (
    [f"chars/d{c}x/f{c}y.pt" for c in string.printable[:95] if c != "/"]
    + [
        "uni/ü/ck.pt",
        "uni/日本語/ファイル.pt",
        "uni/😀/x.pt",
        "a//b.pt",
        "/lead.pt",
        "//twice/x.pt",
        "trail/",
        "tab/x\ty.pt",
        "cr/x\ry.pt",
        "nl/x\ny.pt",
        "ctl/\x01\x1f.pt",
        "del/x\x7f.pt",
        "pct/%C3%BC/x.pt",
    ]
    + DOTS
)


def body(key: str) -> bytes:
    return b"key:" + key.encode()


@pytest.fixture(params=["bucketload", "moto"])
def target(request, server):
    """``(boto3 client, fresh bucket, env, keys)`` on the embedded server or moto's, with this
    process's AWS environment pointing at it; ``keys``: the table less what the server cannot
    store (moto's answers 404 to any request for a key holding a line feed, boto3's too)."""
    if request.param == "bucketload":
        env, client = server.env(), make_client(server.endpoint)
    else:
        endpoint, env = request.getfixturevalue("moto")
        client = make_client(endpoint, key="moto", secret="moto")
    bucket = f"keys-{os.urandom(6).hex()}"
    client.create_bucket(Bucket=bucket)
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    keys = [k for k in KEYS if request.param == "bucketload" or "\n" not in k]
    yield client, bucket, env, keys
    os.environ.clear()
    os.environ.update(saved)


def stored(client, bucket: str, prefix: str = "") -> set[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"] for p in pages for o in p.get("Contents", [])}


def read(client, bucket: str, key: str) -> bytes:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_checkpoints_write_and_read_every_key_as_written(target):
    client, bucket, _, keys = target
    for key in keys:
        state = {"key": key}
        checkpoint.save(state, f"s3://{bucket}/w/{key}")
        assert torch.load(io.BytesIO(read(client, bucket, f"w/{key}")))["key"] == key
        client.put_object(Bucket=bucket, Key=f"r/{key}", Body=torch_bytes({"from": key}))
        assert checkpoint.load(f"s3://{bucket}/r/{key}")["from"] == key
    assert stored(client, bucket, "w/") == {f"w/{k}" for k in keys}


def test_a_background_save_and_the_writer_keep_the_key(target):
    client, bucket, _, _ = target
    for key in ["uni/ü/bg.pt", "a//bg.pt", "tab/x\tbg.pt"]:
        checkpoint.save({"k": key}, f"s3://{bucket}/{key}", background=True).wait()
        assert torch.load(io.BytesIO(read(client, bucket, key)))["k"] == key
        with checkpoint.Writer(f"s3://{bucket}/wr/{key}") as writer:
            writer.write(body(key))
        assert read(client, bucket, f"wr/{key}") == body(key)
        with checkpoint.Reader(f"s3://{bucket}/wr/{key}") as reader:
            assert reader.read() == body(key)


def test_the_connector_checkpoint_writes_and_reads_every_key(target):
    client, bucket, _, keys = target
    ckpt = S3Checkpoint(region="us-east-1")
    for key in keys:
        with ckpt.writer(f"s3://{bucket}/w/{key}") as writer:
            writer.write(body(key))
        assert read(client, bucket, f"w/{key}") == body(key)
        client.put_object(Bucket=bucket, Key=f"r/{key}", Body=body(key))
        with ckpt.reader(f"s3://{bucket}/r/{key}") as reader:
            assert reader.read() == body(key)


def test_the_map_dataset_reads_every_key_boto3_wrote(target):
    client, bucket, _, keys = target
    for key in keys:
        if not key.endswith("/"):  # a folder marker is no object of a dataset
            client.put_object(Bucket=bucket, Key=key, Body=body(key))
    objects = [k for k in keys if not k.endswith("/")]
    dataset = S3MapDataset.from_objects([f"s3://{bucket}/{k}" for k in objects], region="us-east-1")
    assert [(r.key, r.read()) for r in dataset] == [(k, body(k)) for k in objects]
    # A folder listed: the keys as stored (chars/d%x/… stays itself).
    listed = S3MapDataset.from_prefix(f"s3://{bucket}/uni/", region="us-east-1")
    assert sorted((r.key, r.read()) for r in listed) == sorted(
        (k, body(k)) for k in objects if k.startswith("uni/"))


def test_dot_segments_are_literal_keys(target):
    """`a/../b` is its own key, never `b`: bucketload writes and reads exactly it, below a
    prefix with such segments too."""
    client, bucket, _, _ = target
    for key in DOTS:
        checkpoint.save({"k": key}, f"s3://{bucket}/{key}")
        assert torch.load(io.BytesIO(read(client, bucket, key)))["k"] == key
    assert stored(client, bucket) == set(DOTS)
    ckpt = S3Checkpoint(region="us-east-1")
    for key in DOTS:
        client.put_object(Bucket=bucket, Key=f"up/../{key}", Body=body(key))
        with ckpt.reader(f"s3://{bucket}/up/../{key}") as reader:
            assert reader.read() == body(key)
    assert stored(client, bucket, "up/") == {f"up/../{k}" for k in DOTS}


def test_a_missing_object_is_named_by_its_own_key(target):
    _, bucket, _, _ = target
    with pytest.raises(FileNotFoundError, match=rf"s3://{bucket}/nope//a\.pt\b") as err:
        checkpoint.load(f"s3://{bucket}/nope//a.pt")
    assert "nope/nope" not in str(err.value)


def test_the_cli_copies_generates_and_lists_keys_as_written(target, bucketload_bin, tmp_path):
    client, bucket, env, _ = target
    for key in ["uni/ü/ck.pt", "chars/d#x/f%y.pt", "chars/d~x/f[y].pt", "a//b.pt", "tab/x\ty.pt",
                "dots/../x.pt"]:
        src = tmp_path / "src.bin"
        src.write_bytes(body(key))
        ok(bucketload_bin, env, "cp", str(src), f"s3://{bucket}/up/{key}")
        assert read(client, bucket, f"up/{key}") == body(key)
        client.put_object(Bucket=bucket, Key=f"down/{key}", Body=body(key))
        dst = tmp_path / "dst.bin"
        ok(bucketload_bin, env, "cp", f"s3://{bucket}/down/{key}", str(dst))
        assert dst.read_bytes() == body(key)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/gü#~/train", "--samples", "4", "--classes", "2",
       "--size", "2KB")
    made = stored(client, bucket, "g")
    assert len(made) == 4 and all(k.startswith("gü#~/train/") for k in made), made
    listed = ok(bucketload_bin, env, "ls", "--recursive", f"s3://{bucket}/up/uni/")
    assert "ü/ck.pt" in listed and "%C3" not in listed


def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_dcp_saves_and_loads_below_folders_as_written(target):
    import torch.distributed.checkpoint as dcp

    from bucketload.s3torch.dcp import S3StorageReader, S3StorageWriter

    client, bucket, _, _ = target
    state = {"w": torch.arange(6.0), "b": torch.ones(2)}
    for folder in ["dcp/ü#~[x]/ck", "dcp/a//ck", "/dcp/lead", "dcp/tab\tx"]:
        uri = f"s3://{bucket}/{folder}"
        dcp.save(state, storage_writer=S3StorageWriter("us-east-1", uri))
        assert stored(client, bucket, folder + "/") == {f"{folder}/.metadata", f"{folder}/__0_0.distcp"}
        back = {k: torch.zeros_like(v) for k, v in state.items()}
        dcp.load(back, storage_reader=S3StorageReader("us-east-1", uri))
        assert all(torch.equal(back[k], state[k]) for k in state), folder


def test_the_loader_reads_files_below_a_folder_as_written(target):
    import bucketload

    client, bucket, _, _ = target
    root = "ld/ü #~[]{}^|<>\"\\*%41.d"
    names = [f"f{c}x.bin" for c in string.printable[:95] if c not in "/."]
    # Keys object_store's paths cannot spell are samples too, read as boto3 reads them.
    names += ["a//b.bin", "t\tb.bin", "up/../u.bin", "/lead.bin"]
    for name in names:
        client.put_object(Bucket=bucket, Key=f"{root}/cls/{name}", Body=body(name))
    for marker in ["", "cls/", "cls/x/"]:  # folder markers: folders, never samples
        client.put_object(Bucket=bucket, Key=f"{root}/{marker}", Body=b"")
    objects = {k[len(root) + 1:] for k in stored(client, bucket, root + "/") if not k.endswith("/")}
    samples = [s for b in bucketload.Loader(f"s3://{bucket}/{root}", decode=False, batch_size=200)
               for s in b]
    got = {s["__key__"]: bytes(s["bin"]) for s in samples}
    assert got == {f"cls/{n}": body(n) for n in names}
    assert set(got) == objects


def test_the_engine_reads_a_folder_with_keys_paths_cannot_spell(target, bucketload_bin):
    """A files manifest keeps `a//b`, a tab and a `..` segment as written, and the Loader reads
    the folder through it, as S3IterableDataset.from_prefix (which lists it) does."""
    import bucketload
    from bucketload.s3torch import S3IterableDataset

    client, bucket, env, _ = target
    names = ["c/a.bin", "c//b.bin", "c/t\tb.bin", "c/up/../u.bin"]
    for name in names:
        client.put_object(Bucket=bucket, Key=f"eng/{name}", Body=body(name))
    client.put_object(Bucket=bucket, Key="eng/c/", Body=b"")
    want = sorted((n, body(n)) for n in names)
    assert want == sorted((k[4:], read(client, bucket, k)) for k in stored(client, bucket, "eng/")
                          if not k.endswith("/"))
    dataset = S3IterableDataset.from_prefix(f"s3://{bucket}/eng/", region="us-east-1")
    assert sorted((r.key[4:], r.read()) for r in dataset if not r.key.endswith("/")) == want
    # Format 1, JSON, read here by boto3; the Loader reads it as it reads format 2.
    ok(bucketload_bin, env, "manifest", f"s3://{bucket}/eng", "--manifest-format", "1")
    manifest = json.loads(read(client, bucket, "eng/_bucketload/manifest.json"))
    assert sorted(f["key"] for f in manifest["files"]) == sorted(names)
    loader = bucketload.Loader(f"s3://{bucket}/eng", decode=False, batch_size=10)
    got = sorted((s["__key__"], bytes(s["bin"])) for b in loader for s in b)
    assert got == want