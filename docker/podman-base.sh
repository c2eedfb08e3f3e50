#!/usr/bin/env bash
# Shared by the container checks: podman settings that work on this kind of machine, and a
# Debian 12 base image built from Debian packages (no image registry needed), cached.
#   source docker/podman-base.sh; ensure_base_image
# Why: no image registry is reachable from the CI machines, crun fails on hybrid cgroup hosts
# (runc works), and the default open-file/process limits are too small for pip and torch.
# Settings (environment): BASE_IMAGE (default localhost/debian:bookworm), DEBIAN_MIRROR (default:
# the first Debian mirror apt is configured with), HOST_CA (the CA bundle pip must trust).

# shellcheck disable=SC2034  # used by the scripts that source this file
BASE_IMAGE=${BASE_IMAGE:-localhost/debian:bookworm}
HOST_CA=${HOST_CA:-/etc/ssl/certs/ca-certificates.crt}
PODMAN=(podman --runtime runc)
# shellcheck disable=SC2034  # used by the scripts that source this file
PODMAN_LIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=4096:4096)

say() { echo "${SAY_PREFIX:-check}: $*" >&2; }
die() { say "$*"; exit 2; }

require_tools() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 \
      || die "'$t' not found: install it (apt-get install podman runc debootstrap) and rerun"
  done
  [ "$(id -u)" = "0" ] || die "run as root (debootstrap, podman import and --privileged need it)"
}

# The Debian mirror apt uses here (deb822 'URIs:' or one-line 'deb URL'), unless DEBIAN_MIRROR is set.
debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local m
  m=$(grep -h -E '^\s*URIs:\s*\S*/debian/?\s*$' /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | head -n1 | awk '{print $2}')
  if [ -z "$m" ]; then
    m=$(grep -h -E '^\s*deb\s+\S*/debian/?\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
          2>/dev/null | head -n1 | awk '{print $2}')
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

# Unmount whatever debootstrap left mounted under a root folder, then delete it.
remove_root() {
  local root=$1 m
  for m in proc sys dev/pts dev; do
    mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" 2>/dev/null
  done
  rm -rf --one-file-system "$root" "$root.log"
}

# Build $BASE_IMAGE with debootstrap (minbase) once; later calls reuse it.
ensure_base_image() {
  if "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
    say "base image $BASE_IMAGE: cached"
    return
  fi
  local root mirror
  root=$(mktemp -d /var/tmp/aorta-bookworm.XXXXXX)
  mirror=$(debian_mirror)
  say "building base image $BASE_IMAGE: debootstrap --variant=minbase bookworm from $mirror (a few minutes)"
  if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1; then
    tail -n 20 "$root.log" >&2
    remove_root "$root"
    die "debootstrap failed (mirror $mirror): set DEBIAN_MIRROR to a reachable Debian mirror"
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | "${PODMAN[@]}" import - "$BASE_IMAGE" >/dev/null
  remove_root "$root"
  say "base image $BASE_IMAGE: built"
}
