#!/usr/bin/env bash
# Install aorta and what it needs on a fresh Debian/Ubuntu machine (idempotent).
#   bash scripts/setup.sh          # the tool (+ bpftrace and tracefs when run as root)
#   bash scripts/setup.sh --test   # also the test tools (pytest, ruff, jsonschema)
# torch: an existing install is kept (GPU users bring their ROCm/CUDA build); otherwise the
# pinned CPU wheel torch==2.13.0 is installed, never an unpinned multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
PYTHON=${PYTHON:-python3}

if [ "$(id -u)" = "0" ]; then
  if ! command -v bpftrace >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing bpftrace (apt)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftrace >/dev/null
  fi
  if [ ! -d /sys/kernel/tracing/events ] && [ -d /sys/kernel/tracing ]; then
    mount -t tracefs nodev /sys/kernel/tracing || echo "setup: could not mount tracefs" >&2
  fi
else
  echo "setup: not root: skipping bpftrace/tracefs (tracing needs root; see docs/ebpf.md)" >&2
fi

if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing torch==2.13.0 (CPU wheel)" >&2
  "$PYTHON" -m pip install -q "torch==2.13.0"
fi
"$PYTHON" -m pip install -q -e ".${extras}"
echo "setup: done ($("$PYTHON" -m aorta.hw_queue_eval --version))" >&2
