#!/usr/bin/env bash
# Regenerates the shipped offset tables, userspace/target/offsets/otp<release>[-<features>].txt, from
# the DWARF of -g builds of each tested release:
#   - OTP 25: Debian 12's source and configure flags (scripts/build-debug-vm.sh); the table also
#     names the build-id of Debian's stripped binary it was checked against.
#   - OTP 27: the upstream 27.3.4.1 source, plain configure, the plain and the lock-counting
#     emulators (scripts/build-test-vms.sh 27 keeps their unstripped copies).
#   - OTP 29: the upstream 29.1.1 source, plain configure (scripts/build-test-vms.sh 29).
# A table serves every build of its release with the same layout-changing features.
#
#   scripts/make-offsets.sh
# Set BEAM_BPF_OFFSETS to use an already built beam-bpf-offsets instead of building it in ./build.
set -euo pipefail
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)

tool=${BEAM_BPF_OFFSETS:-}
if [ -z "$tool" ]; then
  [ -f "$root/build/CMakeCache.txt" ] || cmake -S "$root" -B "$root/build" >/dev/null
  cmake --build "$root/build" --target beam-bpf-offsets -j2 >/dev/null
  tool=$root/build/beam-bpf-offsets
fi

# write_table OUT HEADER-LINES... -- ARGS for beam-bpf-offsets
write_table() {
  local out=$1; shift
  local header=()
  while [ "$1" != "--" ]; do header+=("$1"); shift; done
  shift
  local tmp
  tmp=$(mktemp "$out.XXXXXX")
  { printf '# %s\n' "${header[@]}"; "$tool" "$@"; } >"$tmp" || { rm -f "$tmp"; exit 1; }
  chmod 644 "$tmp"
  mv "$tmp" "$out"
  echo "$out"
}

installed=(/usr/lib/erlang/erts-*/bin/beam.smp)
[ "${#installed[@]}" -eq 1 ] && [ -e "${installed[0]}" ] || { echo "make-offsets.sh: need exactly one installed /usr/lib/erlang/erts-*/bin/beam.smp" >&2; exit 1; }
build_id=$(readelf -n "${installed[0]}" | awk '/Build ID:/ { print $3; exit }')
debug25=$("$root/scripts/build-debug-vm.sh" | tail -n 1)
write_table "$root/userspace/target/offsets/otp25.txt" \
  "OTP 25: erlang-base $(dpkg-query -W -f '${Version}' erlang-base), ${installed[0]}" \
  "Made by scripts/make-offsets.sh from the DWARF of $debug25" \
  "(a -g build of the same Debian source and configure flags, scripts/build-debug-vm.sh)" \
  -- --build-id "$build_id" "$debug25"

# test_vm_table MAJOR FLAVOUR-BINARY TABLE HEADER: a table from the DWARF of a test VM's
# unstripped emulator, which scripts/build-test-vms.sh keeps in its debug/.
test_vm_table() {
  local work
  work=$(dirname "$("$root/scripts/build-test-vms.sh" "$1" | tail -n 1)")
  write_table "$root/userspace/target/offsets/$3" "$4" \
    "Made by scripts/make-offsets.sh from the DWARF of $work/debug/$2" \
    -- "$work/debug/$2"
}
test_vm_table 27 beam.smp otp27.txt "OTP 27.3.4.1, plain ./configure (scripts/build-test-vms.sh 27)"
test_vm_table 27 beam.lcnt.smp otp27-lock-counting.txt \
  "OTP 27.3.4.1, --enable-lock-counter: the lcnt emulator (erl -emu_type lcnt)"
test_vm_table 29 beam.smp otp29.txt "OTP 29.1.1, plain ./configure (scripts/build-test-vms.sh 29)"
