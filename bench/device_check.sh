#!/usr/bin/env bash
# The GPU check: builds for sm_90, runs every CUDA test and the GPU benchmarks, and
# prints a short table last. Meant for a machine with an NVIDIA GPU; on one without,
# the CUDA tests report themselves skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build-device
./setup.sh >/dev/null 2>&1 || { echo "setup.sh failed"; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DHEARTH_BUILD_BENCH=ON >/dev/null || { echo "configure failed"; exit 1; }
cmake --build "$build" -j"$(nproc)" 2>&1 | tail -5
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
ctest --test-dir "$build" -R 'cuda' --output-on-failure 2>&1 | tee /tmp/hearth-device-ctest.log | tail -20
echo
echo "| check | result |"
echo "| --- | --- |"
echo "| CUDA tests | $(grep -E 'tests passed|tests failed' /tmp/hearth-device-ctest.log | tail -1) |"
