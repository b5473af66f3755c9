"""Peer of `bucketload read --format shards`: the Amazon S3 Connector for PyTorch streaming tar
shards, as its documentation pairs it with WebDataset: `S3IterableDataset` over the shards
(`enable_sharding=True`, so DataLoader workers split the shards), each object's stream handed to
`webdataset.tariterators.tar_file_expander` and grouped into samples by `group_by_keys`.

Raw bytes, no decode; the batch that comes back to the main process holds only each sample's
length (all its members), so the peer pays no pickling of the bytes between processes. Only
`*.tar` objects under the prefix are read (not the `.idx` indexes or the manifest that
`bucketload shard` writes beside them); the connector's sequential reader sends no GET for an
object that is never read.

    .venv-bench/bin/python benchmarks/peers/s3torch_shards.py \
        --endpoint http://127.0.0.1:9000 --uri s3://bench-shards/train/ --workers 0,2,4

Prints one JSON line per worker count (0 reads in the main process); the best goes to stderr.
"""

from __future__ import annotations

from typing import Iterator

import webdataset as wds
from s3torchconnector import S3IterableDataset, S3Reader
from torch.utils.data import DataLoader, IterableDataset

from peer_common import Meter, client_config, parse_args, print_best


def shard_to_dict(reader: S3Reader) -> dict:
    """The connector's transform for WebDataset: the object's key and its (unread) stream."""
    return {"url": reader.key, "stream": reader}


def sample_bytes(sample: dict) -> int:
    return sum(len(value) for key, value in sample.items() if not key.startswith("__"))


class TarSamples(IterableDataset):
    """Samples of the shards this DataLoader worker gets from the connector, as total lengths."""

    def __init__(self, shards: S3IterableDataset) -> None:
        self.shards = shards

    def __iter__(self) -> Iterator[int]:
        tars = (obj for obj in self.shards if obj["url"].endswith(".tar"))
        for sample in wds.tariterators.group_by_keys(wds.tariterators.tar_file_expander(tars)):
            yield sample_bytes(sample)


def lengths(batch: list[int]) -> list[int]:
    return batch


def measure(args, workers: int) -> dict:
    meter = Meter()
    shards = S3IterableDataset.from_prefix(args.uri, region=args.region, endpoint=args.endpoint,
                                           transform=shard_to_dict, s3client_config=client_config(),
                                           enable_sharding=True)
    loader = DataLoader(TarSamples(shards), batch_size=args.batch_size, num_workers=workers,
                        collate_fn=lengths)
    samples = nbytes = 0
    for batch in loader:
        samples += len(batch)
        nbytes += sum(batch)
    return meter.report(args, peer="s3torchconnector S3IterableDataset + webdataset", uri=args.uri,
                        workers=workers, samples=samples, bytes=nbytes)


def main() -> None:
    args = parse_args(__doc__, "s3://bench-shards/train/", "0,2,4")
    print_best([measure(args, workers) for workers in args.workers])


if __name__ == "__main__":
    main()
