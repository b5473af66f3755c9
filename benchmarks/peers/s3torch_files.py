"""Peer of `bucketload read --format files`: the Amazon S3 Connector for PyTorch reading one
object per sample, as its documentation shows: `S3MapDataset.from_prefix` in a torch
`DataLoader` (random order, `batch_size` 64), for each worker count.

Raw bytes, no decode: each worker reads a whole object (`S3Reader.read()`), and the batch that
comes back to the main process holds only the objects' lengths, so the peer pays no pickling of
the bytes between processes (its best case). A map-style dataset reads one object at a time per
worker, so at most `workers` GETs are in flight.

    .venv-bench/bin/python benchmarks/peers/s3torch_files.py \
        --endpoint http://127.0.0.1:9000 --uri s3://bench/train/ --workers 2,8,16

Prints one JSON line per worker count (samples/s, MB/s, CPU seconds of this process and its
workers); the best count goes to stderr. Credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY.
"""

from __future__ import annotations

from s3torchconnector import S3MapDataset, S3Reader
from torch.utils.data import DataLoader

from peer_common import Meter, client_config, parse_args, print_best


def read_all(reader: S3Reader) -> bytes:
    """The dataset's transform: the object's bytes, undecoded."""
    return reader.read()


def lengths(batch: list[bytes]) -> list[int]:
    """The DataLoader's collate: the lengths only, so no bytes cross back to the main process."""
    return [len(data) for data in batch]


def measure(args, workers: int) -> dict:
    meter = Meter()
    dataset = S3MapDataset.from_prefix(args.uri, region=args.region, endpoint=args.endpoint,
                                       transform=read_all, s3client_config=client_config())
    objects = len(dataset)  # lists the prefix
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=workers,
                        collate_fn=lengths, persistent_workers=False)
    samples = nbytes = 0
    for batch in loader:
        samples += len(batch)
        nbytes += sum(batch)
    if samples != objects:
        raise SystemExit(f"read {samples} samples of {objects} objects listed under {args.uri}")
    return meter.report(args, peer="s3torchconnector S3MapDataset", uri=args.uri, workers=workers,
                        samples=samples, bytes=nbytes)


def main() -> None:
    args = parse_args(__doc__, "s3://bench/train/", "2,8,16")
    print_best([measure(args, workers) for workers in args.workers])


if __name__ == "__main__":
    main()
