# Sourced by the build scripts: Debian source lines and the OTP source trees they download.

# scripts/test.sh builds the test VMs at once, and apt takes a lock of its own for each step:
# their package steps take turns (flock waits for the other's).
apt_lock=/var/tmp/beam-bpf-apt.lock
apt_locked() { flock "$apt_lock" "$@"; }

# deb-src lines for bookworm (OTP 25, the installed VM's source), trixie (OTP 27.3.4.1) and forky
# (OTP 29.1.1): of the last two only the upstream tarball downloads (the full `apt-get source`
# fails on missing Debian files; sid's 29.1.2 tarball answers 404).
otp_source_lines() {
  (
    flock 9
    local f=/etc/apt/sources.list.d/beam-bpf-src.sources
    if ! grep -qs forky "$f"; then
      cat > "$f" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates trixie forky
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
      apt-get update -qq
    fi
  ) 9>"$apt_lock"
}

# Unpacks the OTP source of a Debian suite under $2 (once) and prints the source tree's path:
#   otp_source trixie WORK   OTP 27.3.4.1
#   otp_source forky WORK    OTP 29.1.1
otp_source() {
  local suite=$1 work=$2 major src
  case $suite in trixie) major=27 ;; forky) major=29 ;; *) echo "otp-source.sh: no OTP source for $suite" >&2; return 1 ;; esac
  mkdir -p "$work"
  src=$(find "$work" -maxdepth 1 -type d -name "otp-OTP-$major*" | head -n 1)
  if [ -z "$src" ]; then
    otp_source_lines
    (cd "$work" && apt_locked apt-get source -qq --tar-only "erlang/$suite" >/dev/null 2>&1 \
      && tar xf erlang_"$major"*.orig.tar.xz) \
      || { echo "otp-source.sh: could not download the OTP $major source (erlang/$suite)" >&2; return 1; }
    src=$(find "$work" -maxdepth 1 -type d -name "otp-OTP-$major*" | head -n 1)
  fi
  echo "$src"
}
