# Sourced by the build scripts: Debian source lines and the OTP source trees they download.

# deb-src lines for bookworm (OTP 25, the installed VM's source) and trixie (OTP 27.3.4.1: only
# its upstream tarball downloads; the full `apt-get source` fails on missing Debian files).
otp_source_lines() {
  local f=/etc/apt/sources.list.d/beam-bpf-src.sources
  if ! grep -qs trixie "$f"; then
    cat > "$f" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq
  fi
}

# Unpacks OTP 27.3.4.1 under $1 (once) and prints the source tree's path.
otp_source_trixie() {
  local work=$1 src
  mkdir -p "$work"
  src=$(find "$work" -maxdepth 1 -type d -name 'otp-OTP-27*' | head -n 1)
  if [ -z "$src" ]; then
    otp_source_lines
    (cd "$work" && apt-get source -qq --tar-only erlang/trixie >/dev/null 2>&1 \
      && tar xf erlang_27*.orig.tar.xz) \
      || { echo "otp-source.sh: could not download the OTP 27 source (erlang/trixie)" >&2; return 1; }
    src=$(find "$work" -maxdepth 1 -type d -name 'otp-OTP-27*' | head -n 1)
  fi
  echo "$src"
}
