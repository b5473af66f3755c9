"""One rank of a large job reading its share through bucketload.Loader, for
scripts/bench-scale.sh: prints one JSON line with the seconds to construct the loader (and take
its len()), then from there to its first batch and to the end of the share, the samples read, len() and the peak RSS.

    open_py.py URI FORMAT RANK WORLD [--batch-size 64] [--without-torch]

`--without-torch` hides torch from bucketload (which imports it when it is installed, for its
tensors), for the loader's own memory without torch's import (about 600 MB of peak RSS).
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("format")
    p.add_argument("rank", type=int)
    p.add_argument("world", type=int)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--without-torch", action="store_true")
    a = p.parse_args()
    if a.without_torch:
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises
    bucketload = importlib.import_module("bucketload")
    started = time.monotonic()
    loader = bucketload.Loader(
        a.uri,
        format=a.format,
        rank=a.rank,
        world_size=a.world,
        batch_size=a.batch_size,
        decode=False,
    )
    batches = len(loader)
    opened = time.monotonic()
    samples = 0
    first = None
    for batch in loader:
        samples += len(batch["label"]) if isinstance(batch, dict) else len(batch)
        if first is None:
            first = time.monotonic()
    done = time.monotonic()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "open_s": round(opened - started, 3),
                "first_batch_s": round((first or done) - opened, 3),
                "share_s": round(done - opened, 3),
                "samples": samples,
                "batches": batches,
                "peak_rss_mb": round(rss_kb / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
