"""Weighted mixtures of datasets through ``bucketload.Loader``, against a real `bucketload serve`:
proportions, the dataset of each index, per-dataset epochs, and resume through ``state_dict``
and torchdata's ``StatefulDataLoader``."""

from __future__ import annotations

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

import bucketload

from test_cli_dataset import ok
from test_package import env  # noqa: F401  (a fixture)

LARGE, SMALL = 60, 20
SHIFT = 56


@pytest.fixture(scope="module")
def datasets(bucketload_bin, env, s3):  # noqa: F811
    """A large and a small set of JPEGs: their URIs."""
    bucket = "mix-data"
    s3.create_bucket(Bucket=bucket)
    uris = []
    for name, n in (("large", LARGE), ("small", SMALL)):
        ok(bucketload_bin, env, "gen", f"s3://{bucket}/{name}", "--samples", str(n),
           "--classes", "2", "--size", "1KB", "--seed", "3")
        uris.append(f"s3://{bucket}/{name}")
    return uris


def _mix(uris: list[str], **kw) -> bucketload.Loader:
    kw.setdefault("samples_per_epoch", 1280)
    kw.setdefault("seed", 4)
    return bucketload.Loader(uris, weights=[0.7, 0.3], batch_size=64, image_size=8,
                             return_indices=True, **kw)


def _indices(batches) -> list[int]:
    return [i for batch in batches for i in batch[2].tolist()]


def test_the_mixture_holds_the_weights_and_says_where_each_image_is_from(datasets):
    data = _mix(datasets)
    assert len(data) == 1280 // 64
    order = _indices(data)
    assert len(order) == 1280
    dataset = [i >> SHIFT for i in order]
    # Ten whole blocks of 128 draws: exactly the weights.
    assert (dataset.count(0), dataset.count(1)) == (896, 384)
    local = [(d, i & ((1 << SHIFT) - 1)) for d, i in zip(dataset, order)]
    small = [i for d, i in local if d == 1]
    assert all(0 <= i < LARGE for d, i in local if d == 0)
    # The small set repeats, each epoch of it in a new order.
    epochs = [small[k:k + SMALL] for k in range(0, 380, SMALL)]
    assert all(sorted(e) == list(range(SMALL)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == len(epochs)
    # The same seed gives the same mixture; another seed another.
    assert _indices(_mix(datasets)) == order
    assert _indices(_mix(datasets, seed=5)) != order


def test_state_dict_resumes_a_mixture_mid_epoch(datasets):
    whole = _indices(_mix(datasets))
    data = _mix(datasets)
    it = iter(data)
    seen = _indices(next(it) for _ in range(7))
    state = data.state_dict()
    del it
    again = _mix(datasets)
    again.load_state_dict(state)
    rest = _indices(again)
    assert seen + rest == whole  # nothing repeated, nothing skipped


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_stateful_dataloader_resumes_a_mixture_through_workers(datasets, context):
    def loader(data):
        return StatefulDataLoader(data, batch_size=None, num_workers=2,
                                  multiprocessing_context=context)

    whole = _indices(loader(_mix(datasets, samples_per_epoch=640)))
    assert len(whole) == 640
    counts = [sum(1 for i in whole if i >> SHIFT == d) for d in (0, 1)]
    assert abs(counts[0] - 448) <= 64 // 2, counts  # within a block's share per worker
    it_loader = loader(_mix(datasets, samples_per_epoch=640))
    it = iter(it_loader)
    seen = _indices(next(it) for _ in range(3))
    state = it_loader.state_dict()
    del it, it_loader
    again = loader(_mix(datasets, samples_per_epoch=640))
    again.load_state_dict(state)
    rest = _indices(again)
    assert seen + rest == whole


@pytest.mark.parametrize("weights,says", [
    ([0.7, -0.3], r"weights\[1\] is -0.3"),
    ([0.0, 0.0], "add up to 0"),
    ([1.0], "2 datasets but 1 weights"),
])
def test_bad_weights_raise_config_error(datasets, weights, says):
    with pytest.raises(bucketload.ConfigError, match=says):
        len(bucketload.Loader(datasets, weights=weights))
