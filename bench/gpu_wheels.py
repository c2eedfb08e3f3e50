"""Save the wheels bench/gpu_check.py needs on a lent GPU machine into .gpu-wheels/ (run it here).

The lent machine's python3 (3.12, torch 2.11) lacks jsonschema and its own needs (attrs and
typing-extensions are there); it has no network, so the wheels travel with the tree in the ignored
folder `.gpu-wheels/` and gpu_check.py installs them `--no-index` into a private folder.
Usage: python bench/gpu_wheels.py [--python-version 3.12] [--dest .gpu-wheels]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: what the lent image lacks: jsonschema and the packages it needs beyond attrs/typing-extensions
PACKAGES = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def download_command(python_version: str, dest: Path) -> list[str]:
    """pip download of PACKAGES as binary wheels for that CPython on x86-64 Linux."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    return [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp", *platforms,
            "-d", str(dest), *PACKAGES]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", default="3.12", help="the lent machine's python3")
    parser.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent.parent / ".gpu-wheels")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    rc = subprocess.run(download_command(args.python_version, args.dest), check=False).returncode
    if rc == 0:
        print("\n".join(sorted(p.name for p in args.dest.glob("*.whl"))))
    return rc


if __name__ == "__main__":
    sys.exit(main())
