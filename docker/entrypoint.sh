#!/usr/bin/env bash
# Container entrypoint of the aorta eBPF images: make tracing possible when the container may,
# say in one line what is missing, never fail the container for it, then run the command.
# Mounts tracefs (/sys/kernel/tracing) and debugfs (/sys/kernel/debug, where older kernels keep
# tracing/) when they are empty and the container is privileged.
set -u

missing=()
flavor=${AORTA_IMAGE_FLAVOR:-cpu}

has_events() { [ -d "$1/events" ] 2>/dev/null; }

if [ "$(id -u)" != 0 ]; then
  missing+=("root (tracing needs root or CAP_BPF+CAP_PERFMON: run the container as root)")
else
  if ! has_events /sys/kernel/tracing && [ -d /sys/kernel/tracing ]; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
  fi
  if ! has_events /sys/kernel/tracing && [ -d /sys/kernel/debug ] && ! has_events /sys/kernel/debug/tracing; then
    mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
  fi
  if ! has_events /sys/kernel/tracing && ! has_events /sys/kernel/debug/tracing; then
    missing+=("tracefs (run with --privileged, or mount -v /sys/kernel/tracing:/sys/kernel/tracing)")
  fi
  capeff=$(awk '/^CapEff:/ {print $2}' /proc/self/status 2>/dev/null)
  # CAP_SYS_ADMIN is bit 21: without it bpftrace cannot load programs on any kernel.
  if [ -n "$capeff" ] && [ $(( 16#$capeff >> 21 & 1 )) = 0 ]; then
    missing+=("privileges (no CAP_SYS_ADMIN: run with --privileged or the compose file)")
  fi
fi
command -v bpftrace >/dev/null 2>&1 || missing+=("bpftrace (not installed in this image)")
case "$flavor" in
  rocm)
    [ -d /sys/module/amdgpu ] || missing+=("amdgpu module (not loaded on the host: modprobe amdgpu)")
    [ -e /dev/kfd ] || missing+=("/dev/kfd (pass --device /dev/kfd --device /dev/dri)")
    ;;
  cuda)
    [ -e /dev/nvidiactl ] || missing+=("NVIDIA devices (run with --gpus all)")
    ;;
esac

if [ "${#missing[@]}" -gt 0 ]; then
  line="aorta: missing here (the CPU backend and untraced runs still work): "
  for i in "${!missing[@]}"; do
    [ "$i" -gt 0 ] && line+="; "
    line+="${missing[$i]}"
  done
  echo "$line" >&2
else
  echo "aorta: eBPF tracing ready ($flavor image; try: aorta-hwq ebpf-info)" >&2
fi

exec "$@"
