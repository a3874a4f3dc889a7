#!/usr/bin/env bash
# cuda_bench at the tiny shape (on the emulated device in CI): every kind of figure is
# printed and the run succeeds. The figures themselves mean nothing there.
#   bench/cuda/smoke_test.sh PATH/TO/cuda_bench
set -euo pipefail
rc=0
out=$("$1" --shapes tiny --types f16,q4_0 --batches 1,3 --ctx 40 --steps 2 --prefill 16 --reps 1 --copy-mib 8) || rc=$?
echo "$out"
[ "$rc" = 0 ] || { echo "smoke_test: cuda_bench exited $rc" >&2; exit "$rc"; }
for want in "device-to-device copy" "decode, batch 3, context 40, greedy" "sampled (temperature" "prefill of 16" \
  "matmul q4_0" "column ranges)" "x 512 tokens: streaming / int8 mma" "gptq int4 g128 [256, 768] x 512 tokens: streaming / f16 mma" "2 ranges (the backend's)" "CUDA graphs"; do
  grep -qF "$want" <<<"$out" || { echo "smoke_test: no row with \"$want\"" >&2; exit 1; }
done
