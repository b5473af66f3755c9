"""The table of scripts/bench-scale.sh from its results.jsonl: one row per case, then the
catalog's bytes per sample of files datasets (slope of peak RSS between the smallest and the
largest count), then the order's figures and checks (benchmarks/scale/order_py.py)."""

from __future__ import annotations

import json
import re
import sys

ORDER_CASE = re.compile(r"python (order|resume|mixture) ")


def cell(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def main() -> None:
    with open(sys.argv[1]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print("| case | open s | first batch s | share s | samples | peak RSS MB | status |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if ORDER_CASE.match(r["case"]):
            continue
        status = status_text(r)
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
    order_table(rows)


def status_text(r: dict) -> str:
    if r["status"] == 0:
        return "ok"
    if "timed_out_after_s" in r:
        return f"timed out after {r['timed_out_after_s']} s"
    return "killed (memory cap)" if "killed" in r else f"exit {r['status']}"


def checks(r: dict) -> str:
    """What order_py.py checked, in words; the status where the case did not run to its end."""
    if r["status"] != 0:
        return status_text(r)
    said = [f"{r.get('duplicates', '—')} duplicates"]
    if "counts_ok" in r:
        said.append(
            f"new ranks {r['new_ranks_checked']} read {r['expected_new_rank_samples']} each: "
            f"{'yes' if r['counts_ok'] else 'NO'}; new rank 0 = old ranks {r['old_ranks_checked']}'s "
            f"unconsumed: {'yes' if r['new_rank_0_is_the_unconsumed'] else 'NO'}"
        )
    if "resumed_same_world_ok" in r:
        said.append(f"per dataset {r['per_dataset']}")
        said.append(
            f"resumed at {r['resumed_at']} = uninterrupted: "
            f"{'yes' if r['resumed_same_world_ok'] else 'NO'}"
        )
    return "; ".join(said)


def order_table(rows: list[dict]) -> None:
    rows = [r for r in rows if ORDER_CASE.match(r["case"])]
    if not rows:
        return
    print("\n| case | open (restore) s | first batch s | share s | shards per batch (ideal) "
          "| Spearman ρ | checks | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        per_batch = (
            f"{r['shards_per_batch']} ({r['shards_per_batch_ideal']})"
            if r.get("shards_per_batch") is not None
            else "—"
        )
        print(
            f"| {r['case']} | {cell(r.get('open_s', r.get('restore_s')))} "
            f"| {cell(r.get('first_batch_s'))} | {cell(r.get('share_s', r.get('rest_s')))} "
            f"| {per_batch} | {r.get('spearman', '—')} | {checks(r)} "
            f"| {cell(r.get('peak_rss_mb'), 0)} |"
        )


if __name__ == "__main__":
    main()
