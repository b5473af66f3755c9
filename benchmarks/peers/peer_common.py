"""What the loader's peer benchmarks share: the connector's client settings for an S3-compatible
endpoint on loopback, the command line, and one JSON line per measurement.

The Amazon S3 Connector for PyTorch reads credentials from the standard AWS variables
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) through the AWS CRT; the endpoint and region are
passed explicitly, and path-style addressing is forced because a loopback endpoint has no
per-bucket host names.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings

from s3torchconnector import S3ClientConfig

# Worker counts above the core count are the point of the comparison, not a mistake.
warnings.filterwarnings("ignore", message="This DataLoader will create")


def parse_args(doc: str, default_uri: str, default_workers: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"),
                    help="S3 endpoint, e.g. http://127.0.0.1:9000 [env: AWS_ENDPOINT_URL]")
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"),
                    help="region [env: AWS_REGION; default us-east-1]")
    ap.add_argument("--uri", default=default_uri, help=f"dataset prefix [default: {default_uri}]")
    ap.add_argument("--workers", default=default_workers,
                    help=f"DataLoader worker counts to measure, comma-separated [default: {default_workers}]")
    ap.add_argument("--batch-size", type=int, default=64, help="DataLoader batch size [default: 64]")
    ap.add_argument("--label", default="", help="free text copied into every JSON line (e.g. the latency)")
    args = ap.parse_args()
    if not args.endpoint:
        ap.error("no endpoint: pass --endpoint or set AWS_ENDPOINT_URL")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if var not in os.environ:
            ap.error(f"{var} is not set: the connector signs requests with the AWS variables")
    args.workers = [int(w) for w in args.workers.split(",")]
    return args


def client_config() -> S3ClientConfig:
    """The connector's defaults (10 Gbps target, 8 MiB parts), with path-style addressing."""
    return S3ClientConfig(force_path_style=True)


class Meter:
    """Wall time and CPU time (this process and its finished children) of one measurement."""

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.cpu = _cpu_seconds()

    def report(self, args: argparse.Namespace, **fields: object) -> dict:
        seconds = time.monotonic() - self.wall
        samples, nbytes = int(fields["samples"]), int(fields["bytes"])
        line = {
            **fields,
            "seconds": round(seconds, 3),
            "samples_per_s": round(samples / seconds, 1),
            "mb_per_s": round(nbytes / 1e6 / seconds, 1),
            "cpu_seconds": round(_cpu_seconds() - self.cpu, 2),
            "batch_size": args.batch_size,
            "endpoint": args.endpoint,
            "label": args.label,
        }
        print(json.dumps(line), flush=True)
        return line


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def print_best(lines: list[dict]) -> None:
    """The best worker count, as the last line (on stderr, so stdout stays JSON lines)."""
    best = max(lines, key=lambda line: line["samples_per_s"])
    print(f"best: {best['workers']} workers, {best['samples_per_s']} samples/s, "
          f"{best['mb_per_s']} MB/s", file=sys.stderr)
