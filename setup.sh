#!/usr/bin/env bash
# Sets up a Debian 12 machine to build hearth, then builds it into build/.
# Idempotent: packages already present are not reinstalled, and the build is
# incremental. Usage: ./setup.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  build-essential cmake ninja-build pkg-config git
  libboost1.81-dev libboost-json1.81-dev libboost-context1.81-dev  # Boost.Context: the emulated CUDA device's fibers
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsentencepiece-dev libpcre2-dev libicu-dev libsystemd-dev
  libpng-dev  # hearth bench's plots
  systemd  # systemd-analyze and systemd-socket-activate, for the tests
  python3-numpy  # tests/reference/hf_forward.py: the independent forward each family is checked against
  chromium  # headless, for the chat page's test (tests/integration/node/webui_check.mjs)
  yamllint jq  # the deploy/ files' checks (promtool, from the prometheus package, also
               # runs there when present: .ci/run installs it; it is left out here because
               # the package starts a Prometheus server on the machine)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

# The client SDKs the integration tests drive (tests/integration/node); without npm, or
# offline, that one test skips and says so.
if command -v npm >/dev/null 2>&1 && [ ! -d tests/integration/node/node_modules/@anthropic-ai/sdk ]; then
  npm ci --prefix tests/integration/node --no-audit --no-fund --loglevel=error ||
    echo "setup.sh: the npm packages of tests/integration/node did not install; SdkTest will skip"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build
