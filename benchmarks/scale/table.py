"""The table of scripts/bench-scale.sh from its results.jsonl: one row per case, then the
catalog's bytes per sample of files datasets (slope of peak RSS between the smallest and the
largest count)."""

from __future__ import annotations

import json
import re
import sys


def cell(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def main() -> None:
    with open(sys.argv[1]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print("| case | open s | first batch s | share s | samples | peak RSS MB | status |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        status = (
            "ok"
            if r["status"] == 0
            else (
                f"timed out after {r['timed_out_after_s']} s"
                if "timed_out_after_s" in r
                else "killed (memory cap)"
                if "killed" in r
                else f"exit {r['status']}"
            )
        )
        print(
            f"| {r['case']} | {cell(r.get('open_s'))} | {cell(r.get('first_batch_s'))} "
            f"| {cell(r.get('share_s') or r.get('wall_s'))} | {r.get('samples', '—')} "
            f"| {cell(r.get('peak_rss_mb'), 0)} | {status} |"
        )
    files = []
    for r in rows:
        m = re.match(r"cli files (\d+) objects", r["case"])
        if m and r["status"] == 0 and r.get("peak_rss_mb") is not None:
            files.append((int(m.group(1)), r["peak_rss_mb"]))
    if len(files) >= 2:
        (n0, m0), (n1, m1) = min(files), max(files)
        slope = (m1 - m0) * 1024 * 1024 / (n1 - n0)
        print(
            f"\nfiles catalog: {slope:.1f} bytes per sample (peak RSS slope, {n0:,} → {n1:,} objects)"
        )


if __name__ == "__main__":
    main()
