"""The order of one rank of a large job, through bucketload.Loader, for scripts/bench-scale.sh:
its shuffle quality, a resume at another world size, and a mixture of two datasets. Each
command prints one JSON line (seconds, samples, checks, peak RSS of this process).

    order_py.py order URI FORMAT WORLD
    order_py.py resume URI FORMAT WORLD NEW_WORLD CONSUMED
    order_py.py mix URI_A URI_B FORMAT WORLD [CONSUMED]

`order`: rank 0 of WORLD reads its share; the figures of its order are
  - `shards_per_batch`: distinct shards among the samples of a batch of 64, averaged over the
    share's batches, next to `shards_per_batch_ideal`, its expectation under a uniform
    permutation of the whole dataset (S (1 - (1 - 1/S)^64) for S equal shards; 1 would be a
    batch from one shard);
  - `spearman`: the rank correlation between a sample's position in the dataset (shard, then
    sample within the shard) and its position in the rank's order (0 for no relation; a
    uniform permutation gives 0 within about 1/sqrt(n); sequential order gives 1).
`resume`: old rank 0 of WORLD hands out CONSUMED samples and saves `state_dict()`; new ranks of
  NEW_WORLD load it and read the rest of the epoch. Reading all 10^9 samples is out of reach,
  so the check runs on a closed subset: the old ranks whose unconsumed samples go to new rank 0
  under the documented layout (docs/LOADER.md, "Another world size": streams share the
  positions left in contiguous runs, random access strided) read their whole uninterrupted
  share; then (a) the old ranks' consumed samples, new rank 0's and new rank NEW_WORLD-1's
  reads hold no sample twice, (b) each new rank reads (N - WORLD x CONSUMED) / NEW_WORLD, and
  (c) new rank 0 reads exactly the old ranks' unconsumed samples (the subset is complete).
`mix`: rank 0 of WORLD reads an equal-weight mixture of the two datasets; then a second loader
  stops after CONSUMED samples (default: half the share), a third resumes from its state (the
  same world size, as a mixture's state allows) and the two together must equal the first.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time
from typing import Any

import numpy as np

import bucketload

BATCH = 64
RESUME_BATCH = 100  # resume: CONSUMED must be whole batches (5,000 is 50)
LOW = (1 << 56) - 1  # a mixture's index: dataset << 56 | index in that dataset


def loader(uri: str | list[str], fmt: str, rank: int, world: int, batch: int = BATCH):
    return bucketload.Loader(
        uri, format=fmt, rank=rank, world_size=world, batch_size=batch, decode=False
    )


def read(ld: Any, limit: int | None = None) -> tuple[list[int], float, float]:
    """Indices of the samples read (up to `limit`), seconds to the first batch and to the end."""
    started = time.monotonic()
    first = None
    out: list[int] = []
    for batch in ld:
        out.extend(s["__index__"] for s in batch)
        if first is None:
            first = time.monotonic()
        if limit is not None and len(out) >= limit:
            break
    done = time.monotonic()
    return out, (first or done) - started, done - started


def shard_of(index: int) -> int:
    """(dataset, shard) of a sample index as one int: shards number samples shard << 32 | i."""
    return (index >> 56) << 32 | ((index & LOW) >> 32)


def figures(indices: list[int], shards: int) -> dict[str, Any]:
    n = len(indices)
    per_batch = [
        len({shard_of(i) for i in indices[k : k + BATCH]}) for k in range(0, n - BATCH + 1, BATCH)
    ]
    ranks = np.empty(n)
    ranks[np.argsort(np.asarray(indices, dtype=np.uint64), kind="stable")] = np.arange(n)
    rho = float(np.corrcoef(ranks, np.arange(n))[0, 1]) if n > 1 else 0.0
    return {
        "shards_per_batch": round(float(np.mean(per_batch)), 2) if per_batch else None,
        "shards_per_batch_ideal": round(shards * (1 - (1 - 1 / shards) ** BATCH), 2),
        "spearman": round(rho, 4),
        "spearman_noise": round(1 / max(n - 1, 1) ** 0.5, 4),
    }


def peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def opened(uri: str | list[str], fmt: str, rank: int, world: int, batch: int = BATCH):
    started = time.monotonic()
    ld = loader(uri, fmt, rank, world, batch)
    len(ld)
    return ld, time.monotonic() - started


def order(a: argparse.Namespace) -> dict[str, Any]:
    ld, open_s = opened(a.uri, a.format, 0, a.world)
    indices, first_s, share_s = read(ld)
    shards = ld._open().dataset_samples() // a.samples_per_shard
    return {
        "open_s": round(open_s, 3),
        "first_batch_s": round(first_s, 3),
        "share_s": round(share_s, 3),
        "samples": len(indices),
        "duplicates": len(indices) - len(set(indices)),
        **figures(indices, shards),
    }


def closed_subset(fmt: str, world: int, new_world: int, share: int, consumed: int) -> list[int]:
    """The old ranks whose unconsumed samples all go to new rank 0, and only there."""
    left_old = share - consumed
    left_new = (world * left_old) // new_world
    if fmt == "shards":  # contiguous runs of the positions left, old rank by old rank
        if left_new % left_old:
            raise SystemExit(f"pick sizes where {left_old} divides {left_new}")
        return list(range(left_new // left_old))
    if world % new_world:  # strided: left position k goes to new rank k mod new_world
        raise SystemExit(f"pick sizes where {new_world} divides {world}")
    return list(range(0, world, new_world))


def resume(a: argparse.Namespace) -> dict[str, Any]:
    b = RESUME_BATCH
    ld, _ = opened(a.uri, a.format, 0, a.world, b)
    total = ld._open().dataset_samples()
    share = ld._open().samples_per_epoch()
    saved_started = time.monotonic()
    consumed0, _, _ = read(ld, a.consumed)
    if len(consumed0) != a.consumed:
        raise SystemExit(f"read {len(consumed0)} samples, not {a.consumed}: give whole batches of {b}")
    state = ld.state_dict()
    save_s = time.monotonic() - saved_started
    del ld
    gc.collect()

    old_ranks = closed_subset(a.format, a.world, a.new_world, share, a.consumed)
    consumed: list[int] = []
    unconsumed: list[int] = []
    for r in old_ranks:
        full, _, _ = read(loader(a.uri, a.format, r, a.world, b))
        if r == 0 and full[: a.consumed] != consumed0:
            raise SystemExit("old rank 0's order differs between two loaders")
        consumed += full[: a.consumed]
        unconsumed += full[a.consumed :]
        gc.collect()

    new_reads: dict[int, list[int]] = {}
    timings: dict[str, float] = {}
    for r in (0, a.new_world - 1):
        started = time.monotonic()
        ld = loader(a.uri, a.format, r, a.new_world, b)
        ld.load_state_dict(state)
        restored = time.monotonic() - started
        new_reads[r], first_s, rest_s = read(ld)
        if r == 0:
            timings = {
                "restore_s": round(restored, 3),
                "first_batch_s": round(first_s, 3),
                "rest_s": round(rest_s, 3),
            }
        del ld
        gc.collect()

    everything = consumed + [i for reads in new_reads.values() for i in reads]
    expected = (total - a.world * a.consumed) // a.new_world
    return {
        "dataset_samples": total,
        "old_world": a.world,
        "new_world": a.new_world,
        "consumed_per_rank": a.consumed,
        "save_s": round(save_s, 3),
        **timings,
        "old_ranks_checked": old_ranks,
        "new_ranks_checked": sorted(new_reads),
        "new_rank_samples": {str(r): len(v) for r, v in new_reads.items()},
        "expected_new_rank_samples": expected,
        "counts_ok": all(len(v) == expected for v in new_reads.values()),
        "duplicates": len(everything) - len(set(everything)),
        "new_rank_0_is_the_unconsumed": sorted(new_reads[0]) == sorted(unconsumed),
        "samples": len(new_reads[0]),
        "state_bytes": len(json.dumps(state)),
    }


def mix(a: argparse.Namespace) -> dict[str, Any]:
    uris = [a.uri, a.uri_b]
    ld, open_s = opened(uris, a.format, 0, a.world)
    full, first_s, share_s = read(ld)
    shards = ld._open().dataset_samples() // a.samples_per_shard
    del ld
    gc.collect()
    half = a.consumed if a.consumed is not None else len(full) // 2 // BATCH * BATCH
    ld, _ = opened(uris, a.format, 0, a.world)
    head, _, _ = read(ld, half)
    state = ld.state_dict()
    del ld
    gc.collect()
    ld = loader(uris, a.format, 0, a.world)
    ld.load_state_dict(state)
    tail, _, _ = read(ld)
    per_dataset = np.bincount(np.asarray(full, dtype=np.uint64) >> np.uint64(56), minlength=2)
    return {
        "open_s": round(open_s, 3),
        "first_batch_s": round(first_s, 3),
        "share_s": round(share_s, 3),
        "samples": len(full),
        "per_dataset": [int(c) for c in per_dataset],
        "duplicates": len(full) - len(set(full)),
        "resumed_same_world_ok": head + tail == full,
        "resumed_at": half,
        **figures(full, shards),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("order")
    o.add_argument("uri")
    o.add_argument("format")
    o.add_argument("world", type=int)
    r = sub.add_parser("resume")
    r.add_argument("uri")
    r.add_argument("format")
    r.add_argument("world", type=int)
    r.add_argument("new_world", type=int)
    r.add_argument("consumed", type=int)
    m = sub.add_parser("mix")
    m.add_argument("uri")
    m.add_argument("uri_b")
    m.add_argument("format")
    m.add_argument("world", type=int)
    m.add_argument("consumed", type=int, nargs="?")
    for sp in (o, r, m):
        sp.add_argument("--samples-per-shard", type=int, default=1000)
    a = p.parse_args()
    row = {"order": order, "resume": resume, "mix": mix}[a.command](a)
    row["peak_rss_mb"] = peak_mb()
    print(json.dumps(row))


if __name__ == "__main__":
    main()
