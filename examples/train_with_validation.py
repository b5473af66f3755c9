"""Training with a validation pass after every epoch, both read by ``bucketload.Loader``.

The training loader draws torchvision's ``RandomResizedCrop`` + flip (``augment="train"``, a new
order and new crops every epoch); the validation loader applies the evaluation transform
(``augment="eval"``: resize of the shorter side to ``round(image_size / 0.875)``, centre crop,
no flip) in dataset order (``shuffle=False``). The model is a small CNN so that the script runs
on a laptop's CPU; put your own in ``model()``.

    bucketload gen s3://demo/train --samples 2000 --classes 10
    bucketload gen s3://demo/val --samples 500 --classes 10 --seed 1
    python examples/train_with_validation.py --train s3://demo/train --val s3://demo/val \\
        --epochs 3 --image-size 64

Credentials, region and endpoint come from the AWS environment (AWS_ENDPOINT_URL for a local
server). With several ranks (torchrun), sum ``correct`` and ``seen`` over ranks with
``torch.distributed.all_reduce`` before dividing.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import bucketload


def model(classes: int) -> nn.Module:
    """A small CNN: three strided convolutions, global pooling, a linear classifier."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes),
    )


def train_epoch(net: nn.Module, loader: bucketload.Loader, optimiser: torch.optim.Optimizer,
                device: torch.device) -> float:
    """One epoch of training; returns the mean loss."""
    net.train()
    total, batches = 0.0, 0
    for images, labels in loader:
        images, labels = images.to(device, non_blocking=True), labels.to(device)
        loss = nn.functional.cross_entropy(net(images), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        total += loss.item()
        batches += 1
    return total / max(batches, 1)


@torch.no_grad()
def validate(net: nn.Module, loader: bucketload.Loader, device: torch.device) -> tuple[int, int]:
    """``(correct, seen)`` over one pass of the validation set."""
    net.eval()
    correct = seen = 0
    for images, labels in loader:
        predicted = net(images.to(device, non_blocking=True)).argmax(dim=1).cpu()
        correct += int((predicted == labels).sum())
        seen += len(labels)
    return correct, seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True, help="training set, e.g. s3://demo/train")
    ap.add_argument("--val", required=True, help="validation set, e.g. s3://demo/val")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    a = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train = bucketload.Loader(a.train, batch_size=a.batch_size, image_size=a.image_size, seed=0)
    val = bucketload.Loader(a.val, batch_size=a.batch_size, image_size=a.image_size,
                            augment="eval", shuffle=False)
    net = model(a.classes).to(device)
    optimiser = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    for epoch in range(a.epochs):
        started = time.perf_counter()
        loss = train_epoch(net, train, optimiser, device)
        correct, seen = validate(net, val, device)
        print(f"epoch {epoch}: train loss {loss:.3f}, val accuracy {correct / max(seen, 1):.3f} "
              f"({correct}/{seen}), {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
