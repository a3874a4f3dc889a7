#!/usr/bin/env bash
# Registers, shared memory, stack and spills of every kernel in kernels/cuda/*.cu for one
# architecture, as ptxas reports them (-Xptxas -v), one table row a kernel. With --check
# it fails when any kernel spills (hearth's kernels are kept free of spills).
#   bench/ptxas_report.sh [--check] [ARCH]     # ARCH: 90 (default), 80, 100, ...
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = --check ] && check=1 && shift
arch=${1:-90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "ptxas_report: no nvcc (set NVCC or put it on PATH)" >&2; exit 2; }
command -v c++filt >/dev/null || c++filt() { cat; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| kernel (sm_$arch) | registers | shared bytes | stack bytes | spill stores / loads |"
echo "| --- | ---: | ---: | ---: | --- |"
spills=0
for src in kernels/cuda/*.cu; do
  if ! "$nvcc" -std=c++17 -O3 -arch="sm_$arch" -Xptxas -v -I. -c "$src" -o "$work/k.o" >"$work/log" 2>&1; then
    cat "$work/log" >&2
    echo "ptxas_report: $src does not compile for sm_$arch" >&2
    exit 1
  fi
  # ptxas prints, per entry function: its name, then the stack/spill line, then the
  # registers/shared line.
  while IFS='|' read -r name stack stores loads regs smem; do
    pretty=$(echo "$name" | c++filt | perl -pe 's/^void //; s/hearth::kernels::cuda::(\(anonymous namespace\)::)?//g;
      s/(\((?:[^()]++|(?1))*\))$//; s/\(hearth::DType\)0/F32/; s/\(hearth::DType\)1/F16/; s/\(hearth::DType\)2/BF16/; s/hearth::Block/Block/')
    echo "| \`$pretty\` ($(basename "$src")) | $regs | $smem | $stack | $stores / $loads |"
    [ "$stores" = 0 ] && [ "$loads" = 0 ] || spills=$((spills + 1))
  done < <(awk '
    /Compiling entry function/ { match($0, /\x27[^\x27]+\x27/); name = substr($0, RSTART + 1, RLENGTH - 2) }
    /bytes stack frame/ { stack = $1; stores = $5; loads = $9 }
    /Used [0-9]+ registers/ {
      regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
      smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", smem) }
      if (name != "") print name "|" stack "|" stores "|" loads "|" regs "|" smem
      name = ""
    }' "$work/log")
done
if [ "$spills" -gt 0 ]; then
  echo "ptxas_report: $spills kernel(s) spill registers on sm_$arch" >&2
  [ "$check" = 1 ] && exit 1
fi
exit 0
