"""One rank of a 2-rank gloo job reading a dataset through DataLoader workers; started by
test_ranks.py. Writes OUT/rank-N.json per rank: the sample indices of the Loader and the keys
of S3IterableDataset(enable_sharding=True, shuffle=True) that this rank received, per epoch
(epochs advance by themselves: the job never calls set_epoch).

usage: ranks_job.py spawn|env URI ENDPOINT fork|spawn persistent|fresh PORT OUT
``spawn`` starts the ranks with torch.multiprocessing.spawn and init_process_group(rank=,
world_size=) (no RANK/WORLD_SIZE in the environment); ``env`` is one rank of a job whose
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT the caller set, as torchrun does."""

from __future__ import annotations

import json
import operator
import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import ChainDataset, DataLoader

import bucketload
from bucketload.s3torch import S3IterableDataset

EPOCHS = 2


def read(images, keys, context: str, persistent: bool) -> tuple[list[list], list[list]]:
    """Both datasets through one DataLoader (one set of workers: spawning is slow)."""
    loader = DataLoader(ChainDataset([images, keys]), batch_size=None, num_workers=2,
                        multiprocessing_context=context, persistent_workers=persistent,
                        collate_fn=_keep)
    indices, names = [], []
    for _ in range(EPOCHS):  # each iteration reads the next epoch: no set_epoch needed
        indices.append([])
        names.append([])
        for item in loader:
            if isinstance(item, tuple):
                indices[-1] += item[2].tolist()
            else:
                names[-1].append(item)
    return indices, names


def _keep(item):
    return item


def job(rank: int, world: int, uri: str, endpoint: str, context: str, persistent: bool,
        port: str, out: str, init_first: bool = True) -> None:
    kwargs = {"backend": "gloo", "rank": rank, "world_size": world}
    if "MASTER_ADDR" not in os.environ:
        kwargs["init_method"] = f"tcp://127.0.0.1:{port}"
    images = bucketload.Loader(uri, batch_size=4, image_size=8, shuffle=True, seed=1,
                               return_indices=True)
    keys = S3IterableDataset(uri, endpoint=endpoint, enable_sharding=True, shuffle=True, seed=2,
                             transform=operator.attrgetter("key"))
    # The datasets are built before or after the process group: both must work.
    dist.init_process_group(**kwargs)
    if init_first:
        images = bucketload.Loader(uri, batch_size=4, image_size=8, shuffle=True, seed=1,
                                   return_indices=True)
        keys = S3IterableDataset(uri, endpoint=endpoint, enable_sharding=True, shuffle=True,
                                 seed=2, transform=operator.attrgetter("key"))
    indices, names = read(images, keys, context, persistent)
    result = {"rank": rank, "loader": indices, "keys": names}
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump(result, f)


def main() -> None:
    launch, uri, endpoint, context, persistence, port, out = sys.argv[1:8]
    persistent = persistence == "persistent"
    if launch == "spawn":
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT"):
            os.environ.pop(var, None)
        # Rank 0 builds its datasets after init_process_group, rank 1 before.
        mp.spawn(_spawned, args=(uri, endpoint, context, persistent, port, out), nprocs=2)
    else:
        job(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), uri, endpoint, context,
            persistent, port, out)


def _spawned(rank: int, uri: str, endpoint: str, context: str, persistent: bool,
             port: str, out: str) -> None:
    job(rank, 2, uri, endpoint, context, persistent, port, out, init_first=rank == 0)


if __name__ == "__main__":
    main()
