#!/usr/bin/env bash
# Install aorta into a virtual environment (.venv in this checkout) on Debian/Ubuntu (idempotent).
#   bash scripts/setup.sh          # the tool (+ bpftrace and tracefs when run as root)
#   bash scripts/setup.sh --test   # also the test tools (pytest, the pinned ruff, linters)
# Afterwards: .venv/bin/aorta-hwq …   and, for tracing, sudo .venv/bin/aorta-hwq …
#
# Why a virtual environment: Debian 12 and Ubuntu 24.04 refuse `pip install` into their python3
# (PEP 668, externally-managed-environment). torch: when $PYTHON already imports one (GPU users'
# ROCm or CUDA build), the environment sees it through system site packages and nothing is
# installed over it; otherwise the pinned CPU wheel torch==2.13.0 goes into the environment, never
# an unpinned multi-GB CUDA build. When $PYTHON is itself a virtual or conda environment, aorta is
# installed there and .venv points at it.
set -euo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."

extras=""
case "${1:-}" in
  "") ;;
  --test) extras="[test]" ;;
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$self"; exit 0 ;;
  *) echo "setup: unknown option '$1' (use: bash scripts/setup.sh [--test | --help])" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
VENV=.venv
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "setup: $*" >&2; }

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  say "'$PYTHON' not found: install python3 (apt-get install python3 python3-venv) or set PYTHON=…"
  exit 2
fi

if [ "$(id -u)" = "0" ]; then
  if ! command -v bpftrace >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    say "installing bpftrace (apt)"
    apt_install bpftrace
  fi
  if ! command -v g++ >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    say "installing g++ (apt): torch_compile compiles with inductor on the CPU, and the uprobe" \
        "tests build stand-in GPU runtime libraries"
    apt_install g++ libc6-dev
  fi
  # inductor's CPU code includes Python.h: the distribution's python3 ships it in python3-dev
  if ! "$PYTHON" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
      && command -v apt-get >/dev/null 2>&1; then
    say "installing python3-dev (apt): Python.h, which torch_compile's inductor code includes"
    apt_install python3-dev
  fi
  if [ ! -d /sys/kernel/tracing/events ] && [ -d /sys/kernel/tracing ]; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null \
      || say "could not mount tracefs at /sys/kernel/tracing (a container without privileges?)"
  fi
else
  say "not root: skipping bpftrace/tracefs (tracing needs root; see docs/ebpf.md)"
fi

# --- test only: headless Chromium, which the report screenshot test opens the HTML page in ---
if [ -n "$extras" ] && [ "$(id -u)" = "0" ] && ! command -v chromium >/dev/null 2>&1 \
    && command -v apt-get >/dev/null 2>&1; then
  say "installing chromium (apt): tests/test_report_page.py screenshots the HTML report"
  apt_install chromium || say "could not install chromium: the report screenshot test will skip"
fi
# --- end of the chromium block ---

# Where $PYTHON lives: a virtual/conda environment we may install into, or a base interpreter.
in_env=$("$PYTHON" -c 'import sys, os; print(int(sys.prefix != sys.base_prefix or os.path.isdir(os.path.join(sys.prefix, "conda-meta"))))')
has_torch=0
"$PYTHON" -c "import torch" >/dev/null 2>&1 && has_torch=1

if [ "$in_env" = "1" ]; then
  prefix=$("$PYTHON" -c 'import sys; print(sys.prefix)')
  if [ ! -e "$VENV" ] || [ -L "$VENV" ]; then
    ln -sfn "$prefix" "$VENV"
  fi
  say "using the active environment $prefix (.venv points at it)"
elif [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import sys" >/dev/null 2>&1; then
  if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c "import ensurepip" >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      say "installing python3-venv (apt)"
      apt_install python3-venv
    else
      say "'$PYTHON -m venv' is unavailable: install it (sudo apt-get install python3-venv) and rerun"
      exit 2
    fi
  fi
  rm -rf "$VENV"
  if [ "$has_torch" = "1" ]; then
    say "creating $VENV with system site packages (keeps $("$PYTHON" -c 'import torch; print("torch", torch.__version__)'))"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
fi

VPY="$VENV/bin/python"
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  say "installing torch==2.13.0 (CPU wheel)"
  "$VPY" -m pip install -q "torch==2.13.0"
fi
"$VPY" -m pip install -q -e ".${extras}"

# ---- test only: upstream AORTA 0.3.0, whose own writers make the files tests/test_upstream_files.py
# reads. Installed apart (--target, never into the environment: its package is also named `aorta`);
# the tests run its code in a separate process only.
if [ -n "$extras" ]; then
  UPSTREAM_DIR="$VENV/upstream-aorta-0.3.0"
  if [ ! -d "$UPSTREAM_DIR/aorta/hw_queue_eval" ]; then
    say "installing amd-aorta==0.3.0 into $UPSTREAM_DIR (test files written by upstream's code)"
    rm -rf "$UPSTREAM_DIR"
    "$VPY" -m pip install -q --no-deps --target "$UPSTREAM_DIR" "amd-aorta==0.3.0"
  fi
  # Holistic Trace Analysis reads `run --profile` traces in tests/test_upstream_commands.py: kept
  # apart (--target) like upstream, it brings its own pandas/plotly/jupyter pins (~480 MB)
  HTA_DIR="$VENV/hta-0.5.0"
  if [ ! -d "$HTA_DIR/hta" ]; then
    say "installing HolisticTraceAnalysis==0.5.0 into $HTA_DIR (reads the --profile traces in tests)"
    rm -rf "$HTA_DIR"
    "$VPY" -m pip install -q --target "$HTA_DIR" "HolisticTraceAnalysis==0.5.0"
  fi
fi
# ---- end of the upstream block
# --- test set-up: real GPU vendor libraries (issue 26) ------------------------------------------
# The gpu_runtime tests probe AMD's libamdhip64 / libhsa-runtime64 and NVIDIA's libcudart (CUDA 12
# and 13) / libnccl from pinned PyPI wheels (no GPU needed). tests/vendor_libs.py downloads them
# once with `pip download --no-deps` into ~/.cache/aorta-test-wheels (~525 MB, nccl is 350 MB),
# checks their SHA-256 and extracts only the shared libraries the tests load into
# ~/.cache/aorta-test-libs; later runs reuse both.
if [ -n "$extras" ]; then
  say "fetching the pinned GPU vendor libraries for the tests (cached in ~/.cache)"
  "$VPY" -I tests/vendor_libs.py \
    || say "could not fetch them: the real-library tests skip (and fail under CI=true)"
fi
# --- end of the vendor-library block --------------------------------------------------------------
say "done ($("$VENV/bin/aorta-hwq" --version)); run it as $VENV/bin/aorta-hwq, as root: sudo $VENV/bin/aorta-hwq"
