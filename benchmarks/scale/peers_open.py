"""MosaicML Streaming and LitData opening the datasets of scripts/bench-scale.sh: the same shard
counts (N shards of 1,000 samples), each in the peer's own format, for scripts/bench-scale.sh.

    peers_open.py make DIR JPEGS      one MDS shard and one LitData chunk of the 1,000 JPEGs
    peers_open.py build DIR N         index.json files listing N shards / chunks (hard links)
    peers_open.py open DIR PEER N
                                      one JSON line: seconds to construct the dataset, to its
                                      first batch of 64 after that, peak RSS

Each shard of a dataset is a hard link to the one real shard (a copy every 60,000 links, the
most ext4 allows to one file), as bucketload's datasets are. Both peers read from a local
directory (no remote): what is measured is what they build to open a dataset of that size.
Both open as one rank of one (the whole dataset): more ranks need a torch.distributed process
group in both, and what a peer builds to open is per node anyway (MosaicML Streaming's sample
arrays cover the node's share, LitData's chunk table every chunk).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

LINKS_PER_COPY = 60_000


def lit_item(path: str) -> dict[str, object]:
    """One LitData sample: the JPEG's bytes and its class folder's number (class_003 -> 3)."""
    p = Path(path)
    return {"jpg": p.read_bytes(), "cls": int(p.parent.name.rsplit("_", 1)[-1])}


def make(out: Path, jpegs: Path) -> None:
    from litdata import optimize
    from streaming import MDSWriter

    files = sorted(jpegs.rglob("*.jpg"))[:1000]
    classes = sorted({f.parent.name for f in files})
    samples = [(f.read_bytes(), classes.index(f.parent.name)) for f in files]
    mds = out / "mds-one"
    shutil.rmtree(mds, ignore_errors=True)
    with MDSWriter(out=str(mds), columns={"jpg": "bytes", "cls": "int"}, size_limit=1 << 30) as w:
        for data, label in samples:
            w.write({"jpg": data, "cls": label})
    lit = out / "lit-one"
    shutil.rmtree(lit, ignore_errors=True)

    optimize(
        fn=lit_item,
        inputs=[str(f) for f in files],
        output_dir=str(lit),
        chunk_size=len(samples),
        num_workers=1,
    )


def linked(source: Path, targets: list[Path]) -> None:
    current = source
    for t in targets:
        if current.stat().st_nlink >= LINKS_PER_COPY:
            shutil.copyfile(source, t)
            current = t
            continue
        os.link(current, t)


def build(out: Path, n: int) -> None:
    mds_one = json.loads((out / "mds-one" / "index.json").read_text())
    shard = mds_one["shards"][0]
    mds = out / f"mds-{n}"
    shutil.rmtree(mds, ignore_errors=True)
    mds.mkdir()
    names = [f"shard.{i:07d}.mds" for i in range(n)]
    linked(out / "mds-one" / shard["raw_data"]["basename"], [mds / x for x in names])
    with open(mds / "index.json", "w") as f:
        f.write('{"version": 2, "shards": [')
        for i, name in enumerate(names):
            e = dict(shard, raw_data=dict(shard["raw_data"], basename=name))
            f.write(("," if i else "") + json.dumps(e))
        f.write("]}")
    lit_one = json.loads((out / "lit-one" / "index.json").read_text())
    chunk = lit_one["chunks"][0]
    lit = out / f"lit-{n}"
    shutil.rmtree(lit, ignore_errors=True)
    lit.mkdir()
    names = [f"chunk-0-{i}.bin" for i in range(n)]
    linked(out / "lit-one" / chunk["filename"], [lit / x for x in names])
    with open(lit / "index.json", "w") as f:
        f.write('{"chunks": [')
        for i, name in enumerate(names):
            f.write(("," if i else "") + json.dumps(dict(chunk, filename=name)))
        f.write("], " + json.dumps({"config": lit_one["config"]})[1:-1])
        f.write(', "updated_at": ' + json.dumps(lit_one.get("updated_at", "0")) + "}")


def open_peer(out: Path, peer: str, n: int) -> None:
    started = time.monotonic()
    if peer == "mosaicml-streaming":
        from streaming import StreamingDataset

        ds = StreamingDataset(local=str(out / f"mds-{n}"), shuffle=True, batch_size=64)
    else:
        from litdata import StreamingDataset as LitDataset

        ds = LitDataset(input_dir=f"local:{out / f'lit-{n}'}", shuffle=True)
    length = len(ds)
    opened = time.monotonic()
    for got, sample in enumerate(iter(ds), 1):
        assert sample is not None
        if got == 64:
            break
    first = time.monotonic()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "open_s": round(opened - started, 3),
                "first_batch_s": round(first - opened, 3),
                "len": length,
                "peak_rss_mb": round(rss_kb / 1024, 1),
            }
        )
    )


def main() -> None:
    what = sys.argv[1]
    out = Path(sys.argv[2])
    if what == "make":
        make(out, Path(sys.argv[3]))
    elif what == "build":
        build(out, int(sys.argv[3]))
    else:
        open_peer(out, sys.argv[3], int(sys.argv[4]))


if __name__ == "__main__":
    main()
