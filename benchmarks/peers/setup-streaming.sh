#!/usr/bin/env bash
# Makes .venv-peers, the Python environment of the streaming peers of the cache benchmark
# (scripts/bench-peers.sh): MosaicML Streaming and LitData, with PyTorch, torchvision and boto3,
# from the pinned benchmarks/peers/requirements-streaming.txt, about 4 GB. Apart from
# .venv-bench because MosaicML Streaming pins numpy < 2.2. PyPI's only Linux torch is the CUDA
# build, installed with the CUDA libraries it links and without those it never loads on a CPU
# (see requirements.txt). Not used by CI.
# Safe to run again: it reinstalls only when requirements-streaming.txt changed.
# Usage: benchmarks/peers/setup-streaming.sh     (prints the venv's python on success)
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv-peers
. benchmarks/peers/venv-lib.sh
# requirements-streaming.txt lists every dependency, minus the CUDA wheels and the clients of
# other clouds.
make_venv "$venv" benchmarks/peers/requirements-streaming.txt "PyTorch, MosaicML Streaming and LitData"
# The install is only good if both peers import (with the writers and datasets the benchmark
# uses), numpy is the one MosaicML Streaming accepts, and a DataLoader with workers runs.
"$venv/bin/python" - <<'PY'
import numpy
import torch
import torchvision.transforms.v2  # noqa: F401
from torch.utils.data import DataLoader
from streaming import MDSWriter, StreamingDataset  # noqa: F401
from litdata import StreamingDataLoader, StreamingDataset as LitDataset, optimize  # noqa: F401
import boto3  # noqa: F401

assert tuple(int(part) for part in numpy.__version__.split(".")[:2]) < (2, 2), numpy.__version__
batches = list(DataLoader(list(range(8)), batch_size=4, num_workers=2))
assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]], batches
PY
echo "$PWD/$venv/bin/python"
