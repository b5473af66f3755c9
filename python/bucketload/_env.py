"""Where this process sits in a distributed job: rank, world size, DataLoader worker.

A dataset captures its rank where it is built (and again where it is pickled for spawned
DataLoader workers) because a worker process never has torch.distributed initialised: see
:func:`captured` and :func:`distributed`, and docs/PYTHON.md ("Ranks")."""

from __future__ import annotations

import os
import sys

from .errors import ConfigError


def _process_group() -> tuple[int, int] | None:
    """``(rank, world_size)`` of torch.distributed's default process group when it is
    initialised in this process, else ``None``."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def captured() -> tuple[int, int] | None:
    """What a dataset records where it is built or pickled: the initialised process group of
    this process, if any."""
    return _process_group()


def _env_pair(rank_var: str, world_var: str, strict: bool = True) -> tuple[int, int] | None:
    """The pair from the environment; half a pair raises when ``strict`` and is ignored
    otherwise (``LOCAL_RANK`` alone is commonly set just to pick a GPU)."""
    env = os.environ
    if rank_var not in env and world_var not in env:
        return None
    if not strict and (rank_var not in env or world_var not in env):
        return None
    if rank_var not in env or world_var not in env:
        have, missing = (rank_var, world_var) if rank_var in env else (world_var, rank_var)
        raise ConfigError(
            f"{have}={env[have]} is set but {missing} is not: cannot tell this process's rank; "
            f"set both (torchrun does), or pass rank= and world_size=")
    try:
        rank, world = int(env[rank_var]), int(env[world_var])
    except ValueError:
        raise ConfigError(f"{rank_var}={env[rank_var]!r} and {world_var}={env[world_var]!r} "
                          "are not integers") from None
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"{rank_var}={rank} is not a rank of {world_var}={world}")
    return rank, world


def distributed() -> tuple[int, int]:
    """``(rank, world_size)`` of this process when the dataset captured none: torch.distributed
    when it is initialised here, else ``RANK``/``WORLD_SIZE`` (``LOCAL_RANK``/
    ``LOCAL_WORLD_SIZE`` on one node), else Ray Train's context, else ``(0, 1)``.

    Raises :class:`ConfigError` when the process cannot know its rank: one of ``RANK`` and
    ``WORLD_SIZE`` without the other, or a torch.distributed rendezvous configured
    (``MASTER_ADDR``/``MASTER_PORT``, as ``mp.spawn`` jobs set them) while no process group
    was initialised where the dataset was built or handed to DataLoader workers. Reading the
    whole dataset on every rank instead would silently train on duplicated data."""
    group = _process_group()
    if group is not None:
        return group
    pair = _env_pair("RANK", "WORLD_SIZE")
    if pair is None:
        pair = _env_pair("LOCAL_RANK", "LOCAL_WORLD_SIZE", strict=False)
    if pair is not None:
        return pair
    # A Ray Train worker has imported ray already: a process that has not is not one, and
    # importing ray (with pyarrow and pydantic) only to ask would cost each loader's process
    # tens of MB and seconds (docs/BENCHMARKS.md, the files catalog's PSS).
    if "ray" in sys.modules:
        try:
            import ray.train

            context = ray.train.get_context()
            return context.get_world_rank(), context.get_world_size()
        except Exception:  # noqa: BLE001, S110 - not inside a Train worker
            pass
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        raise ConfigError(
            "cannot tell this process's rank: MASTER_ADDR/MASTER_PORT configure a "
            "torch.distributed job, but its process group was not initialised when the dataset "
            "was built or handed to DataLoader workers, and RANK/WORLD_SIZE are not set; call "
            "torch.distributed.init_process_group before building the dataset (or before "
            "iterating the DataLoader), or pass rank= and world_size=")
    return 0, 1


def worker() -> tuple[int, int]:
    """``(worker_id, num_workers)`` inside a ``torch.utils.data.DataLoader`` worker, else
    ``(0, 1)``."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1
    info = get_worker_info()
    if info is None:
        return 0, 1
    return info.id, info.num_workers


def in_worker() -> bool:
    """Whether this process is a ``torch.utils.data.DataLoader`` worker."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return False
    return get_worker_info() is not None
