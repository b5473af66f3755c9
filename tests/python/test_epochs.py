"""Epochs and resumable state through DataLoader workers, against a real `bucketload serve`.

A DataLoader with ``persistent_workers=False`` (the default) makes new copies of the dataset
every epoch: each epoch must still read a new permutation (and new augmentations), and
``loader.epoch`` must move, under fork and spawn, persistent or not, for ``bucketload.Loader``
and ``S3IterableDataset(shuffle=True)``. torchdata's ``StatefulDataLoader`` resumes mid-epoch
through workers with nothing repeated or skipped; a plain DataLoader's ``state_dict()`` in the
parent raises rather than return an empty state."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import bucketload
from bucketload.s3torch import S3IterableDataset

from test_cli_dataset import ok
from test_package import SAMPLES, env  # noqa: F401  (a fixture)

EPOCHS = 3
SETUPS = [("fork", False), ("fork", True), ("spawn", False), ("spawn", True)]
IDS = ["fork-fresh", "fork-persistent", "spawn-fresh", "spawn-persistent"]


@pytest.fixture(scope="module")
def dataset(bucketload_bin, env, s3):  # noqa: F811
    """40 JPEGs in 4 class folders: their URI, bucket and the keys boto3 lists."""
    bucket = "epochs-data"
    s3.create_bucket(Bucket=bucket)
    ok(bucketload_bin, env, "gen", f"s3://{bucket}/train", "--samples", str(SAMPLES), "--classes",
       "4", "--size", "2KB", "--seed", "5")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="train/")["Contents"])
    assert len(keys) == SAMPLES
    return f"s3://{bucket}/train", bucket, keys


def _keep(item):
    return item


def _loader(uri: str, **kw) -> bucketload.Loader:
    return bucketload.Loader(uri, batch_size=4, image_size=8, shuffle=True, seed=7,
                             return_indices=True, **kw)


def _indices(batches) -> list[int]:
    return [i for batch in batches for i in batch[2].tolist()]


def _epoch_order(uri: str, epoch: int) -> list[int]:
    """Epoch ``epoch`` read in this process."""
    data = _loader(uri)
    data.set_epoch(epoch)
    return _indices(data)


@pytest.mark.parametrize("context,persistent", SETUPS, ids=IDS)
def test_loader_epochs_advance_through_workers(dataset, context, persistent):  # noqa: F811
    uri = dataset[0]
    data = _loader(uri)
    loader = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context=context,
                        persistent_workers=persistent)
    epochs = []
    for _ in range(EPOCHS):
        epochs.append(_indices(loader))
    for order in epochs:
        assert sorted(order) == list(range(SAMPLES))  # every sample exactly once per epoch
    assert len({tuple(order) for order in epochs}) == EPOCHS  # a new order every epoch
    assert data.epoch == EPOCHS
    # set_epoch in the parent reaches the workers, persistent or new.
    data.set_epoch(1)
    assert _indices(loader) == epochs[1]
    assert data.epoch == 2


@pytest.mark.parametrize("context,persistent", SETUPS, ids=IDS)
def test_s3iterabledataset_shuffle_epochs_advance_through_workers(dataset, context,  # noqa: F811
                                                                  persistent):
    uri, _, keys = dataset
    data = S3IterableDataset(uri, shuffle=True, seed=3, enable_sharding=True,
                             transform=operator.attrgetter("key"))
    loader = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context=context,
                        persistent_workers=persistent, collate_fn=_keep)
    epochs = [list(loader) for _ in range(EPOCHS)]
    for order in epochs:
        assert sorted(order) == keys
    assert len({tuple(order) for order in epochs}) == EPOCHS


def test_workers_of_different_dataloaders_agree_on_the_epoch(dataset):  # noqa: F811
    """Two workers, then three: every worker of one iteration reads the same epoch."""
    uri = dataset[0]
    data = _loader(uri)
    for workers in (2, 3, 1):
        loader = DataLoader(data, batch_size=None, num_workers=workers,
                            multiprocessing_context="fork")
        assert sorted(_indices(loader)) == list(range(SAMPLES))
    assert data.epoch == 3


def test_direct_iteration_moves_to_the_next_epoch_even_when_left_early(dataset):  # noqa: F811
    uri = dataset[0]
    data = _loader(uri)
    first = next(iter(data))[2].tolist()
    assert data.epoch == 1
    whole_next = _indices(data)
    assert sorted(whole_next) == list(range(SAMPLES))
    assert whole_next == _epoch_order(uri, 1)
    assert whole_next[:4] != first


def test_plain_dataloader_state_dict_mid_epoch_raises(dataset):  # noqa: F811
    data = _loader(dataset[0])
    loader = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    next(it)
    with pytest.raises(bucketload.ConfigError, match="StatefulDataLoader"):
        data.state_dict()
    del it
    # At an epoch's end the state is the next epoch's start, and it works.
    for _ in loader:
        pass
    assert data.state_dict() == {"epoch": 2, "state": None}


def _stateful(data, context: str, workers: int) -> StatefulDataLoader:
    kwargs = {"multiprocessing_context": context} if workers else {}
    return StatefulDataLoader(data, batch_size=None, num_workers=workers, **kwargs)


@pytest.mark.parametrize("context,workers", [("fork", 0), ("fork", 2), ("spawn", 2),
                                             ("spawn", 3)])
def test_stateful_dataloader_resumes_mid_epoch(dataset, context, workers):  # noqa: F811
    uri = dataset[0]
    whole = _indices(_stateful(_loader(uri), context, workers))
    assert sorted(whole) == list(range(SAMPLES))

    data = _loader(uri)
    loader = _stateful(data, context, workers)
    it = iter(loader)
    seen = _indices(next(it) for _ in range(4))
    state = loader.state_dict()
    del it, loader

    again = _stateful(_loader(uri), context, workers)
    again.load_state_dict(state)
    rest = _indices(again)
    assert len(seen) + len(rest) == SAMPLES  # nothing repeated, nothing skipped
    assert seen + rest == whole  # and in the uninterrupted order
    # The epoch after the resumed one is the next epoch, in every worker.
    following = _indices(again)
    assert sorted(following) == list(range(SAMPLES)) and following != whole


def test_stateful_dataloader_state_at_an_epoch_end_starts_the_next(dataset):  # noqa: F811
    uri = dataset[0]
    loader = _stateful(_loader(uri), "fork", 2)
    first = _indices(loader)
    state = loader.state_dict()
    again = _stateful(_loader(uri), "fork", 2)
    again.load_state_dict(state)
    second = _indices(again)
    assert sorted(second) == list(range(SAMPLES)) and second != first
    assert torch.tensor(second).unique().numel() == SAMPLES


def _datapipe_loader(data, context: str, sharding: bool) -> DataLoader:
    """``data`` inside torchdata's ``IterableWrapper`` (which deep-copies it at every
    iteration), behind a ``sharding_filter`` when the dataset yields everything in every
    worker, read by two workers started by ``context``."""
    from torchdata.datapipes.iter import IterableWrapper

    pipe = IterableWrapper(data)
    if sharding:
        pipe = pipe.sharding_filter()
    return DataLoader(pipe, batch_size=None, num_workers=2, multiprocessing_context=context,
                      collate_fn=_keep)


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_s3iterabledataset_in_torchdata_sharding_filter(dataset, context):  # noqa: F811
    """The connector's torchdata pattern with spawn and forkserver workers: every epoch reads
    every object once and a new permutation, and the dataset's epoch moves."""
    uri, _, keys = dataset
    data = S3IterableDataset.from_prefix(uri + "/", shuffle=True, seed=3,
                                         transform=operator.attrgetter("key"))
    loader = _datapipe_loader(data, context, sharding=True)
    epochs = [list(loader) for _ in range(EPOCHS)]
    for order in epochs:
        assert sorted(order) == keys
    assert len({tuple(order) for order in epochs}) == EPOCHS
    assert data._epochs.next() == EPOCHS


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_s3mapdataset_in_torchdata_sharding_filter(dataset, context):  # noqa: F811
    from bucketload.s3torch import S3MapDataset

    uri, _, keys = dataset
    data = S3MapDataset.from_prefix(uri + "/", transform=operator.attrgetter("key"))
    loader = _datapipe_loader(data, context, sharding=True)
    assert sorted(loader) == keys


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_loader_in_torchdata_iterable_wrapper(dataset, context):  # noqa: F811
    """``Loader`` shares its samples among DataLoader workers itself: wrapped as it is, each
    epoch still reads every sample once, in a new order, and ``loader.epoch`` moves."""
    uri = dataset[0]
    data = _loader(uri)
    loader = _datapipe_loader(data, context, sharding=False)
    epochs = [_indices(loader) for _ in range(EPOCHS)]
    for order in epochs:
        assert sorted(order) == list(range(SAMPLES))
    assert len({tuple(order) for order in epochs}) == EPOCHS
    assert data.epoch == EPOCHS


def test_torchdata_copies_in_one_process_move_the_epoch(dataset):  # noqa: F811
    """``IterableWrapper`` iterates a deep copy of the dataset: without workers too, each
    iteration reads the next epoch."""
    from torchdata.datapipes.iter import IterableWrapper

    uri, _, keys = dataset
    data = S3IterableDataset.from_prefix(uri + "/", shuffle=True, seed=3,
                                         transform=operator.attrgetter("key"))
    pipe = IterableWrapper(data)
    epochs = [list(pipe) for _ in range(EPOCHS)]
    assert all(sorted(order) == keys for order in epochs)
    assert len({tuple(order) for order in epochs}) == EPOCHS
    assert data._epochs.next() == EPOCHS


@pytest.fixture(scope="module")
def other_dataset(bucketload_bin, env, s3):  # noqa: F811
    """Another dataset (12 JPEGs), whose states must not resume the first."""
    s3.create_bucket(Bucket="epochs-other")
    ok(bucketload_bin, env, "gen", "s3://epochs-other/train", "--samples", "12", "--classes", "2",
       "--size", "2KB", "--seed", "6")
    return "s3://epochs-other/train"


def _mid_epoch_state(data: bucketload.Loader) -> dict:
    it = iter(data)
    next(it)
    return data.state_dict()


def test_bad_states_raise_config_errors_naming_what_is_wrong(dataset, other_dataset):  # noqa: F811
    uri = dataset[0]
    good = _mid_epoch_state(_loader(uri))
    assert good["epoch"] == 0 and isinstance(good["state"], str)
    inner = good["state"]
    later = _loader(uri)
    later.set_epoch(2)
    bad = [
        ({}, "no 'epoch', no 'state'"),
        ({"epoch": 0}, "no 'state'"),
        ({"state": None}, "no 'epoch'"),
        ({"epoch": 0, "state": None, "rank": 1}, "unknown key 'rank'"),
        (None, "a NoneType, not a dict"),
        ([0, None], "a list, not a dict"),
        ({"epoch": "1", "state": None}, "'epoch' is '1'"),
        ({"epoch": True, "state": None}, "'epoch' is True"),
        ({"epoch": 1.0, "state": None}, "'epoch' is 1.0"),
        ({"epoch": -1, "state": None}, "'epoch' is -1"),
        ({"epoch": 0, "state": 7}, "'state' is a int"),
        ({"epoch": 0, "state": "{not json"}, "'state' is not the loader's state"),
        ({"epoch": 0, "state": "{}"}, "'state' was taken in epoch None"),
        ({"epoch": 1, "state": inner}, "'epoch' is 1 but 'state' was taken in epoch 0"),
        ({"epoch": 0, "state": inner.replace('"epoch":0', '"epoch":0,"version":"x"')},
         "not a loader state"),
        (_mid_epoch_state(_loader(other_dataset)), "plan"),
        (good, "seed|order|shuffle"),  # loaded into a loader of another seed, below
    ]
    for n, (state, words) in enumerate(bad):
        target = _loader(uri) if n < len(bad) - 1 else bucketload.Loader(
            uri, batch_size=4, image_size=8, shuffle=True, seed=8, return_indices=True)
        before = target.state_dict()
        with pytest.raises(bucketload.ConfigError, match=words) as caught:
            target.load_state_dict(state)
        assert isinstance(caught.value, ValueError)
        assert target.state_dict() == before, n  # nothing changed
    # The good state still resumes, also after the refusals.
    again = _loader(uri)
    again.load_state_dict(good)
    assert len(_indices(again)) == SAMPLES - 4


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_several_datasets_in_one_worker_start(dataset, context):
    """Two datasets (and one of them twice) handed to the same spawned workers: each epoch
    counter reaches them, and each moves."""
    from torch.utils.data import ChainDataset

    uri, _, keys = dataset
    first = S3IterableDataset(uri, shuffle=True, seed=3, enable_sharding=True,
                              transform=operator.attrgetter("key"))
    second = S3IterableDataset(uri, shuffle=True, seed=4, enable_sharding=True,
                               transform=operator.attrgetter("key"))
    loader = DataLoader(ChainDataset([first, second, first]), batch_size=None, num_workers=2,
                        multiprocessing_context=context, collate_fn=_keep)
    epochs = [list(loader) for _ in range(2)]
    for order in epochs:
        assert sorted(order) == sorted(keys * 3)
    assert epochs[0] != epochs[1]
    assert first._epochs.next() >= 2 and second._epochs.next() == 2
