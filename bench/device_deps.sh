#!/usr/bin/env bash
# Prepares, on a Debian 12 machine with network access, what bench/device_check.sh needs
# on a bare GPU machine that has only the CUDA image (no apt, no network): the Debian
# packages of the build's libraries as .deb files in .device-deps/, and the small shared
# test model in .device-deps/shared/. Both folders are git-ignored; carry .device-deps to
# the GPU machine beside the checkout.
#   bench/device_deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.device-deps
mkdir -p "$out/debs" "$out/shared/models"
packages=(
  libboost1.81-dev libboost-json1.81-dev libboost-json1.81.0 libboost-context1.81-dev libboost-context1.81.0
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev libgmock-dev
  libsentencepiece-dev libsentencepiece0 libprotobuf-lite32 libprotobuf32
  libpcre2-dev libpcre2-8-0 libicu-dev libicu72 libsystemd-dev libsystemd0
  pkgconf pkgconf-bin libpkgconf3
)
(cd "$out/debs" && apt-get download "${packages[@]}")
shared=${HEARTH_SHARED:-../shared}
if [ -d "$shared/models/stories260K" ]; then
  cp -r "$shared/models/stories260K" "$out/shared/models/"
fi
du -sh "$out"
