#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD

import io
import os
import random
from datetime import datetime

import boto3
import numpy as np
from PIL import Image
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


@pytest.fixture(scope="session")
def image_directory() -> BucketPrefixFixture:
    NUM_IMAGES = 10
    IMAGE_SIZE = 100
    return _create_image_directory_fixture(NUM_IMAGES, IMAGE_SIZE, "image_directory")


@pytest.fixture(scope="session")
def image_directory_for_dp() -> BucketPrefixFixture:
    """When conducting distributed training tests, be cautious about the number of files (images) in the test dataset.
    If the total number of images cannot be evenly divided by the number of workers,
    the DistributedSampler will duplicate a subset of the images across workers to ensure an equal
    distribution of data among all processes. This duplication of images will cause
    integration distributed training test to fail.
    """
    NUM_IMAGES = 36
    IMAGE_SIZE = 100
    return _create_image_directory_fixture(NUM_IMAGES, IMAGE_SIZE, "image_directory_dp")


def _create_image_directory_fixture(num_image: int, image_size: int, name: str):
    """Create a bucket/prefix fixture that contains a directory of random JPG image files."""
    fixture = get_test_bucket_prefix(name)
    for i in range(num_image):
        data = np.random.randint(0, 256, image_size * image_size * 3, np.uint8)
        data = data.reshape(image_size, image_size, 3)
        image = Image.fromarray(data, "RGB")
        image_bytes = io.BytesIO()
        image.save(image_bytes, "jpeg")
        image_bytes.seek(0)
        image_bytes = image_bytes.read()

        key = f"img{i:03d}.jpg"
        fixture.add(key, image_bytes)

    return fixture


@pytest.fixture
def checkpoint_directory(request) -> BucketPrefixFixture:
    return get_test_bucket_prefix(f"{request.node.name}-checkpoint_directory")


@pytest.fixture
def empty_directory(request) -> BucketPrefixFixture:
    return get_test_bucket_prefix(f"{request.node.name}-empty_directory")


# --- s3torchconnector/tst/conftest.py (v1.5.0), the reader_constructor fixtures ---

import pytest

from bucketload.s3torch.s3reader import (
    S3ReaderConstructor,
    S3ReaderConstructorProtocol,
    SequentialS3Reader,
    RangedS3Reader,
    DCPOptimizedS3Reader,
)

READER_TYPE_STRING_TO_CLASS = {
    "sequential": SequentialS3Reader,
    "range_based": RangedS3Reader,
    "dcp_optimized": DCPOptimizedS3Reader,
}

# Shared reader constructors for parametrized tests
# TODO: use this variable in test_distributed_training.py and test_multiprocess_dataloading.py
READER_CONSTRUCTORS = [
    ("sequential", S3ReaderConstructor.sequential()),
    ("range_based_with_buffer", S3ReaderConstructor.range_based()),
    ("range_based_no_buffer", S3ReaderConstructor.range_based(buffer_size=0)),
]

# Include dcp_optimized for DCP tests
DCP_READER_CONSTRUCTORS = READER_CONSTRUCTORS + [
    ("dcp_optimized", S3ReaderConstructor.dcp_optimized()),
]


@pytest.fixture(
    params=[constructor for _, constructor in READER_CONSTRUCTORS],
    ids=[name for name, _ in READER_CONSTRUCTORS],
    scope="module",
)
def reader_constructor(request) -> S3ReaderConstructorProtocol:
    """Provide reader constructor (partial(S3Reader)) instances for all supported reader types."""
    return request.param


@pytest.fixture(
    params=[constructor for _, constructor in DCP_READER_CONSTRUCTORS],
    ids=[name for name, _ in DCP_READER_CONSTRUCTORS],
    scope="module",
)
def dcp_reader_constructor(request) -> S3ReaderConstructorProtocol:
    """Provide reader constructor instances for DCP tests including dcp_optimized."""
    return request.param


# --- bucketload: the embedded server in place of CI_BUCKET on S3 (see README.md) ---

import multiprocessing
import socket

S3TORCH_E2E_BUCKET = "s3torch-e2e"

# Tests that need what the embedded server cannot stand in for (a public bucket on AWS) or the
# connector's internals (its CRT client's user agent); README.md lists them.
OUT_OF_SCOPE = {
    "test_unsigned_client": "reads the public bucket s3torchconnector-demo on AWS (no network here)",
    "test_s3mapdataset_user_agent": "reads the connector's CRT client (_client.user_agent_prefix)",
    "test_s3iterabledataset_user_agent": "reads the connector's CRT client (_client.user_agent_prefix)",
}


def free_port() -> int:
    """A TCP port free on loopback now, for a test's torch.distributed rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kept(item) -> bool:
    """The bounded subset of the multi-process grids (README.md: "What runs")."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = item.originalname
    if "start_method" not in params:
        return True
    constructor = params["reader_constructor"]
    reader = S3ReaderConstructor.get_reader_type_string(constructor)
    unbuffered = getattr(constructor, "keywords", {}).get("buffer_size") == 0
    start = params["start_method"]
    builder = params["dataset_builder"].__name__
    if name == "test_distributed_training":
        return _kept_distributed(params, start, builder, reader, unbuffered)
    if start == "fork" or name == "test_s3iterable_dataset_multiprocess_torchdata":
        # every dataset builder and reader; torchdata's datapipes with every start method (a
        # spawned worker receives the datapipe graph pickled by torch, not by multiprocessing)
        return True
    # spawn, once per dataset (forkserver: as fork, once started)
    return start == "spawn" and reader == "sequential" and (
        (name == "test_s3iterable_dataset_multiprocess" and builder == "from_prefix")
        or (name == "test_s3mapdataset_multiprocess" and builder == "from_objects"))


def _kept_distributed(params, start, builder, reader, unbuffered) -> bool:
    ranks, workers = params["num_processes"], params["num_workers"]
    iterable = params["dataloader_builder"].__name__ == "dataloader_for_iterable"
    if start == "spawn":
        # 3 spawned ranks, the iterable dataset (its rank comes from the process group).
        return (iterable and builder == "from_prefix" and reader == "sequential"
                and ranks == 3 and workers == 1)
    return start == "fork"  # the whole grid: forked ranks start in well under a second


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    deselected = []
    for item in list(items):
        if not str(item.fspath).startswith(here):
            continue
        reason = OUT_OF_SCOPE.get(item.originalname)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif not _kept(item):
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if i not in deselected]


@pytest.fixture(scope="session", autouse=True)
def s3torch_e2e_environment(server, s3):
    """CI_BUCKET/CI_PREFIX/CI_REGION and the AWS variables, so the connector's fixtures (boto3)
    and the datasets (bucketload) reach `bucketload serve` on loopback (the suite's `server`)."""
    s3.create_bucket(Bucket=S3TORCH_E2E_BUCKET)
    saved = dict(os.environ)
    os.environ.update(server.env())
    os.environ.update(CI_BUCKET=S3TORCH_E2E_BUCKET, CI_PREFIX="e2e/", CI_REGION="us-east-1")
    yield saved
    _restore(saved)


def _restore(environ: dict) -> None:
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture(scope="package", autouse=True)
def s3torch_e2e_restore(s3torch_e2e_environment):
    """Leaves the process as the package found it: the environment (the session fixture above
    outlives the package) and the start method the tests set with force=True."""
    method = multiprocessing.get_start_method(allow_none=True)
    yield
    multiprocessing.set_start_method(method, force=True)
    _restore(s3torch_e2e_environment)
