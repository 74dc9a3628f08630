#!/usr/bin/env bash
# Builds a test VM of another release the way kerl and asdf users build theirs: the upstream
# tarball (through Debian's source packages: trixie has 27.3.4.1, forky 29.1.1), a plain
# `./configure && make && make install` into a private prefix, with OTP's default -O2 -g.
#
#   scripts/build-test-vms.sh [27|29] [WORKDIR]   (default 27; WORKDIR /var/tmp/beam-bpf-otpNN; cached)
# Prints the prefix (its bin/erl is the VM) on its last line.
#
# OTP 27: configured with `--enable-lock-counter`, so OTP also builds the `lcnt` flavour
# (`erl -emu_type lcnt`), a second beam.smp whose `Process` has lock-counting fields, so its
# struct offsets differ from the plain build's. Both are then stripped so that their build-ids
# match no shipped table and they carry no DWARF; the unstripped binaries are kept in debug/ for
# the offsets test (the shipped OTP 27 tables are checked against their DWARF) and for
# scripts/make-offsets.sh.
#
# OTP 29: built once and installed twice, the two forms people run:
#   WORKDIR/prefix     as `make install` leaves it: symbols and DWARF (kerl, asdf)
#   WORKDIR/stripped   the same files, beam.smp stripped of everything (what distributions ship);
#                      OTP 29 builds with -fvisibility=hidden, so that leaves no symbol beam-bpf used.
# The unstripped beam.smp is kept in debug/ as for 27.
set -euo pipefail
major=${1:-27}
case $major in 27) suite=trixie ;; 29) suite=forky ;; *) echo "build-test-vms.sh: no test VM for OTP $major (27 or 29)" >&2; exit 2 ;; esac
work=${2:-/var/tmp/beam-bpf-otp$major}
prefix=$work/prefix
export DEBIAN_FRONTEND=noninteractive

done_marker=$work/.built
if [ -f "$done_marker" ] && [ -x "$prefix/bin/erl" ]; then
  echo "$prefix"; exit 0
fi

# shellcheck source=scripts/otp-source.sh
. "$(dirname "$0")/otp-source.sh"
apt_locked apt-get install -y -qq --no-install-recommends build-essential dpkg-dev libncurses-dev xz-utils >/dev/null
src=$(otp_source "$suite" "$work")
cd "$src"

# Only what the tests use: the runtime, erlc, and tools (tprof). erl_interface and sasl are
# mandatory for OTP's configure; stdlib's parser is made with parsetools' yecc.
keep=" kernel stdlib sasl compiler erl_interface parsetools tools runtime_tools "
skip=()
for d in lib/*/; do
  app=$(basename "$d")
  [[ $keep == *" $app "* ]] || skip+=("--without-$app")
done
extra=()
[ "$major" = 27 ] && extra+=(--enable-lock-counter)

log=$work/build.log
if ! { ./configure --prefix="$prefix" "${extra[@]}" --without-javac "${skip[@]}" \
       && make -j"$(nproc)" && make install; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "build-test-vms.sh: OTP $major build failed (see $log)" >&2
  exit 1
fi

erts=$(find "$prefix/lib/erlang" -maxdepth 1 -type d -name 'erts-*' | head -n 1)
flavours=(beam.smp)
[ "$major" = 27 ] && flavours+=(beam.lcnt.smp)
mkdir -p "$work/debug"
for b in "${flavours[@]}"; do
  [ -f "$erts/bin/$b" ] || { echo "build-test-vms.sh: no $b under $erts" >&2; exit 1; }
  cp "$erts/bin/$b" "$work/debug/$b"
done
if [ "$major" = 27 ]; then
  for b in "${flavours[@]}"; do strip --strip-all "$erts/bin/$b"; done
else
  # The stripped form: a copy of the install whose scripts name the copy's root.
  rm -rf "$work/stripped"
  cp -a "$prefix" "$work/stripped"
  grep -rlF "$prefix" "$work/stripped/bin" "$work/stripped/lib/erlang/bin" "$work/stripped/lib/erlang/erts-"*/bin \
    | while read -r f; do [ -L "$f" ] || sed -i "s|$prefix|$work/stripped|g" "$f"; done
  strip --strip-all "$work/stripped/lib/erlang/erts-"*/bin/beam.smp
fi
touch "$done_marker"
echo "$prefix"
