#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD

import os
import random
import uuid
from datetime import datetime

import boto3
import pytest

SESSION_DATETIME = datetime.now().strftime("%Y%m%dT%H%M%S")


def getenv(var: str, optional: bool = False) -> str:
    v = os.getenv(var)
    if v is None and not optional:
        raise Exception(f"Required environment variable {var} is not set")
    return v


class BucketPrefixData(object):
    """An S3 bucket/prefix and its contents for use in a single unit test. The prefix will be unique
    to this instance, so other concurrent tests won't affect its state."""

    region: str
    bucket: str
    prefix: str
    storage_class: str = None
    contents: dict
    profile_arn: str = None
    profile_bucket: str = None

    def __init__(
        self,
        region: str,
        bucket: str,
        prefix: str,
        storage_class: str = None,
        contents: dict = None,
        profile_arn: str = None,
        profile_bucket: str = None,
    ):
        self.bucket = bucket
        self.prefix = prefix
        self.region = region
        self.storage_class = storage_class
        self.contents = contents or {}
        self.profile_arn = profile_arn
        self.profile_bucket = profile_bucket

    @property
    def s3_uri(self):
        return f"s3://{self.bucket}/{self.prefix}"

    def is_express_storage(self):
        return self.storage_class == "EXPRESS_ONEZONE"

    def __getitem__(self, index):
        return self.contents[index]

    def __iter__(self):
        return iter(self.contents)


class BucketPrefixFixture(BucketPrefixData):
    """An S3 bucket/prefix and its contents for use in a single unit test. The prefix will be unique
    to this instance, so other concurrent tests won't affect its state."""

    def __init__(
        self,
        region: str,
        bucket: str,
        prefix: str,
        storage_class: str = None,
        profile_arn: str = None,
        profile_bucket: str = None,
    ):
        super().__init__(
            region,
            bucket,
            prefix,
            storage_class,
            profile_arn=profile_arn,
            profile_bucket=profile_bucket,
        )
        session = boto3.Session(region_name=region)
        self.s3 = session.client("s3")

    def add(self, key: str, contents: bytes, **kwargs):
        """Upload an S3 object to this prefix of the bucket."""
        full_key = f"{self.prefix}{key}"
        self.s3.put_object(Bucket=self.bucket, Key=full_key, Body=contents, **kwargs)
        self.contents[full_key] = contents

    def get_data_snapshot(self):
        """Returns a read-only copy of the current instance's data.

        The returned object cannot modify the actual S3 bucket.
        Useful when passing data to another process without serializing s3 client
        """
        return BucketPrefixData(
            self.region,
            self.bucket,
            self.prefix,
            self.storage_class,
            self.contents,
            self.profile_arn,
            self.profile_bucket,
        )


def get_test_bucket_prefix(name: str) -> BucketPrefixFixture:
    """Create a new bucket/prefix fixture for the given test name."""
    bucket = getenv("CI_BUCKET")
    prefix = getenv("CI_PREFIX")
    region = getenv("CI_REGION")
    storage_class = getenv("CI_STORAGE_CLASS", optional=True)
    profile_arn = getenv("CI_PROFILE_ROLE", optional=True)
    profile_bucket = getenv("CI_PROFILE_BUCKET", optional=True)
    assert prefix == "" or prefix.endswith("/")

    nonce = random.randrange(2**64)
    prefix = f"{prefix}{name}/{SESSION_DATETIME}-{nonce}/"

    return BucketPrefixFixture(
        region, bucket, prefix, storage_class, profile_arn, profile_bucket
    )


@pytest.fixture
def checkpoint_directory(request) -> BucketPrefixFixture:
    return get_test_bucket_prefix(f"{request.node.name}-checkpoint_directory")


@pytest.fixture
def empty_directory(request) -> BucketPrefixFixture:
    return get_test_bucket_prefix(f"{request.node.name}-empty_directory")


# From the connector's tst/conftest.py: the reader constructors DCP tests are run with.
# bucketload.s3torch accepts them and reads with its own reader; without S3ReaderConstructor
# in bucketload.s3torch, the default (None) is the only one.
try:
    from bucketload.s3torch import S3ReaderConstructor
except ImportError:
    DCP_READER_CONSTRUCTORS = [("default", None)]
else:
    DCP_READER_CONSTRUCTORS = [("dcp_optimized", S3ReaderConstructor.dcp_optimized())]


@pytest.fixture(
    params=[constructor for _, constructor in DCP_READER_CONSTRUCTORS],
    ids=[name for name, _ in DCP_READER_CONSTRUCTORS],
    scope="module",
)
def dcp_reader_constructor(request):
    """Provide reader constructor instances for DCP tests including dcp_optimized."""
    return request.param


# bucketload: the connector's CI variables and the AWS environment (boto3 and bucketload
# alike) point at `bucketload serve` on loopback (tests/python/conftest.py's server), one
# fresh bucket for this package's tests; restored afterwards.
@pytest.fixture(scope="package", autouse=True)
def embedded_s3(server, s3):
    bucket = f"s3torch-e2e-ckpt-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.update(CI_BUCKET=bucket, CI_PREFIX="e2e/", CI_REGION="us-east-1")
    yield bucket
    os.environ.clear()
    os.environ.update(saved)


# bucketload: the multi-process DCP tests rendezvous on `generate_random_port() + port_offset`,
# a random port in 10000-45500, much of which is the kernel's ephemeral range (32768-60999);
# on a machine with many open connections it is sometimes taken. Here the rendezvous port is
# one the kernel reports free: generate_random_port returns it minus the test's port_offset.
@pytest.fixture(autouse=True)
def free_rendezvous_port(request, monkeypatch):
    callspec = getattr(request.node, "callspec", None)
    offset = callspec.params.get("port_offset") if callspec else None
    if offset is None:
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(request.module, "generate_random_port", lambda: port - offset)
