#!/bin/sh
# install-deps.sh: installs the Debian 12 packages tjit builds with, if any are missing.
# Idempotent and silent when everything is there; needs root (or sudo) only when installing.
set -eu
pkgs="cmake make gcc pkg-config llvm-19-dev libffi-dev libcmocka-dev libopenmpi-dev openmpi-bin"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "tjit: installing missing packages:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "tjit: run as root (or install sudo) to install:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
