"""Where this process sits in a distributed job: rank, world size, DataLoader worker."""

from __future__ import annotations

import os


def distributed() -> tuple[int, int]:
    """``(rank, world_size)``: from torch.distributed when it is initialised, else the
    ``RANK``/``WORLD_SIZE`` environment (``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` on one node), else
    Ray Train's context, else ``(0, 1)``."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    if "LOCAL_RANK" in env and "LOCAL_WORLD_SIZE" in env:
        return int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    try:
        import ray.train

        context = ray.train.get_context()
        return context.get_world_rank(), context.get_world_size()
    except Exception:  # not installed, or not inside a Train worker
        pass
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
