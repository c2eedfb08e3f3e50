"""Command line shared by the prepared GPU check scripts (bench/gpu_check.py, policy_gpu_check.py)."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path


def parse_check_args(
    description: str, temp_prefix: str, extend: Callable[[argparse.ArgumentParser], None] | None = None
) -> tuple[argparse.Namespace, Path]:
    """--device, --iterations, --out (+ a script's own); the arguments and the (created) out folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--iterations", default="20")
    parser.add_argument("--out", default=None, help="keep the result JSON files here")
    if extend is not None:
        extend(parser)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix=temp_prefix))
    out.mkdir(parents=True, exist_ok=True)
    return args, out
