#!/usr/bin/env bash
# Builds beam.smp with DWARF from the Debian source of the installed Erlang, with Debian's
# configure flags, so that `beam-bpf-offsets` can read struct layouts that match the stripped
# distribution binary. Prints the path of the debug beam.smp on its last line.
#
#   scripts/build-debug-vm.sh [WORKDIR]     (default: /var/tmp/beam-bpf-otp)
#
# Used to (re)generate userspace/target/offsets/*.txt: scripts/make-offsets.sh runs it and then the offsets tool.
set -euo pipefail
work=${1:-/var/tmp/beam-bpf-otp}
export DEBIAN_FRONTEND=noninteractive

# shellcheck source=scripts/otp-source.sh
. "$(dirname "$0")/otp-source.sh"
otp_source_lines
apt_locked apt-get install -y -qq dpkg-dev libsystemd-dev libsctp-dev libssl-dev libncurses-dev zlib1g-dev \
  autoconf >/dev/null

ver=$(dpkg-query -W -f '${source:Version}' erlang-base)
mkdir -p "$work" && cd "$work"
src=$(find . -maxdepth 1 -type d -name 'erlang-*' | head -n 1)
if [ -z "$src" ]; then
  apt_locked apt-get source -qq "erlang=$ver" >/dev/null
  src=$(find . -maxdepth 1 -type d -name 'erlang-*' | head -n 1)
fi
cd "$src"
beam=$(find bin -path '*/beam.smp' 2>/dev/null | head -n 1 || true)
if [ -z "$beam" ]; then
  # Debian's configure flags (debian/rules) that change struct layout: JIT on, SMP, systemd,
  # sctp, and the same -D defines. -g is what we add.
  export CFLAGS="-g -O2 -fno-strict-aliasing"
  ./configure --prefix=/usr --enable-dynamic-ssl-lib --enable-shared-zlib --enable-systemd \
    --enable-sctp --without-ssl-zlib --without-javac --without-odbc --without-wx \
    --enable-jit >/dev/null
  # `make emulator` also links erl_call, which needs erl_interface built first and fails
  # without it; beam.smp is already complete by then, and it is all we need.
  make -j"$(nproc)" emulator >build.log 2>&1 || true
  beam=$(find bin -path '*/beam.smp' | head -n 1)
  [ -n "$beam" ] || { tail -n 30 build.log >&2; echo "build of beam.smp failed (see $PWD/build.log)" >&2; exit 1; }
fi
echo "$PWD/$beam"
