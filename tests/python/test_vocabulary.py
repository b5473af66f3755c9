"""The Python package reads sizes and checkpoint URIs exactly as the CLI and the engine do."""

from __future__ import annotations

import pytest

import bucketload
from bucketload import _native, _util


@pytest.mark.parametrize(("text", "expected"), [
    ("1.5G", 1_500_000_000),   # G is 10^9, as --cache-size reads it
    ("1K", 1_000),
    ("256MB", 256_000_000),
    ("20GiB", 20 << 30),
    ("64 mib", 64 << 20),
    ("4096", 4096),
])
def test_sizes_read_as_the_cli_reads_them(text: str, expected: int) -> None:
    assert _util.parse_size(text) == expected
    assert _util.parse_size(expected) == expected


def test_a_size_that_is_not_one_is_a_config_error() -> None:
    for bad in ("lots", "12 parsecs", "", "-1G"):
        with pytest.raises(bucketload.ConfigError, match="not a size"):
            _util.parse_size(bad)
    with pytest.raises(ValueError):
        _util.parse_size(-1)


def test_the_default_cache_size_is_the_engines() -> None:
    assert _native.DEFAULT_CACHE_SIZE == 20 << 30


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://b/run/step-1.pt", ("s3://b/run", "step-1.pt")),
    ("s3://b/a//x.pt", ("s3://b/a", "/x.pt")),   # the key is the URI's, byte for byte
    ("s3://b/a/x/", ("s3://b/a", "x/")),
    ("s3://b/x.pt", ("s3://b", "x.pt")),
    ("/x.pt", ("/", "x.pt")),
])
def test_checkpoint_uris_split_as_the_engine_splits_them(uri: str, expected: tuple[str, str]) -> None:
    # The checkpoint API's splitter is the engine's: prefix + "/" + name is the URI again.
    assert _native.split_uri(uri) == expected
    prefix, name = expected
    assert f"{prefix.rstrip('/')}/{name}" == uri or prefix == "/"


@pytest.mark.parametrize("uri", ["s3://b", "s3://b/", "gs://bucket"])
def test_a_uri_naming_no_object_is_a_config_error(uri: str) -> None:
    with pytest.raises(bucketload.ConfigError, match="names no object"):
        _native.split_uri(uri)
