"""The streaming peers of bucketload's cache benchmark (scripts/bench-peers.sh), in .venv-peers:
two epochs of a dataset written by streaming_write.py, through the tool's local cache, starting
from an empty cache directory: the first epoch is the cold row, the second the warm one.

  mosaic   MosaicML Streaming's `StreamingDataset(remote=URI, local=CACHE_DIR, batch_size,
           shuffle=False)` (no `cache_limit`: every shard stays) in its `StreamingDataLoader`.
           Endpoint: MosaicML Streaming's S3 client takes it from S3_ENDPOINT_URL (it passes
           `endpoint_url=os.environ.get("S3_ENDPOINT_URL")` to boto3, which also reads the AWS
           credential variables); this script sets S3_ENDPOINT_URL from --endpoint.
  litdata  LitData's `StreamingDataset(input_dir=URI, cache_dir=CACHE_DIR, shuffle=False,
           storage_options=...)` in its `StreamingDataLoader`. Endpoint: LitData builds its boto3
           client as `boto3.Session().client("s3", **storage_options)`, so
           `storage_options={"endpoint_url": ENDPOINT, "region_name": REGION}` points it at the
           server for `index.json`. Chunks, though, are fetched through obstore (object_store),
           whose `S3Store` LitData builds from that client's endpoint and credentials
           (path-style for a non-AWS endpoint) with its own client options
           (`litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS`), and object_store refuses a
           plain-http URL ("HTTP error: builder error") unless `allow_http` is set: nothing in
           LitData's API sets it, and those options replace the environment's (AWS_ALLOW_HTTP
           has no effect). This script adds `"allow_http": True` to that dict before the
           dataset is made.

Each sample comes back as (payload, label, idx), idx being its position in the source's listing
(streaming_write.py stores it): raw, the payload is the length of the JPEG bytes (the bytes
are read from the shard but not pickled across processes: the peer's best case); decoded, it is
the PIL + torchvision.transforms.v2 pipeline's [3, 224, 224] tensor (cache_common.Decode),
batched by the DataLoader. Every epoch must return every sample exactly once with its label,
and raw, bytes adding up to the source's, or the script fails.

    .venv-peers/bin/python benchmarks/peers/streaming_cache.py --tool mosaic --mode decoded \\
        --endpoint http://127.0.0.1:9000 --uri s3://bench/mds --cache-dir /tmp/mosaic-cache

Prints one JSON line per epoch (cache "cold", then "warm").
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

from cache_common import Batch, Decode, Measurement, empty_dir, list_source, parse_args, s3_client

# DataLoader workers on the machine's 2 cores for the decode, none for raw reads (measured: the
# samples come from a local shard file, and worker processes only add hand-offs).
DEFAULT_WORKERS = {"raw": 0, "decoded": 2}

warnings.filterwarnings("ignore", message="This DataLoader will create")


class Sample:
    """The tool's sample dict to (payload, label, idx); picklable for DataLoader workers."""

    def __init__(self, mode: str) -> None:
        self.decode = Decode() if mode == "decoded" else None

    def __call__(self, sample: dict) -> tuple[Any, int, int]:
        data = sample["jpg"]
        payload = len(data) if self.decode is None else self.decode(data)
        return payload, int(sample["label"]), int(sample["idx"])


def collate_raw(items: list[tuple[int, int, int]]) -> tuple[list[int], list[int], list[int]]:
    lengths, labels, indices = zip(*items)
    return list(lengths), list(labels), list(indices)


def batches(loader: Any, mode: str) -> Iterator[Batch]:
    for payload, labels, indices in loader:
        if mode == "raw":
            yield Batch(indices=list(indices), labels=list(labels), nbytes=sum(payload))
        else:
            yield Batch(indices=indices.tolist(), labels=labels.tolist(),
                        shape=tuple(payload.shape))


def mosaic_loader(args: Any, workers: int) -> Any:
    from streaming import StreamingDataLoader, StreamingDataset

    class MosaicSamples(StreamingDataset):
        def __init__(self, transform: Sample, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.transform = transform

        def get_item(self, idx: int) -> Any:
            return self.transform(super().get_item(idx))

    os.environ["S3_ENDPOINT_URL"] = args.endpoint
    dataset = MosaicSamples(Sample(args.mode), remote=args.uri, local=args.cache_dir,
                            batch_size=args.batch_size, shuffle=False,
                            cache_limit=args.cache_limit)
    return StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=workers,
                               collate_fn=collate_raw if args.mode == "raw" else None)


def litdata_loader(args: Any, workers: int) -> Any:
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming import downloader

    # LitData's obstore client options, which the S3Store of every chunk download gets, and
    # which replace object_store's defaults (AWS_ALLOW_HTTP in the environment is not read):
    # allow_http is the one thing a plain-http endpoint needs.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
    limit = {} if args.cache_limit is None else {"max_cache_size": args.cache_limit}
    dataset = StreamingDataset(args.uri, cache_dir=args.cache_dir, shuffle=False, **limit,
                               transform=Sample(args.mode),
                               storage_options={"endpoint_url": args.endpoint,
                                                "region_name": args.region})
    return StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=workers,
                               collate_fn=collate_raw if args.mode == "raw" else None)


def main() -> None:
    args = parse_args(__doc__ or "", ["mosaic", "litdata"])
    workers = DEFAULT_WORKERS[args.mode] if args.workers is None else args.workers
    source = list_source(s3_client(args.endpoint, args.region), args.source)
    empty_dir(args.cache_dir)
    # The tool is imported before the clock starts: loading Python modules is not its loader's
    # work (MosaicML Streaming imports transformers).
    if args.tool == "mosaic":
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
    else:
        import litdata  # noqa: F401
    make = mosaic_loader if args.tool == "mosaic" else litdata_loader
    # Cold: the clock starts before the dataset is made (both fetch their index then).
    cold = Measurement(args, source, args.tool, "cold", workers, args.cache_dir)
    loader = make(args, workers)
    cold.run(batches(loader, args.mode))
    warm = Measurement(args, source, args.tool, "warm", workers, args.cache_dir)
    warm.run(batches(loader, args.mode))


if __name__ == "__main__":
    main()
