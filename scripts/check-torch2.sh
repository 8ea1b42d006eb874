#!/usr/bin/env bash
# Builds twins against LibTorch 2.x and runs the whole test suite there: a
# Debian trixie root (debootstrap --variant=minbase) with trixie's
# libtorch-dev (2.6), g++ 14, CMake and the other build dependencies, plus
# python3-torch so the eager cross-check runs against PyTorch 2.6 too. The
# checkout is bind-mounted into the root at its own path and built in
# build-torch2/ (git-ignored), so a rerun only rebuilds what changed.
#
#   scripts/check-torch2.sh [ctest arguments]       as root; needs debootstrap
#   scripts/check-torch2.sh --prepare               only make the root
#
# The root is made once and reused: it lives in $TWINS_TORCH2_CACHE (default
# /var/cache/twins-torch2) under a name that hashes its package list, so
# changing the list makes a new root. TWINS_DEBIAN_MIRROR overrides the
# mirror (default: the Debian archive this machine's apt sources name).
# Everything mounted lives in a private mount namespace and is unmounted on
# any exit, ctrl-c included; killed outright, the namespace's mounts vanish
# with it. Prints the wall time of each phase.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD

die() { echo "check-torch2: $*" >&2; exit 2; }
((EUID == 0)) || die "must run as root (debootstrap, chroot, mount)"
for tool in debootstrap chroot unshare flock sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install debootstrap util-linux)"
done

suite=trixie
packages=(libtorch-dev g++ cmake make libopenblas0-pthread libfmt-dev
          libcli11-dev nlohmann-json3-dev libgtest-dev gnuplot-nox python3-torch)
cache=${TWINS_TORCH2_CACHE:-/var/cache/twins-torch2}
key=$(printf '%s\n' "$suite" minbase "${packages[@]}" | sha256sum | cut -c1-12)
root=$cache/$suite-$key

# The first Debian archive in apt's sources (one-line or deb822 format).
default_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '/^deb[ \t]/ { for (i = 2; i <= NF; i++) if ($i !~ /^\[/) { print $i; break } }
         /^URIs:/ { print $2 }' |
    grep -E '/debian/?$' | head -1 || true
}
mirror=${TWINS_DEBIAN_MIRROR:-$(default_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}

phase() { phase_name=$1; phase_start=$EPOCHREALTIME; echo "check-torch2: $1 ..."; }
phase_done() {
  awk -v a="$phase_start" -v b="$EPOCHREALTIME" -v n="$phase_name" \
    'BEGIN { printf "check-torch2: %s took %.0f s\n", n, b - a }'
}

# Runs "$@" inside the root with /proc, /dev/pts and the checkout mounted, in
# a private mount namespace; the trap unmounts them on any exit.
in_root() {
  local r=$1; shift
  unshare --mount --propagation private bash -euo pipefail -c '
    r=$1; src=$2; shift 2
    mounted=()
    cleanup() {
      local i
      for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"
      done
    }
    trap cleanup EXIT
    trap "exit 130" INT
    trap "exit 143" TERM
    mount -t proc proc "$r/proc" && mounted+=("$r/proc")
    mkdir -p "$r/dev/pts"
    mount --bind /dev/pts "$r/dev/pts" && mounted+=("$r/dev/pts")
    if [[ -n $src ]]; then
      mkdir -p "$r$src"
      mount --bind "$src" "$r$src" && mounted+=("$r$src")
    fi
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive chroot "$r" "$@"
  ' in_root "$r" "${SRC_MOUNT:-}" "$@"
}

mkdir -p "$cache"
exec 9>"$cache/$suite-$key.lock"
flock 9  # one maker of a root at a time; readers wait for it to finish
if [[ ! -f $root/.twins-complete ]]; then
  tmp=$root.partial
  # A partial root from an interrupted run is discarded (nothing is mounted
  # in it: its mounts lived in a namespace that is gone).
  rm -rf "$tmp"
  phase "debootstrap $suite into $root (mirror $mirror)"
  unshare --mount --propagation private \
    debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
  phase_done
  phase "apt-get install in the root (${packages[*]})"
  cp /etc/resolv.conf "$tmp/etc/resolv.conf" 2>/dev/null || true
  printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
  chmod +x "$tmp/usr/sbin/policy-rc.d"
  in_root "$tmp" sh -c "apt-get update -qq && apt-get install -y -qq \
    --no-install-recommends ${packages[*]} >/dev/null && apt-get clean"
  phase_done
  touch "$tmp/.twins-complete"
  mv "$tmp" "$root"
else
  echo "check-torch2: reusing $root"
fi
for other in "$cache/$suite"-*/; do
  [[ -d $other && ${other%/} != "$root" && $other != *.partial/ ]] &&
    echo "check-torch2: note: ${other%/} is a root of another package list (delete it when unused)"
done
flock -u 9
[[ ${1:-} == --prepare ]] && exit 0

torch_version=$(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH)/ { v = v sep $3; sep = "." }
  END { print v }' "$root/usr/include/torch/csrc/api/include/torch/version.h" 2>/dev/null || true)
echo "check-torch2: LibTorch ${torch_version:-?}, $(chroot "$root" g++ --version | head -1)"

jobs=$(nproc)
export SRC_MOUNT=$src
phase "configure and build in build-torch2/"
in_root "$root" bash -c "cd '$src' &&
  cmake -S . -B build-torch2 -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-torch2 -j $jobs"
phase_done
phase "ctest in build-torch2/"
status=0
ctest_args=""
(($#)) && ctest_args=$(printf ' %q' "$@")
in_root "$root" bash -c "cd '$src' &&
  ctest --test-dir build-torch2 -j $jobs --output-on-failure$ctest_args" ||
  status=$?
phase_done
if ((status)); then
  echo "check-torch2: the test suite FAILED against LibTorch ${torch_version:-2.x}" >&2
  exit "$status"
fi
echo "check-torch2: the whole test suite passes against LibTorch ${torch_version:-2.x}"
