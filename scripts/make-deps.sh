#!/usr/bin/env bash
# Unpacks the header dependencies of the CUDA build from one Debian suite's
# packages into a folder (default deps/, git-ignored):
#
#   scripts/make-deps.sh [DIR]
#
# CLI11 and nlohmann-json (headers and CMake configs) and the GoogleTest
# sources; fmt is not among them, a torch wheel bundles its own
# (CMakeLists.txt). The suite is Debian 13 "trixie" by default
# (TWINS_DEPS_SUITE overrides): its CLI11 is 2.4, so the CUDA leg builds
# against CLI11 2.4 while the native build uses Debian 12's 2.3, and both
# versions are compiled and tested on every landing.
#
# apt runs with a private sources list and state under
# $TWINS_CACHE/apt-<suite> (default /var/cache/twins), so neither this
# machine's apt configuration nor the age of its package lists matter, and
# the .deb files stay there: a rerun downloads only the suite's index.
# TWINS_DEBIAN_MIRROR overrides the mirror (default: the Debian archive
# apt's sources name). The folder's MANIFEST lists each package's version.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "make-deps: $*" >&2; exit 2; }
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
  die "needs apt-get and dpkg-deb (a Debian machine)"

dir=${1:-deps}
suite=${TWINS_DEPS_SUITE:-trixie}
cache=${TWINS_CACHE:-/var/cache/twins}/apt-$suite
packages=(libcli11-dev nlohmann-json3-dev googletest)

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

mkdir -p "$cache/lists/partial" "$cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" \
  >"$cache/sources.list"
apt=(apt-get -qq -o Dir::Etc::SourceList="$cache/sources.list"
     -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$cache/lists"
     -o Dir::Cache="$cache" -o Dir::Cache::Archives="$cache/archives"
     -o Dir::State::Status=/dev/null -o Debug::NoLocking=1)
# As root, apt's download sandbox user cannot write to the cache.
((EUID == 0)) && apt+=(-o APT::Sandbox::User=root)
exec 9>"$cache.lock"
flock 9
"${apt[@]}" update || die "apt-get update of $suite ($mirror) failed"
(cd "$cache/archives" && "${apt[@]}" download "${packages[@]}") ||
  die "apt-get download ${packages[*]} ($suite) failed"

rm -rf "$dir" && mkdir -p "$dir"
for p in "${packages[@]}"; do
  deb=$(ls -t "$cache/archives/${p}_"*.deb | head -1)
  dpkg-deb -x "$deb" "$dir"
  echo "$p $(dpkg-deb -f "$deb" Version) ($suite)" >>"$dir/MANIFEST"
done
flock -u 9
echo "make-deps: $(du -sh "$dir" | cut -f1) of header dependencies in $dir/:"
sed 's/^/  /' "$dir/MANIFEST"
