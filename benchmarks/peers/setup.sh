#!/usr/bin/env bash
# Makes .venv-bench, the Python environment of the loader's peer benchmarks (PyTorch, the
# Amazon S3 Connector for PyTorch, WebDataset, boto3), from the pinned
# benchmarks/peers/requirements.txt, about 4 GB: PyPI's only Linux torch is the CUDA build,
# installed here with the CUDA libraries it links and without those it never loads on a CPU
# (see requirements.txt). Not used by CI.
# Safe to run again: it reinstalls only when requirements.txt changed.
# Usage: benchmarks/peers/setup.sh            (prints the venv's python on success)
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv-bench
. benchmarks/peers/venv-lib.sh
# requirements.txt lists every dependency, minus the CUDA wheels.
make_venv "$venv" benchmarks/peers/requirements.txt "PyTorch, s3torchconnector and WebDataset"
# The install is only good if torch imports without the CUDA libraries and a DataLoader
# with worker processes runs.
"$venv/bin/python" - <<'PY'
import torch
from torch.utils.data import DataLoader
import s3torchconnector, webdataset, boto3  # noqa: F401

batches = list(DataLoader(list(range(8)), batch_size=4, num_workers=2))
assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]], batches
PY
echo "$PWD/$venv/bin/python"
