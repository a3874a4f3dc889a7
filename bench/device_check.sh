#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, builds the CUDA code for the GPU's own
# architecture, runs every CUDA test (each op against the CPU backend, the host-side
# device math, the stories260K ground truth on the device), the resident slab and KV
# across kills, and the 1B synthetic model against the CPU; then the figures
# (bench/cuda/cuda_bench: decode and prefill against the copy bandwidth measured in the
# same run, each product path and attention) and ptxas's registers and spills for the
# GPU's architecture. With time left it builds the emulated device (HEARTH_CUDA=EMU) too
# and puts its cuda_test results beside the GPU's, test for test: a difference is a bug
# in one of the two, or something the emulator cannot show. It writes the logs under
# $OUT when it is set and prints its tables last. Meant to finish inside 8 minutes.
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
deadline=480  # seconds: every stage after the tests fits in what is left of it
left() { echo $((deadline - (SECONDS - start))); }
row() { printf '| %s | %s |\n' "$1" "$2" >>"$logs/table.md"; }
: >"$logs/table.md"

gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -n "$arch" ] || arch=90
row "GPU" "${gpu:-none found by nvidia-smi} (building for sm_$arch)"

dep_args=()
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
  dep_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_LIBRARY_PATH="$lib" -DCMAKE_INCLUDE_PATH="$prefix/usr/include"
    -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
  row "libraries" "unpacked from .device-deps into $prefix"
fi
[ -d .device-deps/shared/models ] && export HEARTH_SHARED=$PWD/.device-deps/shared
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_CUDA=ON
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DHEARTH_BUILD_BENCH=OFF "${dep_args[@]}")

t=$SECONDS
if cmake "${cmake_args[@]}" >"$logs/configure.log" 2>&1 &&
  cmake --build "$build" -j"$(nproc)" --target cuda_test device_math_test cuda_resident_test cuda_bench hearth hearth-loader hearth-engine hearth-frontend >"$logs/build.log" 2>&1; then
  row "build (sm_$arch)" "ok, $((SECONDS - t)) s; warnings: $(grep -c -i 'warning' "$logs/build.log")"
else
  row "build (sm_$arch)" "FAILED after $((SECONDS - t)) s: see configure.log / build.log"
  tail -30 "$logs/configure.log" "$logs/build.log" 2>/dev/null
  echo; cat "$logs/table.md"
  exit 1
fi

# ptxas's registers and spills for this architecture, on the CPU while the GPU tests run.
(timeout 300 bench/ptxas_report.sh "$arch" >"$logs/ptxas.md" 2>"$logs/ptxas.log"; echo $? >"$logs/ptxas.rc") &
ptxas=$!

t=$SECONDS
"$build/bin/device_math_test" >"$logs/device_math_test.log" 2>&1
row "device math and launch geometry (host)" "$(grep -E '^\[  (PASSED|FAILED)' "$logs/device_math_test.log" | tr '\n' ' ')"
timeout 300 "$build/bin/cuda_test" --gtest_color=no >"$logs/cuda_test.log" 2>&1
rc=$?
row "cuda_test" "exit $rc in $((SECONDS - t)) s"

t=$SECONDS
if [ "$(left)" -ge 150 ]; then
  timeout 120 "$build/bin/cuda_resident_test" --gtest_color=no >"$logs/cuda_resident_test.log" 2>&1
  row "resident slab across a loader SIGKILL (cuda_resident_test)" "exit $? in $((SECONDS - t)) s"
else
  : >"$logs/cuda_resident_test.log"
  row "resident slab across a loader SIGKILL (cuda_resident_test)" "skipped: out of time"
fi
grep -E '^loader ready: ' "$logs/cuda_resident_test.log" | head -2 |
  while read -r line; do row "loader slabs" "${line#loader ready: }"; done

# The 1B synthetic model on the GPU: the loader's slab copy, attach to it and first token
# (hearth generate --attach --backend cuda:0), and greedy ids against the CPU's.
models=/tmp/hearth-device-models
mkdir -p "$models"
for type in f16 q4_0; do
  [ "$(left)" -ge 120 ] || { row "1B $type" "skipped: out of time"; continue; }
  model=$models/1b-$type.gguf
  [ -f "$model" ] || timeout 90 "$build/bin/hearth" synth --preset 1b --type "$type" --gguf "$model" >"$logs/synth-$type.log" 2>&1
  inst=devcheck-$type
  ready=$logs/loader-$type.out
  "$build/bin/hearth-loader" --model "$model" --instance "$inst" --device cuda --remove-on-exit \
    >"$ready" 2>"$logs/loader-$type.log" &
  loader=$!
  for _ in $(seq 1 600); do [ -s "$ready" ] || ! kill -0 $loader 2>/dev/null && break; sleep 0.1; done
  row "1B $type loader" "$(grep -o '"device_slabs":\[[^]]*\]' "$ready" || tail -1 "$logs/loader-$type.log")"
  gpu_out=$(timeout 60 "$build/bin/hearth" generate --attach "$inst" --backend cuda:0 --prompt "hello world" \
    --max-tokens 32 --ignore-eos --json 2>"$logs/generate-gpu-$type.log")
  cpu_out=$(timeout 120 "$build/bin/hearth" generate --model "$model" --prompt "hello world" --max-tokens 32 \
    --ignore-eos --json 2>"$logs/generate-cpu-$type.log")
  kill $loader 2>/dev/null; wait $loader 2>/dev/null
  field() { grep -o "\"$1\":[^,]*" <<<"$2" | head -1 | cut -d: -f2; }
  ids() { grep -o '"ids":\[[^]]*\]' <<<"$1"; }
  row "1B $type on cuda:0 (attached)" "ready $(field ready_seconds "$gpu_out") s, first token $(field first_token_seconds "$gpu_out") s, decode $(field decode_tokens_per_second "$gpu_out") tok/s"
  if [ -n "$(ids "$gpu_out")" ] && [ "$(ids "$gpu_out")" = "$(ids "$cpu_out")" ]; then
    row "1B $type greedy ids, 32 tokens" "equal to the CPU's"
  else
    row "1B $type greedy ids, 32 tokens" "GPU $(ids "$gpu_out") / CPU $(ids "$cpu_out")"
  fi
done
# The figures (bench/cuda/cuda_bench.cpp): copy bandwidth, decode at batch 1, 8 and 64
# (and 64 sampled) and prefill for the 1B and 8B shapes in F16 and Q4_0 beside their
# bandwidth floors, each product path's and attention's GB/s, in the time left of the
# eight minutes (at most 200 s). Its table is printed last.
t=$SECONDS
left=$(left)
[ "$left" -gt 200 ] && left=200
if [ "$left" -ge 45 ]; then
  timeout "$left" "$build/bin/cuda_bench" --shapes 1b,8b --types f16,q4_0 --batches 1,8,64 --ctx 512 --steps 16 \
    --prefill 512 --reps 20 >"$logs/cuda_bench.md" 2>"$logs/cuda_bench.log"
  row "cuda_bench" "exit $? in $((SECONDS - t)) s (limit $left s): the figures are the last table"
else
  : >"$logs/cuda_bench.md"
  row "cuda_bench" "skipped: out of time"
fi
wait $ptxas
row "ptxas (sm_$arch)" "exit $(cat "$logs/ptxas.rc" 2>/dev/null || echo '?'): $(grep -c '^| `' "$logs/ptxas.md") kernels, $(grep '^| `' "$logs/ptxas.md" | grep -vc ' 0 / 0 |$') spilling"

# The same tests on the emulated device when there is time (CI runs them there anyway),
# then one row a test: the GPU's result and, beside it, the emulated device's.
t=$SECONDS
: >"$logs/cuda_test_emu.log"
if [ "$(left)" -ge 240 ] &&
  timeout $(($(left) - 60)) cmake -S . -B build-emu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_CUDA=EMU \
    -DHEARTH_BUILD_BENCH=OFF "${dep_args[@]}" >"$logs/configure-emu.log" 2>&1 &&
  timeout $(($(left) - 60)) cmake --build build-emu -j"$(nproc)" --target cuda_test >"$logs/build-emu.log" 2>&1; then
  timeout "$(left)" build-emu/bin/cuda_test --gtest_color=no >"$logs/cuda_test_emu.log" 2>&1
  row "cuda_test on the emulated device" "built and run in $((SECONDS - t)) s"
else
  row "cuda_test on the emulated device" "not run: out of time or the emulated build failed (configure-emu.log, build-emu.log)"
fi
result() {  # TEST LOG: "OK, 12 ms", or "-" when the log has no result for it
  local r
  r=$(grep -E "^\[ +(OK|FAILED|SKIPPED) +\] $1 " "$2" | sed -E 's/^\[ +([A-Z]+) +\] [^ ]+ \(([0-9]+ ms)\).*/\1, \2/' | head -1)
  echo "${r:--}"
}
grep -hE '^\[ RUN +\] ' "$logs/cuda_test.log" "$logs/cuda_test_emu.log" | sed -E 's/^\[ RUN +\] //' | sort -u |
  while read -r test; do
    row "$test (GPU / emulated)" "$(result "$test" "$logs/cuda_test.log") / $(result "$test" "$logs/cuda_test_emu.log")"
  done
row "total" "$((SECONDS - start)) s"
tail -40 "$logs/cuda_test.log"
tail -20 "$logs/cuda_resident_test.log"
echo
echo "| check | result |"
echo "| --- | --- |"
cat "$logs/table.md"
echo
cat "$logs/ptxas.md" "$logs/cuda_bench.md" 2>/dev/null
