#!/usr/bin/env bash
# Pick an aorta eBPF image, write its build settings for docker-compose.build.yaml (docker/.env),
# and build it with docker or podman, saying what runs before it runs.
#   bash setup-env.sh                      # menu (option 5 = ROCm eBPF, the guide's choice)
#   bash setup-env.sh --option 1           # non-interactive: 1 CPU, 2 CUDA, 3 ROCm (own base), 5 ROCm
#   bash setup-env.sh --dockerfile Dockerfile.cuda-ebpf [--base IMAGE]
#   bash setup-env.sh --option 5 --dry-run # write docker/.env and print the commands, run nothing
# Then: docker compose -f docker-compose.build.yaml up -d && docker exec -it aorta-ebpf-<flavor> bash
set -euo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")"

# The usage text is the comment block above (up to the first line that is not a comment).
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$self"; }

say() { echo "setup-env: $*" >&2; }
die() { say "$*"; exit 2; }

option="" dockerfile="" base="" dry_run=0 engine="${AORTA_ENGINE:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --option) [ $# -ge 2 ] || die "--option needs a number (1-5)"; option=$2; shift 2 ;;
    --dockerfile) [ $# -ge 2 ] || die "--dockerfile needs a file name in docker/"; dockerfile=$2; shift 2 ;;
    --base) [ $# -ge 2 ] || die "--base needs an image name"; base=$2; shift 2 ;;
    --engine) [ $# -ge 2 ] || die "--engine needs docker or podman"; engine=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (use --option N, --dockerfile F, --base IMAGE, --engine E, --dry-run)" ;;
  esac
done

menu() {
  cat >&2 <<'MENU'
aorta container images (all with bpftrace, BCC tools and perf):
  1) CPU eBPF    Dockerfile.cpu-ebpf          Debian 12 slim + CPU torch (works on any Linux host)
  2) CUDA eBPF   Dockerfile.cuda-ebpf         NVIDIA PyTorch base
  3) ROCm eBPF   Dockerfile.rocm-ubuntu-ebpf  with a ROCm PyTorch base image you name
  4) a Dockerfile of your own in docker/ (asks for its name)
  5) ROCm eBPF   Dockerfile.rocm-ubuntu-ebpf  rocm/pytorch base (recommended for AMD GPUs)
MENU
}

if [ -z "$option" ] && [ -z "$dockerfile" ]; then
  [ -t 0 ] || die "no terminal for the menu: pass --option N (1-5) or --dockerfile F"
  menu
  read -r -p "choice [5]: " option
  option=${option:-5}
fi

case "${option:-}" in
  1) dockerfile=${dockerfile:-Dockerfile.cpu-ebpf} ;;
  2) dockerfile=${dockerfile:-Dockerfile.cuda-ebpf} ;;
  3) dockerfile=${dockerfile:-Dockerfile.rocm-ubuntu-ebpf}
     if [ -z "$base" ]; then
       [ -t 0 ] || die "option 3 needs --base IMAGE (a ROCm PyTorch image)"
       read -r -p "ROCm PyTorch base image: " base
     fi
     [ -n "$base" ] || die "option 3 needs a base image" ;;
  4) if [ -z "$dockerfile" ]; then
       [ -t 0 ] || die "option 4 needs --dockerfile F"
       read -r -p "Dockerfile in docker/: " dockerfile
     fi ;;
  5) dockerfile=${dockerfile:-Dockerfile.rocm-ubuntu-ebpf} ;;
  "") ;;
  *) die "--option must be 1-5, got '$option'" ;;
esac

[[ "$dockerfile" =~ ^[A-Za-z0-9._-]+$ ]] || die "--dockerfile must be a file name in docker/, got '$dockerfile'"
[ -f "$dockerfile" ] || die "docker/$dockerfile not found (choose one of: $(printf '%s ' Dockerfile.*))"
if [ -n "$base" ] && ! [[ "$base" =~ ^[A-Za-z0-9._/:@-]+$ ]]; then
  die "--base '$base' is not an image name"
fi

case "$dockerfile" in
  *rocm*) flavor=rocm ;;
  *cuda*) flavor=cuda ;;
  *) flavor=cpu ;;
esac
if [ -z "$base" ]; then
  base=$(sed -n 's/^ARG BASE=//p' "$dockerfile" | head -n1)
  [ -n "$base" ] || die "docker/$dockerfile has no 'ARG BASE=…' default: pass --base IMAGE"
fi
image="aorta-ebpf:$flavor"
container="aorta-ebpf-$flavor"

# The compose file reads these (COMPOSE_PROFILES selects the service with the right devices).
tmp=$(mktemp .env.XXXXXX)
trap 'rm -f "$tmp"' EXIT
cat > "$tmp" <<ENV
# Written by docker/setup-env.sh; read by docker-compose.build.yaml.
COMPOSE_PROFILES=$flavor
AORTA_DOCKERFILE=$dockerfile
AORTA_BASE=$base
AORTA_IMAGE=$image
ENV
mv -f "$tmp" .env
trap - EXIT
say "wrote docker/.env: $flavor image from docker/$dockerfile on $base"

# docker compose, docker-compose, podman compose, or plain podman build.
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1; then engine=docker
  elif command -v podman >/dev/null 2>&1; then engine=podman
  else engine=""; fi
fi
build=() up=()
case "$engine" in
  docker)
    if docker compose version >/dev/null 2>&1; then compose=(docker compose)
    elif command -v docker-compose >/dev/null 2>&1; then compose=(docker-compose)
    else compose=(); fi ;;
  podman)
    if command -v podman-compose >/dev/null 2>&1; then compose=(podman-compose)
    else compose=(); fi ;;
  "") compose=() ;;
  *) die "--engine must be docker or podman, got '$engine'" ;;
esac
if [ "${#compose[@]}" -gt 0 ]; then
  build=("${compose[@]}" -f docker-compose.build.yaml build)
  up=("${compose[@]}" -f docker-compose.build.yaml up -d)
elif [ -n "$engine" ]; then
  build=("$engine" build -f "$dockerfile" --build-arg "BASE=$base" -t "$image" ..)
  case "$flavor" in
    rocm) devices=(--device /dev/kfd --device /dev/dri --group-add video --group-add render) ;;
    cuda) devices=(--gpus all) ;;
    *) devices=() ;;
  esac
  up=("$engine" run -d --name "$container" --privileged --pid host "${devices[@]}"
      -v /sys/kernel/tracing:/sys/kernel/tracing -v /sys/kernel/debug:/sys/kernel/debug
      -v /lib/modules:/lib/modules:ro -v "$(cd .. && pwd):/workspace/aorta" -w /workspace/aorta
      "$image" sleep infinity)
else
  say "neither docker nor podman found: install one (apt-get install docker.io or podman), then rerun"
  [ "$dry_run" = 1 ] && exit 0
  exit 2
fi

say "will run: ${build[*]}"
if [ "$dry_run" = 1 ]; then
  say "dry run: nothing built"
else
  "${build[@]}"
fi
say "next: ${up[*]}"
say "then: $engine exec -it $container bash   (inside: aorta-hwq ebpf-info)"
