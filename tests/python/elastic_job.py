"""Elastic resume in one gloo job of 8 processes (spawning is slow: one job for every world
size); started by test_elastic.py. Ranks 0-3 read a few batches as a world of 4 and rank 0's
``state_dict()`` is saved; ranks 0-1 then resume it as a world of 2, and all 8 as a world of 8
(the rank from the process group). Every phase gathers the sample indices each rank received
with ``all_gather_object``; rank 0 writes them to OUT/result.json.

usage: elastic_job.py URI PORT OUT"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp

import bucketload

WORLD = 8
BATCHES = 3  # batches every rank of the world of 4 reads before the state is saved


def loader(uri: str, pad: bool, **kw) -> bucketload.Loader:
    return bucketload.Loader(uri, batch_size=2, image_size=8, seed=3, pad=pad,
                             return_indices=True, **kw)


def gather(indices: list[int]) -> list[list[int]]:
    every: list = [None] * WORLD
    dist.all_gather_object(every, indices)
    return every


def phases(rank: int, uri: str, pad: bool) -> dict:
    # A world of 4: a few batches each, rank 0's state saved (and sent to every process, as a
    # checkpoint on shared storage would be).
    before: list[int] = []
    state = [None]
    if rank < 4:
        data = loader(uri, pad, rank=rank, world_size=4)
        batches = iter(data)
        for _ in range(BATCHES):
            before += next(batches)[2].tolist()
        if rank == 0:
            state[0] = json.loads(json.dumps(data.state_dict()))
    dist.broadcast_object_list(state, src=0)
    result = {"before": gather(before), "state": state[0]}
    # A world of 2 resumes it.
    after2: list[int] = []
    if rank < 2:
        data = loader(uri, pad, rank=rank, world_size=2)
        data.load_state_dict(state[0])
        after2 = [i for batch in data for i in batch[2].tolist()]
    result["after2"] = gather(after2)
    # A world of 8 (every process of the group) resumes it.
    data = loader(uri, pad)
    data.load_state_dict(state[0])
    result["after8"] = gather([i for batch in data for i in batch[2].tolist()])
    return result


def job(rank: int, uri: str, port: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    result = {"pad": phases(rank, uri, True), "exact": phases(rank, uri, False)}
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(result, f)


def main() -> None:
    uri, port, out = sys.argv[1:4]
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT"):
        os.environ.pop(var, None)
    mp.spawn(job, args=(uri, port, out), nprocs=WORLD)


if __name__ == "__main__":
    main()
