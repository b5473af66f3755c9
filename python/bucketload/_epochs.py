"""The epoch each iteration of a dataset reads, shared with its DataLoader workers.

A ``torch.utils.data.DataLoader`` with worker processes iterates copies of the dataset: by
default (``persistent_workers=False``) it makes new copies from the parent's object at every
epoch, so a counter kept in the object never moves and every epoch would repeat epoch 0's
order and augmentations. The counter therefore lives in shared memory made where the dataset
is built: forked workers inherit it and spawned (or forkserver) workers receive it while they
are started, the only time :mod:`multiprocessing` can hand shared memory to another process.
Whatever pickles the dataset then (the DataLoader itself, or torchdata's datapipes, which
``pickle.dumps`` or ``dill.dumps`` their graph while the worker starts), the shared memory
goes as bytes made by :mod:`multiprocessing`'s own pickler, which passes its file descriptor
to the starting worker. A pickle made at any other time (Ray, ``pickle.dumps``) carries the
next epoch as a plain number. A copy in the same process (``copy.deepcopy``, as torchdata's
``IterableWrapper`` makes at every iteration) is the same counter: it is the same dataset.

The workers of one DataLoader iteration must read the same epoch (each reads its own part of
that epoch's permutation), but they start in any order. The first to start claims the next
epoch for the iteration, keyed by what the workers of one iteration share: the DataLoader's
base seed (drawn anew for every iteration) and how many iterations this copy has begun
(persistent workers keep their copy and their seed). The others find the claim.

Each worker also marks whether its iteration is under way, so the process that built the
dataset can tell when only the workers know where the epoch stands."""

from __future__ import annotations

import multiprocessing
from multiprocessing import RawArray
from multiprocessing.context import get_spawning_popen
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .errors import ConfigError

#: DataLoader worker ids a dataset can serve.
MAX_WORKERS = 1024
#: Claims remembered (iterations whose workers may still be starting).
_CLAIMS = 64
_NEXT = 0  # index of the next unclaimed epoch in the shared array
_WRITE = 1  # index of the next claim slot to overwrite
_FIRST_CLAIM = 2  # claims follow as (key, epoch) pairs


def _worker() -> tuple[int, int] | None:
    """``(worker id, the DataLoader's base seed)`` inside a DataLoader worker, else ``None``."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return None
    info = get_worker_info()
    if info is None:
        return None
    if info.id >= MAX_WORKERS:
        raise ConfigError(f"DataLoader worker {info.id}: bucketload serves at most "
                          f"{MAX_WORKERS} workers per dataset")
    return info.id, info.seed - info.id


class Epochs:
    """Which epoch the next iteration reads, in the building process and all its workers."""

    def __init__(self, epoch: int = 0) -> None:
        self._shared: Any = RawArray("q", _FIRST_CLAIM + 2 * _CLAIMS)
        self._busy: Any = RawArray("b", MAX_WORKERS)
        # A spawn-context lock can be handed to spawned and forkserver workers too; forked
        # ones inherit it.
        self._lock: Any = multiprocessing.get_context("spawn").Lock()
        self._begun = 0  # iterations this copy began inside a worker
        self._pending: int | None = None  # an epoch a worker restored for its own next iteration
        self.set(epoch)

    def __getstate__(self) -> dict[str, Any]:
        if get_spawning_popen() is not None:
            # Pickled to start a worker, by any pickler: multiprocessing's pickler turns the
            # shared memory and lock into bytes that hand them to that worker.
            shared = ForkingPickler.dumps((self._shared, self._busy, self._lock))
            return {"shared": bytes(shared), "begun": self._begun, "pending": self._pending}
        return {"epoch": self.next()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "epoch" in state:
            self.__init__(state["epoch"])  # type: ignore[misc]
            return
        self._shared, self._busy, self._lock = ForkingPickler.loads(state["shared"])
        self._begun = state["begun"]
        self._pending = state["pending"]

    def __copy__(self) -> Epochs:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Epochs:
        return self

    def set(self, epoch: int) -> None:
        """The next iteration reads ``epoch``: everywhere when called outside a DataLoader
        worker, else in this worker only (a worker restoring its own state)."""
        if epoch < 0:
            raise ConfigError(f"epoch {epoch} is negative")
        if _worker() is not None:
            self._pending = epoch
            return
        with self._lock:
            self._shared[:] = [0] * len(self._shared)
            self._shared[_NEXT] = epoch
            self._busy[:] = [0] * MAX_WORKERS
        self._pending = None

    def next(self) -> int:
        """The epoch the next iteration here reads."""
        if self._pending is not None:
            return self._pending
        return int(self._shared[_NEXT])

    def begin(self) -> int:
        """Starts an iteration here and returns its epoch."""
        worker = _worker()
        if worker is not None:
            self._busy[worker[0]] = 1
        if self._pending is not None:
            epoch, self._pending = self._pending, None
            with self._lock:
                self._shared[_NEXT] = max(self._shared[_NEXT], epoch + 1)
            return epoch
        if worker is None:
            with self._lock:
                epoch = self._shared[_NEXT]
                self._shared[_NEXT] = epoch + 1
            return int(epoch)
        # Nonzero, and the same in every worker of this iteration.
        key = (hash((worker[1], self._begun)) & 0x7FFF_FFFF_FFFF_FFFF) or 1
        self._begun += 1
        with self._lock:
            for i in range(_FIRST_CLAIM, _FIRST_CLAIM + 2 * _CLAIMS, 2):
                if self._shared[i] == key:
                    return int(self._shared[i + 1])
            epoch = self._shared[_NEXT]
            self._shared[_NEXT] = epoch + 1
            at = _FIRST_CLAIM + 2 * self._shared[_WRITE]
            self._shared[at], self._shared[at + 1] = key, epoch
            self._shared[_WRITE] = (self._shared[_WRITE] + 1) % _CLAIMS
        return int(epoch)

    def end(self) -> None:
        """The iteration here read its part of the epoch to the end."""
        worker = _worker()
        if worker is not None:
            self._busy[worker[0]] = 0

    def workers_busy(self) -> bool:
        """Outside a worker: whether a DataLoader worker has an iteration under way (or left
        one unfinished)."""
        return _worker() is None and any(self._busy[:])
