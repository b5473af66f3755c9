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
to the starting worker. Each counter has a mapping of its own (not :mod:`multiprocessing`'s
shared heap, whose one descriptor other objects pass too), handed to each worker once however
often it is pickled: a worker must receive each descriptor once. A pickle made at any other time (Ray, ``pickle.dumps``) carries the
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

import ctypes
import multiprocessing
import weakref
from multiprocessing.context import get_spawning_popen
from multiprocessing.heap import Arena
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
_WORDS = _FIRST_CLAIM + 2 * _CLAIMS
#: Bytes of a counter's mapping: the words, then a busy flag per worker.
_SIZE = 8 * _WORDS + MAX_WORKERS
#: What each starting worker was handed, by counter mapping: its bytes, made once.
_HANDED: weakref.WeakKeyDictionary[Any, dict[int, bytes]] = weakref.WeakKeyDictionary()


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
        # A spawn-context lock can be handed to spawned and forkserver workers too; forked
        # ones inherit it.
        self._map(Arena(_SIZE), multiprocessing.get_context("spawn").Lock())
        self._begun = 0  # iterations this copy began inside a worker
        self._pending: int | None = None  # an epoch a worker restored for its own next iteration
        self.set(epoch)

    def _map(self, arena: Any, lock: Any) -> None:
        """The counter's words and busy flags over ``arena``'s shared mapping."""
        self._arena, self._lock = arena, lock
        self._shared: Any = (ctypes.c_int64 * _WORDS).from_buffer(arena.buffer)
        self._busy: Any = (ctypes.c_int8 * MAX_WORKERS).from_buffer(arena.buffer, 8 * _WORDS)

    def __getstate__(self) -> dict[str, Any]:
        popen = get_spawning_popen()
        if popen is not None:
            # Pickled to start a worker, by any pickler: multiprocessing's pickler turns the
            # mapping and lock into bytes that hand them to that worker, once per worker.
            handed = _HANDED.setdefault(popen, {})
            shared = handed.get(id(self._arena))
            if shared is None:
                shared = bytes(ForkingPickler.dumps((self._arena, self._lock)))
                handed[id(self._arena)] = shared
            return {"shared": shared, "begun": self._begun, "pending": self._pending}
        return {"epoch": self.next()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "epoch" in state:
            self.__init__(state["epoch"])  # type: ignore[misc]
            return
        self._map(*ForkingPickler.loads(state["shared"]))
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
