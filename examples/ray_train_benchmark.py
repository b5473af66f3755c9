"""The workshop's training benchmark as a Ray Train job (``TorchTrainer``) on bucketload.

Each Train worker runs the model mock of ``examples/benchmark.py``: it reads its own
partition with ``bucketload.Loader`` (rank and world size come from Ray Train; nothing to
pass), waits ``--compute-ms`` per batch, and every ``--ckpt-steps`` steps rank 0 saves the
mock's state with ``bucketload.checkpoint.save``. With ``--input ray-data`` the workers
instead consume a Ray Data stream: ``bucketload.ray.read_images`` reads and decodes the
samples with bucketload's engine in Ray Data's read tasks, on any CPU of the cluster, and
each worker takes its shard with ``get_dataset_shard("train")``.

The workers' counts are gathered by a Ray actor and the driver writes one JSON log
with the workshop's keys (``training_time``, ``samples_per_second``,
``samples_processed_total``, ``t_epoch_1``…, ``t_ckpt_1``…, ``t_ckpt_ave``), which
``bucketload report`` draws next to ``bucketload bench`` and ``examples/benchmark.py``.

    # a local Ray cluster of this machine's CPUs
    python examples/ray_train_benchmark.py --uri s3://demo/train --workers 2 --log-dir logs

    # submitted to a running cluster (docs/RAY.md)
    ray job submit --working-dir . -- python examples/ray_train_benchmark.py \\
        --address auto --uri s3://bucket/train --workers 8 --ckpt-steps 100 \\
        --ckpt-uri s3://bucket/ckpt --log-dir /tmp/logs

Credentials, region and endpoint come from the AWS environment of the driver and are passed
to every worker (``runtime_env``); on a cluster they can come from instance roles instead.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any

import ray
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

from benchmark import add_arguments, finish_log  # examples/benchmark.py, beside this file


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)  # examples/benchmark.py's flags
    ap.add_argument("--input", default="loader", choices=["loader", "ray-data"],
                    help="per-worker bucketload.Loader, or a Ray Data stream (bucketload.ray.read_images)")
    ap.add_argument("--workers", type=int, default=2, help="Ray Train workers")
    ap.add_argument("--cpus-per-worker", type=float, default=1.0)
    ap.add_argument("--address", default=None,
                    help="Ray cluster to join ('auto' for a running one); default: start a local one")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local cluster")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None, help="log name (default: ray-<input>-<workers>w)")
    args = ap.parse_args()
    if args.ckpt_steps and not args.ckpt_uri:
        ap.error("--ckpt-steps needs --ckpt-uri")
    if args.name is None:
        args.name = f"ray-{args.input}-{args.workers}w"
    return args


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: the model mock of examples/benchmark.py."""
    import torch

    import bucketload
    import ray.train
    from bucketload import checkpoint

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    if config["input"] == "loader":
        loader = bucketload.Loader(
            config["uri"], format=config["format"], batch_size=config["batch_size"],
            image_size=config["image_size"], seed=config["seed"], concurrency=config["concurrency"],
            decode_threads=config["decode_threads"], cache_dir=config["cache_dir"],
        )

        def batches(epoch: int):
            loader.set_epoch(epoch)
            yield from loader
    else:
        shard = ray.train.get_dataset_shard("train")

        def batches(epoch: int):
            for batch in shard.iter_torch_batches(batch_size=config["batch_size"]):
                yield batch["image"], batch["label"]

    weights = {"w": torch.zeros(config["ckpt_size_mb"] * (1 << 20) // 4)} if config["ckpt_steps"] else {}
    epochs: list[float] = []
    ckpts: list[float] = []
    pending = []
    samples = steps = 0
    compute_s = 0.0
    start = time.perf_counter()
    for epoch in range(config["epochs"]):
        epoch_start = time.perf_counter()
        for images, labels in batches(epoch):
            _ = images[0, 0, 0, 0].item() + labels[0].item()
            if config["compute_ms"] > 0:
                time.sleep(config["compute_ms"] / 1000)
                compute_s += config["compute_ms"] / 1000
            samples += len(labels)
            steps += 1
            if rank == 0 and config["ckpt_steps"] and steps % config["ckpt_steps"] == 0:
                t = time.perf_counter()
                uri = f"{config['ckpt_uri'].rstrip('/')}/step-{steps:06d}.pt"
                saved = checkpoint.save(weights, uri, background=config["async_ckpt"])
                if config["async_ckpt"]:
                    pending.append(saved)
                ckpts.append(time.perf_counter() - t)
        epochs.append(time.perf_counter() - epoch_start)
    for handle in pending:
        handle.wait()
    total = time.perf_counter() - start
    config["collector"].put.remote({"rank": rank, "samples": samples, "steps": steps, "total": total,
                                    "compute_s": compute_s, "epochs": epochs, "ckpts": ckpts})
    ray.train.report({"samples": samples})


@ray.remote(num_cpus=0)
class Collector:
    """Gathers the workers' counts for the driver's log (Ray Train keeps only rank 0's
    metrics)."""

    def __init__(self) -> None:
        self.workers: list[dict[str, Any]] = []

    def put(self, worker: dict[str, Any]) -> None:
        self.workers.append(worker)

    def get(self) -> list[dict[str, Any]]:
        return self.workers


def main() -> None:
    args = parse_args()
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "BUCKETLOAD_"))}
    ray.init(address=args.address, num_cpus=None if args.address else args.num_cpus,
             runtime_env={"env_vars": env}, include_dashboard=False, log_to_driver=False)
    config = {k: getattr(args, k) for k in (
        "uri", "format", "input", "epochs", "batch_size", "image_size", "seed", "compute_ms",
        "concurrency", "decode_threads", "cache_dir", "ckpt_steps", "ckpt_uri", "ckpt_size_mb",
        "async_ckpt")}
    collector = Collector.remote()
    config["collector"] = collector
    datasets = None
    if args.input == "ray-data":
        import bucketload.ray as blr

        # Ray executes the dataset once per epoch, and each execution reads the next
        # epoch's order and crops.
        datasets = {"train": blr.read_images(
            args.uri, format=args.format, shuffle=True, seed=args.seed,
            image_size=args.image_size, concurrency=args.concurrency,
            decode_threads=args.decode_threads)}
    trainer = TorchTrainer(
        train_loop, train_loop_config=config, datasets=datasets,
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False,
                                     resources_per_worker={"CPU": args.cpus_per_worker}),
    )
    start = time.perf_counter()
    result = trainer.fit()
    wall = time.perf_counter() - start
    if result.error:
        raise result.error
    workers = ray.get(collector.get.remote())
    if len(workers) != args.workers:
        raise RuntimeError(f"{len(workers)} of {args.workers} workers reported their counts")
    ray.shutdown()

    samples = sum(w["samples"] for w in workers)
    total = max(w["total"] for w in workers)
    ckpts = next((w["ckpts"] for w in workers if w["rank"] == 0), [])
    log = {
        "schema_version": 1,
        "name": args.name,
        "tool": "bucketload-ray",
        "training_time": total,
        "samples_per_second": samples / total,
        "samples_processed_total": samples,
        "accelerator_utilization": min(1.0, sum(w["compute_s"] for w in workers) / (total * len(workers))),
        "job_time": wall,
        "config": {
            "dataset": args.uri, "format": args.format, "cache": args.cache_dir is not None,
            "epochs": args.epochs, "batch_size": args.batch_size, "image_size": args.image_size,
            "decode": True, "compute_ms": args.compute_ms, "concurrency": args.concurrency,
            "loader": "bucketload.Loader" if args.input == "loader" else "bucketload.ray.read_images",
            "workers": args.workers,
            "machine": {"host": platform.node(), "cores": os.cpu_count(),
                        "os": platform.system().lower(), "arch": platform.machine()},
        },
        **{f"t_epoch_{i + 1}": max(w["epochs"][i] for w in workers) for i in range(args.epochs)},
        "per_worker": [{"rank": w["rank"], "samples": w["samples"], "training_time": w["total"]}
                       for w in sorted(workers, key=lambda w: w["rank"])],
    }
    epoch_times = ", ".join(f"{log['t_epoch_' + str(i + 1)]:.1f}" for i in range(args.epochs))
    print(f"{args.name}: {samples} samples over {len(workers)} workers in {total:.1f} s, "
          f"{samples / total:.0f} samples/s; epochs {epoch_times} s")
    finish_log(log, ckpts, args.log_dir, args.name)


if __name__ == "__main__":
    main()
