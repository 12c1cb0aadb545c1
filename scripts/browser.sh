#!/usr/bin/env bash
# Makes sure Debian's chromium and chromedriver are installed, for the browser tests and the
# screenshots. Installs them with apt-get when missing and running as root; otherwise says how.
set -euo pipefail

have() {
  { command -v chromedriver >/dev/null 2>&1 || [ -x /usr/lib/chromium/chromedriver ]; } &&
    { [ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null 2>&1; }
}

if have; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "browser: installing chromium and chromium-driver" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq chromium chromium-driver >&2
fi
if ! have; then
  echo "browser: chromium and chromedriver are missing; install them with" \
       "'apt-get install -y chromium chromium-driver' (the browser tests fail without them)" >&2
  exit 1
fi
