#!/usr/bin/env bash
# Installs what tessel needs from Debian 12's packages, only what is missing. Run as root (or
# with sudo available). Extra package names given as arguments are installed along.
set -euo pipefail
packages=(build-essential cmake libopenmpi-dev openmpi-bin libdnnl-dev libopenblas-dev
          libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev libgoogle-perftools-dev zlib1g-dev
          pkg-config libpcre2-dev libsentencepiece-dev sentencepiece libutf8proc-dev libssl-dev
          time ninja-build
          "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
