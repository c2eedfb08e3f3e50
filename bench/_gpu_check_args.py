"""Command line shared by the prepared GPU check scripts (bench/gpu_check.py, policy_gpu_check.py)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def parse_check_args(description: str, temp_prefix: str) -> tuple[argparse.Namespace, Path]:
    """--device, --iterations, --out; returns the arguments and the (created) output folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--iterations", default="20")
    parser.add_argument("--out", default=None, help="keep the result JSON files here")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix=temp_prefix))
    out.mkdir(parents=True, exist_ok=True)
    return args, out
