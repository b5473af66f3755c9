"""Peer of `bucketload ckpt-bench`: the Amazon S3 Connector for PyTorch's checkpoints, as its
documentation shows them: `torch.save(state_dict, checkpoint.writer(uri))` and
`torch.load(checkpoint.reader(uri))` with `S3Checkpoint(region=…, endpoint=…)`, plus the same
save and load through a local file (`torch.save(state, path)`, fsync'd) for the disk row.
With `--tool bucketload`, the same state saved and loaded through bucketload's Python API
instead (`bucketload.checkpoint.save(state, uri)` and `load(uri)`), in the same interpreter.

The state dict holds `--tensors` float32 tensors of `--size` random values in all
(incompressible, like trained weights). Each save and load is timed in wall time and in this
process's CPU time (every thread, user and system). Writes one log per target in the keys
`bucketload report` reads (`ckpt.target`, `ckpt.mode`, `ckpt.times`, `ckpt.load_times`, plus
`ckpt.cpu_times` and `ckpt.load_cpu_times`), tool `s3torchconnector`, `bucketload-python`
(or `torch` for disk).

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
    ap.add_argument("--tensors", type=int, default=32, help="float32 tensors sharing --size")
    ap.add_argument("--tool", choices=["s3torchconnector", "bucketload"], default="s3torchconnector")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--vs", default=None, help="a local directory for the disk row")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--name", default="s3torch-ckpt")
    args = ap.parse_args()
    if not args.endpoint:
        ap.error("no endpoint: pass --endpoint or set AWS_ENDPOINT_URL")

    gen = torch.Generator().manual_seed(0)
    per_tensor = args.size // 4 // args.tensors
    state = {f"layer{i}.weight": torch.rand(per_tensor, generator=gen) for i in range(args.tensors)}
    save, load = savers(args)
    uri = args.uri.rstrip("/") + f"/{args.tool}-ckpt.pt"
    rows = {"s3": ([], []), "disk": ([], [])}
    cpu = ([], [])
    for run in range(args.runs):
        started, cpu_started = time.monotonic(), time.process_time()
        save(state, uri)
        rows["s3"][0].append(time.monotonic() - started)
        cpu[0].append(time.process_time() - cpu_started)
        started, cpu_started = time.monotonic(), time.process_time()
        back = load(uri)
        rows["s3"][1].append(time.monotonic() - started)
        cpu[1].append(time.process_time() - cpu_started)
        if run == 0:
            assert all(torch.equal(back[k], state[k]) for k in state), "read back differs"
        del back
        print(f"s3 run {run + 1}: save {rows['s3'][0][-1]:.2f} s (cpu {cpu[0][-1]:.2f} s), "
              f"load {rows['s3'][1][-1]:.2f} s (cpu {cpu[1][-1]:.2f} s)", flush=True)
        if args.vs and args.tool == "s3torchconnector":
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
        gb = args.size / 1e9
        print(f"{target}: save {mean(saves):.2f} s ({gb / mean(saves):.2f} GB/s), "
              f"load {mean(loads):.2f} s ({gb / mean(loads):.2f} GB/s)")
        times = {}
        if target == "s3":
            print(f"{target}: cpu per GB: save {mean(cpu[0]) / gb:.2f} s, load {mean(cpu[1]) / gb:.2f} s")
            times = {"cpu_times": cpu[0], "load_cpu_times": cpu[1]}
        if args.log_dir:
            name = f"{args.name}-{target}-sync"
            tool = {"s3torchconnector": "s3torchconnector", "bucketload": "bucketload-python"}[args.tool]
            log = {"schema_version": 1, "name": name,
                   "tool": tool if target == "s3" else "torch",
                   "ckpt": {"target": target, "mode": "sync", "size_bytes": args.size,
                            "times": saves, "load_times": loads, **times},
                   "t_ckpt_ave": mean(saves),
                   **{f"t_ckpt_{i + 1}": t for i, t in enumerate(saves)}}
            os.makedirs(args.log_dir, exist_ok=True)
            with open(os.path.join(args.log_dir, f"{name}.json"), "w") as f:
                json.dump(log, f, indent=2)


def savers(args: argparse.Namespace):
    """`save(state, uri)` and `load(uri)` of the tool measured."""
    if args.tool == "bucketload":
        from bucketload import checkpoint as bl

        def save(state, uri):
            bl.save(state, uri, endpoint=args.endpoint, region=args.region)

        def load(uri):
            return bl.load(uri, endpoint=args.endpoint, region=args.region, weights_only=True)

        return save, load

    from s3torchconnector import S3Checkpoint

    from peer_common import client_config

    checkpoint = S3Checkpoint(region=args.region, endpoint=args.endpoint, s3client_config=client_config())

    def save(state, uri):
        with checkpoint.writer(uri) as writer:
            torch.save(state, writer)

    def load(uri):
        with checkpoint.reader(uri) as reader:
            return torch.load(reader, weights_only=True)

    return save, load


if __name__ == "__main__":
    main()
