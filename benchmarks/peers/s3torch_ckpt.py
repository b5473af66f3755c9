"""Peer of `bucketload ckpt-bench`: the Amazon S3 Connector for PyTorch's checkpoints, as its
documentation shows them: `torch.save(state_dict, checkpoint.writer(uri))` and
`torch.load(checkpoint.reader(uri))` with `S3Checkpoint(region=…, endpoint=…)`, plus the same
save and load through a local file (`torch.save(state, path)`, fsync'd) for the disk row.

The state dict holds one uint8 tensor of `--size` random bytes (incompressible, like trained
weights). Writes one log per target in the keys `bucketload report` reads (`ckpt.target`,
`ckpt.mode`, `ckpt.times`, `ckpt.load_times`), tool `s3torchconnector` (or `torch` for disk).

    .venv-bench/bin/python benchmarks/peers/s3torch_ckpt.py --endpoint http://127.0.0.1:9000 \\
        --uri s3://ckpt/peer/ --size 1GiB --runs 3 --vs /tmp/ckpt-disk --log-dir logs

Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from s3torchconnector import S3Checkpoint

from peer_common import client_config

UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def size(text: str) -> int:
    num = text.rstrip("".join(sorted({c for u in UNITS for c in u})))
    return int(float(num) * UNITS[text[len(num):]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"))
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    ap.add_argument("--uri", required=True, help="prefix, s3://bucket/prefix/")
    ap.add_argument("--size", type=size, default=1 << 30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--vs", default=None, help="a local directory for the disk row")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--name", default="s3torch-ckpt")
    args = ap.parse_args()
    if not args.endpoint:
        ap.error("no endpoint: pass --endpoint or set AWS_ENDPOINT_URL")

    state = {"weights": torch.randint(0, 256, (args.size,), dtype=torch.uint8)}
    checkpoint = S3Checkpoint(region=args.region, endpoint=args.endpoint, s3client_config=client_config())
    uri = args.uri.rstrip("/") + "/s3torch-ckpt.pt"
    rows = {"s3": ([], []), "disk": ([], [])}
    for run in range(args.runs):
        started = time.monotonic()
        with checkpoint.writer(uri) as writer:
            torch.save(state, writer)
        rows["s3"][0].append(time.monotonic() - started)
        started = time.monotonic()
        with checkpoint.reader(uri) as reader:
            back = torch.load(reader, weights_only=True)
        rows["s3"][1].append(time.monotonic() - started)
        if run == 0:
            assert torch.equal(back["weights"], state["weights"]), "read back differs"
        del back
        print(f"s3 run {run + 1}: save {rows['s3'][0][-1]:.2f} s, load {rows['s3'][1][-1]:.2f} s", flush=True)
        if args.vs:
            os.makedirs(args.vs, exist_ok=True)
            path = os.path.join(args.vs, "s3torch-ckpt.pt")
            started = time.monotonic()
            with open(path, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            rows["disk"][0].append(time.monotonic() - started)
            started = time.monotonic()
            back = torch.load(path, weights_only=True)
            rows["disk"][1].append(time.monotonic() - started)
            del back
            print(f"disk run {run + 1}: save {rows['disk'][0][-1]:.2f} s, load {rows['disk'][1][-1]:.2f} s",
                  flush=True)
    for target, (saves, loads) in rows.items():
        if not saves:
            continue
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        print(f"{target}: save {mean(saves):.2f} s ({args.size / 1e9 / mean(saves):.2f} GB/s), "
              f"load {mean(loads):.2f} s ({args.size / 1e9 / mean(loads):.2f} GB/s)")
        if args.log_dir:
            name = f"{args.name}-{target}-sync"
            log = {"schema_version": 1, "name": name,
                   "tool": "s3torchconnector" if target == "s3" else "torch",
                   "ckpt": {"target": target, "mode": "sync", "size_bytes": args.size,
                            "times": saves, "load_times": loads},
                   "t_ckpt_ave": mean(saves),
                   **{f"t_ckpt_{i + 1}": t for i, t in enumerate(saves)}}
            os.makedirs(args.log_dir, exist_ok=True)
            with open(os.path.join(args.log_dir, f"{name}.json"), "w") as f:
                json.dump(log, f, indent=2)


if __name__ == "__main__":
    main()
