"""Train an image classifier from object storage with a validation loop, on bucketload.

The training set is read with augmentation (RandomResizedCrop + flip), the validation set
with the evaluation transform (resize the shorter side, centre crop) in dataset order, each
sample exactly once across ranks (``shuffle=False, pad=False``), so the accuracy counts every
validation image once. At the end of every epoch (and every ``--ckpt-steps`` steps) rank 0
saves the model, the optimiser and the training loader's position with
``bucketload.checkpoint.save``; ``--resume`` continues from the newest checkpoint mid-epoch,
also on another number of processes.

    # one process
    python examples/train.py --train s3://demo/train --val s3://demo/val --epochs 2

    # two processes (CPU: gloo; GPUs: nccl), resumable
    torchrun --nproc-per-node 2 examples/train.py --train s3://demo/train \\
        --val s3://demo/val --ckpt-uri s3://demo/ckpt --resume

Credentials, region and endpoint come from the AWS environment (AWS_ENDPOINT_URL for a
local server, e.g. ``bucketload serve``). Run ``bucketload gen s3://demo/train`` and
``bucketload gen s3://demo/val --seed 1`` for a synthetic pair of datasets to try it on.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn

import bucketload
from bucketload import checkpoint
from bucketload.errors import NotFoundError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="training set, e.g. s3://demo/train")
    ap.add_argument("--val", required=True, help="validation set, e.g. s3://demo/val")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--model", default="small", choices=["small", "resnet18"],
                    help="a small CNN (CPU friendly) or torchvision's ResNet-18")
    ap.add_argument("--ckpt-uri", default=None, help="checkpoint prefix, e.g. s3://demo/ckpt")
    ap.add_argument("--ckpt-steps", type=int, default=0,
                    help="also checkpoint every N steps (0: at the end of each epoch only)")
    ap.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    ap.add_argument("--max-steps", type=int, default=0,
                    help="stop after N training steps in total (0: run every epoch)")
    ap.add_argument("--metrics", default=None, help="append a JSON line per epoch to this file")
    return ap.parse_args(argv)


def small_cnn(num_classes: int) -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True), nn.MaxPool2d(2))
    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


def build_model(name: str, num_classes: int) -> nn.Module:
    if name == "resnet18":
        import torchvision  # type: ignore[import-untyped]
        resnet: nn.Module = torchvision.models.resnet18(num_classes=num_classes)
        return resnet
    return small_cnn(num_classes)


def evaluate(model: nn.Module, loader: bucketload.Loader, device: torch.device) -> dict[str, float]:
    """Top-1 accuracy and mean loss over the whole validation set, every image counted once.

    Ranks may hold one image more or less (``pad=False``), so no collective runs per batch:
    each rank sums its own counts and one all-reduce adds them up at the end."""
    model.eval()
    loss_fn = nn.CrossEntropyLoss(reduction="sum", ignore_index=-1)
    sums = torch.zeros(3, dtype=torch.float64)  # loss, correct, images
    with torch.no_grad():
        for batch in loader:
            images, labels = batch.images.to(device), batch.labels.to(device)
            logits = model(images)
            sums[0] += loss_fn(logits, labels).item()
            sums[1] += (logits.argmax(1) == labels).sum().item()
            sums[2] += len(labels)
    if dist.is_initialized():
        dist.all_reduce(sums)
    model.train()
    images = max(sums[2].item(), 1.0)
    return {"val_loss": sums[0].item() / images, "val_accuracy": sums[1].item() / images,
            "val_images": int(sums[2].item())}


def latest(ckpt_uri: str) -> str:
    return f"{ckpt_uri.rstrip('/')}/latest.pt"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = torch.device("cpu")
    if distributed:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    rank = dist.get_rank() if distributed else 0

    train = bucketload.Loader(args.train, batch_size=args.batch_size,
                              image_size=args.image_size, shuffle=True, seed=0, drop_last=True)
    val = bucketload.Loader(args.val, batch_size=args.batch_size, image_size=args.image_size,
                            augment="eval", shuffle=False, pad=False)

    torch.manual_seed(0)
    model = build_model(args.model, args.num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    if args.resume and args.ckpt_uri:
        try:
            state = checkpoint.load(latest(args.ckpt_uri), map_location="cpu", weights_only=False)
        except NotFoundError:
            state = None  # nothing saved yet: start afresh
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            train.load_state_dict(state["loader"])  # also from another number of processes
            step = state["step"]
            if rank == 0:
                print(f"resumed at step {step}, epoch {train.epoch}", flush=True)
    trained: nn.Module = model
    if distributed:
        trained = nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-1)

    def save() -> None:
        if args.ckpt_uri and rank == 0:
            # The loader's state from rank 0 resumes every rank: ranks step in lockstep.
            checkpoint.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "loader": train.state_dict(), "step": step}, latest(args.ckpt_uri))
        if distributed:
            dist.barrier()

    while train.epoch < args.epochs:
        epoch, started, seen = train.epoch, time.perf_counter(), 0
        for batch in train:
            images = batch.images.to(device, non_blocking=True)
            labels = batch.labels.to(device)
            loss = loss_fn(trained(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step, seen = step + 1, seen + len(labels)
            if args.ckpt_steps and step % args.ckpt_steps == 0:
                save()
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            # Possibly left mid-epoch: the loader's state says where, and a resume continues
            # there.
            save()
            break
        metrics = {"epoch": epoch, "step": step, "train_images": seen,
                   "train_seconds": time.perf_counter() - started, **evaluate(model, val, device)}
        save()
        if rank == 0:
            print(json.dumps(metrics), flush=True)
            if args.metrics:
                with open(args.metrics, "a") as log:
                    log.write(json.dumps(metrics) + "\n")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
