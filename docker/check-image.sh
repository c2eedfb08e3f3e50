#!/usr/bin/env bash
# Build the CPU eBPF image from scratch with podman and run the main job traced inside it:
# asserts a result with eBPF status ok, events seen and 0 lost events.
#   bash docker/check-image.sh             # as root, on a Debian/Ubuntu host with podman
# No image registry is needed: the Debian 12 base is built from Debian packages
# (docker/podman-base.sh, cached). pip inside the build trusts the host's CA bundle and, when
# present, uses the local wheel folder /opt/wheels (read-only) for the CPU torch wheel.
# Settings (environment): FRESH=1 rebuilds every layer (--no-cache); WHEELS=DIR ('' for none).
set -euo pipefail
cd "$(dirname "$0")/.."
export SAY_PREFIX=check-image
# shellcheck source=podman-base.sh
source docker/podman-base.sh
require_tools podman runc debootstrap

IMAGE=localhost/aorta-ebpf:cpu
WHEELS=${WHEELS-/opt/wheels}
ensure_base_image

build_opts=(--build-arg "BASE=$BASE_IMAGE" -v "$HOST_CA:/etc/ssl/certs/host-ca.crt:ro"
            --build-arg PIP_CERT=/etc/ssl/certs/host-ca.crt)
if [ -n "$WHEELS" ] && [ -d "$WHEELS" ]; then
  build_opts+=(-v "$WHEELS:/opt/wheels:ro" --build-arg PIP_FIND_LINKS=/opt/wheels)
fi
[ "${FRESH:-0}" = 1 ] && build_opts+=(--no-cache)
say "building $IMAGE from docker/Dockerfile.cpu-ebpf on $BASE_IMAGE"
start=$(date +%s)
"${PODMAN[@]}" build "${PODMAN_LIMITS[@]}" --network host "${build_opts[@]}" \
  -f docker/Dockerfile.cpu-ebpf -t "$IMAGE" . >/tmp/aorta-check-image-build.log 2>&1 \
  || { tail -n 30 /tmp/aorta-check-image-build.log >&2; die "image build failed (log: /tmp/aorta-check-image-build.log)"; }
say "built in $(( $(date +%s) - start )) s ($("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"

out=$(mktemp -d /var/tmp/aorta-check-image.XXXXXX)
trap 'rm -rf --one-file-system "$out"' EXIT
cmd=(aorta-hwq run hetero_kernels --streams 8 --ebpf-trace -o /results/results.json)
say "running in the container: ${cmd[*]}"
"${PODMAN[@]}" run --rm --privileged --pid host --network none "${PODMAN_LIMITS[@]}" -v "$out:/results" \
  "$IMAGE" "${cmd[@]}" >"$out/run.log" 2>&1 || { cat "$out/run.log" >&2; die "the traced run failed in the container"; }
echo "---- container output (entrypoint line and eBPF block)"
grep -E '^aorta: |eBPF DRIVER-LEVEL|Total submissions|Total dispatches|Lost events|result written' "$out/run.log" || true
echo "---- versions in the image (an unprivileged container: the entrypoint names what it lacks)"
"${PODMAN[@]}" run --rm --network none "${PODMAN_LIMITS[@]}" "$IMAGE" bash -c \
  'echo "$(bpftrace --version); $(aorta-hwq --version); $(python3 --version); torch $(python -c "import torch; print(torch.__version__)")"; command -v perf opensnoop-bpfcc execsnoop-bpfcc | tr "\n" " "; echo' \
  || say "warning: could not list the versions in the image"
echo "---- result"
if python3 scripts/assert_traced_result.py "$out/results.json"; then
  echo "image check: PASS"
else
  echo "image check: FAIL"
  exit 1
fi
