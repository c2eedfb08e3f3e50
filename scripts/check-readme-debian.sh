#!/usr/bin/env bash
# Run the README's two set-up commands exactly as written in a fresh Debian 12 container and
# assert that both exit 0 (and that the first one wrote a traced result with 0 lost events).
#   bash scripts/check-readme-debian.sh        # as root, on a Debian/Ubuntu host with podman
#
# The container is a debootstrap'd bookworm (docker/podman-base.sh, cached) with only python3,
# python3-pip, python3-venv and git added, a fresh clone of this checkout's HEAD (commit first:
# uncommitted changes are not tested), run --privileged --pid host so tracing works (bpftrace
# reports the host's process ids, as in docker-compose.build.yaml). pip inside sees what it
# sees on this kind of machine: the host's CA bundle (read-only) and, when present, the local
# wheel folder /opt/wheels (read-only, PIP_FIND_LINKS) where the CPU torch wheel lies.
# Settings (environment): KEEP=1 keeps the clone; WHEELS=DIR another wheel folder ('' for none).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
export SAY_PREFIX=check-readme
# shellcheck source=../docker/podman-base.sh
source docker/podman-base.sh
require_tools podman runc debootstrap git

IMAGE=localhost/aorta-readme-check:bookworm
WHEELS=${WHEELS-/opt/wheels}

# The README's two commands: the first line of each of the first two ```bash blocks after "## Set up".
mapfile -t COMMANDS < <(awk '
  /^## Set up/ { on = 1; next }
  on && /^## / { exit }
  on && /^```bash/ { want = 1; next }
  want { print; want = 0 }
' README.md | head -n 2)
[ "${#COMMANDS[@]}" = 2 ] || die "could not find the README's two commands under '## Set up'"

ensure_base_image
if ! "${PODMAN[@]}" image exists "$IMAGE"; then
  say "building $IMAGE: $BASE_IMAGE + python3 python3-pip python3-venv git"
  "${PODMAN[@]}" build "${PODMAN_LIMITS[@]}" --network host -t "$IMAGE" -f - . >/dev/null <<CONTAINERFILE
FROM $BASE_IMAGE
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-pip python3-venv git >/dev/null \
 && rm -rf /var/lib/apt/lists/*
CONTAINERFILE
else
  say "image $IMAGE: cached"
fi

work=$(mktemp -d /var/tmp/aorta-readme-check.XXXXXX)
cleanup() { if [ "${KEEP:-0}" = 1 ]; then say "kept $work"; else rm -rf --one-file-system "$work"; fi; }
trap cleanup EXIT
sha=$(git rev-parse HEAD)
git diff --quiet HEAD 2>/dev/null || say "warning: uncommitted changes are not part of the check (testing $sha)"
git clone -q --no-local "$REPO" "$work/aorta"
git -C "$work/aorta" checkout -q "$sha"

mounts=(-v "$work/aorta:/root/aorta" -v "$HOST_CA:/etc/ssl/certs/host-ca.crt:ro"
        -e PIP_CERT=/etc/ssl/certs/host-ca.crt -e PIP_DEFAULT_TIMEOUT=180)
if [ -n "$WHEELS" ] && [ -d "$WHEELS" ]; then
  mounts+=(-v "$WHEELS:/opt/wheels:ro" -e PIP_FIND_LINKS=/opt/wheels)
fi

# Inside: each command verbatim through bash -c, its exit status recorded, then the result checked.
runner='
cd /root/aorta
for i in 1 2; do
  var=CMD$i; cmd=${!var}
  echo "=== command $i: $cmd"
  start=$(date +%s)
  bash -c "$cmd"; rc=$?
  echo "=== command $i exit $rc after $(( $(date +%s) - start )) s"
  echo "$rc" > /root/aorta/.readme-check-rc$i
done
python3 scripts/assert_traced_result.py results.json; echo "$?" > /root/aorta/.readme-check-result
'
say "running the README's commands in a fresh container (clone of $sha):"
say "  1: ${COMMANDS[0]}"
say "  2: ${COMMANDS[1]}"
log="$work/container.log"
"${PODMAN[@]}" run --rm --privileged --pid host --network host "${PODMAN_LIMITS[@]}" "${mounts[@]}" \
  -e CMD1="${COMMANDS[0]}" -e CMD2="${COMMANDS[1]}" "$IMAGE" bash -c "$runner" 2>&1 | tee "$log" \
  || true

rc1=$(cat "$work/aorta/.readme-check-rc1" 2>/dev/null || echo missing)
rc2=$(cat "$work/aorta/.readme-check-rc2" 2>/dev/null || echo missing)
traced=$(cat "$work/aorta/.readme-check-result" 2>/dev/null || echo missing)
echo "---- summary (Debian 12 container, commit ${sha:0:12})"
grep -E '^=== command [12] exit|^traced result|^[0-9]+ (passed|failed)|^FAILED ' "$log" | tail -n 12 || true
echo "command 1 exit: $rc1; command 2 exit: $rc2; traced result with 0 lost events: $([ "$traced" = 0 ] && echo yes || echo no)"
if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$traced" = 0 ]; then
  echo "README check: PASS"
else
  echo "README check: FAIL"
  exit 1
fi
