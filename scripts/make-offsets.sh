#!/usr/bin/env bash
# Regenerates the offsets table for the installed Debian erlang-base:
# userspace/offsets/<build-id of the installed, stripped beam.smp>.txt
#
#   scripts/make-offsets.sh [WORKDIR]      (WORKDIR is passed on to build-debug-vm.sh)
#
# The installed beam.smp has no DWARF, so the offsets are read from a -g build of the same
# Debian source with the same configure flags (scripts/build-debug-vm.sh), and the table is
# keyed by the build-id of the installed binary. Set BEAM_BPF_OFFSETS to use an already built
# beam-bpf-offsets instead of building it in ./build.
set -euo pipefail
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)

installed=(/usr/lib/erlang/erts-*/bin/beam.smp)
[ -e "${installed[0]}" ] || { echo "no installed /usr/lib/erlang/erts-*/bin/beam.smp" >&2; exit 1; }
[ "${#installed[@]}" -eq 1 ] || { echo "more than one erts installed: ${installed[*]}" >&2; exit 1; }
installed=${installed[0]}
version=$(dpkg-query -W -f '${Version} (${Architecture})' erlang-base)
build_id=$(readelf -n "$installed" | awk '/Build ID:/ { print $3; exit }')
[ -n "$build_id" ] || { echo "$installed has no build-id" >&2; exit 1; }

debug_beam=$("$root/scripts/build-debug-vm.sh" "$@" | tail -n 1)
[ -f "$debug_beam" ] || { echo "build-debug-vm.sh gave no beam.smp ($debug_beam)" >&2; exit 1; }

tool=${BEAM_BPF_OFFSETS:-}
if [ -z "$tool" ]; then
  [ -f "$root/build/CMakeCache.txt" ] || cmake -S "$root" -B "$root/build" >/dev/null
  cmake --build "$root/build" --target beam-bpf-offsets -j2 >/dev/null
  tool=$root/build/beam-bpf-offsets
fi

out=$root/userspace/offsets/$build_id.txt
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
  echo "# beam.smp of erlang-base $version: $installed"
  echo "# Made by scripts/make-offsets.sh, which ran:"
  echo "#   beam-bpf-offsets --build-id $build_id $debug_beam"
  echo "# (a -g build of the same Debian source and configure flags, scripts/build-debug-vm.sh)"
  "$tool" --build-id "$build_id" "$debug_beam"
} >"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
