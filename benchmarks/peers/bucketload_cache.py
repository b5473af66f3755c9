"""bucketload's rows of the cache benchmark (scripts/bench-peers.sh), in .venv-bench: the
shards of `bucketload shard` read by `bucketload.Loader(URI, format="shards", shuffle=False,
pad=False)`, the same way as the streaming peers (streaming_cache.py):

  none   one epoch without a cache (`--cache none`);
  cold   the first epoch with `cache_dir=CACHE_DIR` (emptied first), and
  warm   the second epoch of that loader, from its cache (`--cache cached`, the default).

`--tool bucketload-ttl` reads cold and warm with `metadata_ttl="indefinite"`: the loader asks
the store for each shard's version once, so the warm epoch sends no request, as the peers'
warm epochs (which never ask); by default it sends one HEAD per shard per epoch.

`--tool bucketload-indexed` (and `bucketload-indexed-ttl`, with `metadata_ttl="indefinite"`)
reads the same shards by their indexes, `format="indexed"`: each sample (or a run of close ones)
a ranged GET, or from the cache's blocks of its shard (docs/CACHE.md), in the same order.

Each invocation is a new process, so no row inherits connections or warmed-up state from
another.

raw: `decode=False`, each sample's bytes and label (the JPEG member's length is counted);
decoded: `decode=True`, native JPEG decode, RandomResizedCrop 224, flip and normalise into
[N, 3, 224, 224] float32 batches (`return_indices=True`). Every epoch must return every sample
exactly once with its label, and raw, bytes adding up to the source's, or the script fails.
A streamed shard sample's index is `shard << 32 | sample` (docs/LOADER.md); the shards hold the
source's samples in its sorted listing order, so with the shards' sample counts from the
manifest `bucketload shard --manifest-format 1` wrote (JSON), that is the sample's position in the listing (checked
against the keys in raw mode).

    .venv-bench/bin/python benchmarks/peers/bucketload_cache.py --mode raw --cache cached \\
        --endpoint http://127.0.0.1:9000 --uri s3://bench/shards --cache-dir /tmp/bl-cache

Prints one JSON line per epoch: "none"; or "cold" then "warm".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from cache_common import (
    Batch,
    Measurement,
    Source,
    empty_dir,
    list_source,
    parse_args,
    s3_client,
    split_uri,
)

import bucketload


def loader(args: Any, cache_dir: str | None) -> bucketload.Loader:
    decoded = args.mode == "decoded"
    indexed = args.tool.startswith("bucketload-indexed")
    ttl = args.tool.endswith("-ttl")
    return bucketload.Loader(args.uri, format="indexed" if indexed else "shards",
                             batch_size=args.batch_size, shuffle=False,
                             pad=False, cache_dir=cache_dir, cache_size=args.cache_limit,
                             decode=decoded,
                             return_indices=decoded, endpoint=args.endpoint, region=args.region,
                             metadata_ttl="indefinite" if ttl else None)


class Positions:
    """Streamed shard sample indices (`shard << 32 | sample`) to positions in the listing."""

    def __init__(self, client: Any, uri: str) -> None:
        bucket, prefix = split_uri(uri)
        manifest = json.loads(client.get_object(
            Bucket=bucket, Key=f"{prefix}_bucketload/manifest.json")["Body"].read())
        counts = [shard["samples"] for shard in manifest["shards"]]
        self.offsets = [sum(counts[:i]) for i in range(len(counts))]

    def __call__(self, index: int) -> int:
        return self.offsets[index >> 32] + (index & 0xFFFF_FFFF)


def stems(source: Source) -> list[str]:
    """Each listed key without its extension, the key a sample at that position must end with
    (made before the clock starts)."""
    return [str(PurePosixPath(key).with_suffix("")) for key in source.keys]


def batches(epoch: Any, mode: str, keys: list[str], position: Positions) -> Iterator[Batch]:
    for batch in epoch:
        if mode == "decoded":
            yield Batch(indices=[position(i) for i in batch.indices.tolist()],
                        labels=batch.labels.tolist(), shape=tuple(batch.images.shape))
            continue
        indices = [position(sample["__index__"]) for sample in batch]
        for i, sample in zip(indices, batch):
            if not keys[i].endswith(sample["__key__"]):
                raise SystemExit(f"sample {i} is {sample['__key__']}, the listing's {i}th is "
                                 f"{keys[i]}")
        yield Batch(indices=indices, labels=[sample["__label__"] for sample in batch],
                    nbytes=sum(len(sample["jpg"]) for sample in batch))


def main() -> None:
    args = parse_args(__doc__ or "", ["bucketload", "bucketload-ttl", "bucketload-indexed",
                                      "bucketload-indexed-ttl"], caches=["none", "cached"])
    client = s3_client(args.endpoint, args.region)
    source = list_source(client, args.source)
    position = Positions(client, args.uri)
    keys = stems(source)
    # The clock starts before the loader is made (none and cold), or before the second epoch.
    if args.cache == "none":
        Measurement(args, source, args.tool, "none", None, None).run(
            batches(loader(args, None), args.mode, keys, position))
        return
    cold = Measurement(args, source, args.tool, "cold", None, args.cache_dir)
    cached = loader(args, empty_dir(args.cache_dir))
    cold.run(batches(cached, args.mode, keys, position))
    warm = Measurement(args, source, args.tool, "warm", None, args.cache_dir)
    warm.run(batches(cached, args.mode, keys, position))


if __name__ == "__main__":
    main()
