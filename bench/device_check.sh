#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, builds the CUDA code for the GPU's own
# architecture, runs every CUDA test (each op against the CPU backend, the host-side
# device math, the stories260K ground truth on the device), writes the logs under $OUT
# when it is set, and prints a short table last. Meant to finish inside 8 minutes.
#
# It runs on a bare machine with only the CUDA image (no apt): when the build's Debian
# libraries are not installed, it unpacks the .deb files that bench/device_deps.sh
# put in .device-deps/ into a private prefix and builds against those.
#   bench/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${OUT:-/tmp/hearth-device-check}
mkdir -p "$logs"
build=build-device
start=$SECONDS
row() { printf '| %s | %s |\n' "$1" "$2" >>"$logs/table.md"; }
: >"$logs/table.md"

gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -n "$arch" ] || arch=90
row "GPU" "${gpu:-none found by nvidia-smi} (building for sm_$arch)"

cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_CUDA=ON
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DHEARTH_BUILD_BENCH=OFF)
if [ -d .device-deps/debs ] && ! pkg-config --exists libsystemd sentencepiece 2>/dev/null; then
  prefix=/tmp/hearth-deps
  mkdir -p "$prefix"
  for deb in .device-deps/debs/*.deb; do dpkg-deb -x "$deb" "$prefix" 2>/dev/null || dpkg -x "$deb" "$prefix"; done
  lib=$prefix/usr/lib/x86_64-linux-gnu
  export PATH=$prefix/usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$lib/pkgconfig:$prefix/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$prefix
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig
  cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_LIBRARY_PATH="$lib" -DCMAKE_INCLUDE_PATH="$prefix/usr/include"
    -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
  row "libraries" "unpacked from .device-deps into $prefix"
fi
[ -d .device-deps/shared/models ] && export HEARTH_SHARED=$PWD/.device-deps/shared

t=$SECONDS
if cmake "${cmake_args[@]}" >"$logs/configure.log" 2>&1 &&
  cmake --build "$build" -j"$(nproc)" --target cuda_test device_math_test cuda_resident_test hearth hearth-loader hearth-engine hearth-frontend >"$logs/build.log" 2>&1; then
  row "build (sm_$arch)" "ok, $((SECONDS - t)) s; warnings: $(grep -c -i 'warning' "$logs/build.log")"
else
  row "build (sm_$arch)" "FAILED after $((SECONDS - t)) s: see configure.log / build.log"
  tail -30 "$logs/configure.log" "$logs/build.log" 2>/dev/null
  echo; cat "$logs/table.md"
  exit 1
fi

t=$SECONDS
"$build/bin/device_math_test" >"$logs/device_math_test.log" 2>&1
row "device math and launch geometry (host)" "$(grep -E '^\[  (PASSED|FAILED)' "$logs/device_math_test.log" | tr '\n' ' ')"
timeout 300 "$build/bin/cuda_test" --gtest_color=no >"$logs/cuda_test.log" 2>&1
rc=$?
grep -E '^\[ +(OK|FAILED|SKIPPED) +\]' "$logs/cuda_test.log" | grep -v 'listed below' | sed -E 's/^\[ +([A-Z]+) +\] ([^ ]+).*\(([0-9]+ ms)\).*/\2: \1, \3/' |
  while read -r line; do row "${line%%:*}" "${line#*: }"; done
row "cuda_test" "exit $rc in $((SECONDS - t)) s"
t=$SECONDS
timeout 240 "$build/bin/cuda_resident_test" --gtest_color=no >"$logs/cuda_resident_test.log" 2>&1
rc=$?
row "resident slab across a loader SIGKILL (cuda_resident_test)" "exit $rc in $((SECONDS - t)) s"
grep -E '^loader ready: ' "$logs/cuda_resident_test.log" | head -2 |
  while read -r line; do row "loader slabs" "${line#loader ready: }"; done
row "total" "$((SECONDS - start)) s"
tail -40 "$logs/cuda_test.log"
tail -20 "$logs/cuda_resident_test.log"
echo
echo "| check | result |"
echo "| --- | --- |"
cat "$logs/table.md"
