"""The cache benchmark's table (scripts/bench-peers.sh): the JSON lines of bucketload_cache.py
and streaming_cache.py in, one markdown table out. A row per tool, mode, cache and DataLoader
workers ("-": bucketload, which reads and decodes on its own threads); per latency, samples/s
and time to first batch, as the median of the runs with their min–max when there was more than
one run; then, per mode and latency, bucketload's cold epoch with a cache against its epoch
without one.

    python3 benchmarks/peers/cache_table.py results.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from typing import Any

TOOLS = {"bucketload": "bucketload", "bucketload-ttl": "bucketload, metadata_ttl=indefinite",
         "bucketload-indexed": "bucketload, indexed",
         "bucketload-indexed-ttl": "bucketload, indexed, metadata_ttl=indefinite",
         "mosaic": "MosaicML Streaming", "litdata": "LitData"}
MODES = ["raw", "decoded"]
CACHES = ["none", "cold", "warm"]


def spread(values: list[float], digits: int) -> str:
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) == 1:
        return median
    return f"{median} ({min(values):.{digits}f}–{max(values):.{digits}f})"


Line = dict[str, Any]
# tool, mode, cache (indices into TOOLS, MODES, CACHES: the table's order) and workers (-1: none).
Row = tuple[int, int, int, int]


def row_of(line: Line) -> Row:
    workers = -1 if line["workers"] is None else int(line["workers"])
    return (list(TOOLS).index(line["tool"]), MODES.index(line["mode"]),
            CACHES.index(line["cache"]), workers)


def bucketload_rate(lines: list[Line], mode: str, latency: str, cache: str) -> float | None:
    """bucketload's median samples/s in one mode, latency and cache."""
    rates = [line["samples_per_s"] for line in lines if line["tool"] == "bucketload"
             and line["mode"] == mode and line["latency"] == latency and line["cache"] == cache]
    return statistics.median(rates) if rates else None


def main() -> None:
    lines: list[Line] = []
    for path in sys.argv[1:]:
        with open(path) as f:
            lines += [json.loads(text) for text in f if text.startswith("{")]
    failed = [line for line in lines if line.get("failed")]
    lines = [line for line in lines if not line.get("failed")]
    if not lines:
        raise SystemExit("no measurements")
    latencies = list(dict.fromkeys(line["latency"] for line in lines))
    cells: dict[Row, dict[str, list[Line]]] = defaultdict(lambda: defaultdict(list))
    for line in lines:
        cells[row_of(line)][line["latency"]].append(line)
    head = ["tool", "mode", "cache", "workers"]
    for latency in latencies:
        head += [f"samples/s at {latency}", f"first batch s at {latency}"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in sorted(cells):
        tool, mode, cache, workers = row
        out = [TOOLS[list(TOOLS)[tool]], MODES[mode], CACHES[cache],
               "-" if workers < 0 else str(workers)]
        for latency in latencies:
            cell = cells[row].get(latency, [])
            out += [spread([line["samples_per_s"] for line in cell], 0) if cell else "",
                    spread([line["first_batch_s"] for line in cell], 2) if cell else ""]
        print("| " + " | ".join(out) + " |")
    samples = sorted({line["samples"] for line in lines})
    runs = max(len(cell) for by_latency in cells.values() for cell in by_latency.values())
    print(f"\n{', '.join(map(str, samples))} samples per epoch; "
          + ("one run." if runs == 1 else f"median (min–max) of {runs} runs."))
    for line in failed:
        print(f"{TOOLS[line['tool']]} {line['mode']} ({line['workers']} workers) at "
              f"{line['latency']}, run {line['run']}: failed (its cold and warm epochs are "
              "missing from the table)")
    for mode_name in MODES:
        for latency in latencies:
            cold = bucketload_rate(lines, mode_name, latency, "cold")
            none = bucketload_rate(lines, mode_name, latency, "none")
            if cold and none:
                print(f"bucketload {mode_name} at {latency}: "
                      f"cold with cache / no cache = {cold / none:.2f}")


if __name__ == "__main__":
    main()
