#!/usr/bin/env bash
# Build a local stand-in of the lent GPU machine's python3, for tests/test_gpu_check_dry_run.py:
# Python 3.12 with what that image holds of what aorta imports (torch 2.11.0, the PyPI build: CUDA
# 13, about 4.8 GB; click, rich, numpy, matplotlib, and attrs and typing-extensions, which
# jsonschema needs; the device tool's KINDS.md lists the image) and nothing else: no jsonschema,
# no hatchling, no aorta.
#   bash bench/lent_python.sh [--python PY312] [DEST]
# DEST defaults to ~/.cache/aorta-lent-python, where the test looks; PY312 to python3.12 on PATH
# (with pyenv: --python ~/.pyenv/versions/3.12.1/bin/python). Needs a package index (PyPI); the
# test skips while the folder is absent.
set -euo pipefail
python=python3.12
if [ "${1:-}" = "--python" ]; then python=$2; shift 2; fi
dest=${1:-"$HOME/.cache/aorta-lent-python"}
if ! "$python" -c 'import sys; raise SystemExit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
  echo "lent_python: '$python' is not a working Python 3.12 (use --python PATH)" >&2
  exit 2
fi
if [ -e "$dest" ] && [ ! -x "$dest/bin/python" ]; then
  echo "lent_python: $dest exists and is not a virtual environment; remove it first" >&2
  exit 2
fi
"$python" -m venv "$dest"
# PIP_CONSTRAINT: this development machine's pip constraint file pins torch for Python 3.11 only
PIP_CONSTRAINT="" "$dest/bin/python" -m pip install -q --disable-pip-version-check \
  torch==2.11.0 click rich numpy matplotlib attrs typing-extensions
"$dest/bin/python" -c 'import sys, torch; print("lent_python:", sys.version.split()[0], "torch", torch.__version__)'
