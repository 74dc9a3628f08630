#!/usr/bin/env bash
# Builds the OTP 27 test VMs the way kerl and asdf users build theirs: the upstream 27.3.4.1
# tarball (the newest OTP source these machines can download, through Debian trixie's source
# package), a plain `./configure && make && make install` into a private prefix, then stripped
# so that its build-id matches no shipped table and it carries no DWARF.
#
# The configure line adds `--enable-lock-counter`: OTP then also builds the `lcnt` emulator
# flavour (`erl -emu_type lcnt`), a second beam.smp whose `Process` has lock-counting fields, so
# its struct offsets differ from the plain build's. That is the variant the tests run.
#
# The unstripped binaries are kept beside the prefix (debug/) before stripping: the offsets
# test reads their DWARF to check the shipped OTP 27 table, and scripts/make-offsets.sh
# regenerates that table from them.
#
#   scripts/build-test-vms.sh [WORKDIR]   (default /var/tmp/beam-bpf-otp27; cached there)
# Prints the prefix (its bin/erl is the VM) on its last line.
set -euo pipefail
work=${1:-/var/tmp/beam-bpf-otp27}
prefix=$work/prefix
export DEBIAN_FRONTEND=noninteractive

if [ -x "$prefix/bin/erl" ] && [ -f "$work/debug/beam.smp" ] && [ -f "$work/debug/beam.lcnt.smp" ]; then
  echo "$prefix"; exit 0
fi

# shellcheck source=scripts/otp-source.sh
. "$(dirname "$0")/otp-source.sh"
apt-get install -y -qq --no-install-recommends build-essential dpkg-dev libncurses-dev xz-utils >/dev/null
src=$(otp_source_trixie "$work")
cd "$src"

# Only what the tests use: the runtime, erlc, and tools (tprof). erl_interface and sasl are
# mandatory for OTP's configure; stdlib's parser is made with parsetools' yecc.
keep=" kernel stdlib sasl compiler erl_interface parsetools tools runtime_tools "
skip=()
for d in lib/*/; do
  app=$(basename "$d")
  [[ $keep == *" $app "* ]] || skip+=("--without-$app")
done

log=$work/build.log
if ! { ./configure --prefix="$prefix" --enable-lock-counter --without-javac "${skip[@]}" \
       && make -j"$(nproc)" && make install; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "build-test-vms.sh: OTP 27 build failed (see $log)" >&2
  exit 1
fi

erts=$(find "$prefix/lib/erlang" -maxdepth 1 -type d -name 'erts-*' | head -n 1)
[ -f "$erts/bin/beam.smp" ] && [ -f "$erts/bin/beam.lcnt.smp" ] \
  || { echo "build-test-vms.sh: no beam.smp/beam.lcnt.smp under $erts" >&2; exit 1; }
mkdir -p "$work/debug"
for b in beam.smp beam.lcnt.smp; do
  cp "$erts/bin/$b" "$work/debug/$b"
  strip --strip-all "$erts/bin/$b"
done
echo "$prefix"
