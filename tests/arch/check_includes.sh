#!/usr/bin/env bash
# The dependency rules of DESIGN.md ("Layout"), checked on the sources' #include lines:
# each folder includes only the folders below it, and each part of engine/ only the parts
# below it (the same rules its CMake targets express as links). Exits 1 listing every
# include that points the wrong way.
#   tests/arch/check_includes.sh [ROOT]
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
# What each folder may include ("engine" alone: any part of engine/).
declare -A allowed=(
  [common]="common"
  [ipc]="common ipc"
  [tokenizer]="common tokenizer"
  [chat]="common chat"
  [grammar]="common grammar"
  [kernels]="common kernels"
  [loader]="common ipc kernels loader tokenizer"
  # The model code knows no processes: no ipc/ below tp/ and serve/ (cuda/ shares device
  # memory across processes, so it may).
  [engine/core]="common grammar kernels engine/core"
  [engine/cpu]="common kernels engine/core engine/cpu"
  [engine/cuda]="common ipc kernels engine/core engine/cuda"
  [engine]="common kernels engine/core engine/cpu engine/cuda engine"
  [engine/tp]="common ipc kernels engine/core engine/cuda engine/tp"
  [engine/serve]="common grammar ipc kernels engine"
  [frontend]="common ipc tokenizer chat grammar frontend"
  [quant]="common tokenizer loader kernels engine quant"
  [tools]="common ipc tokenizer chat grammar loader kernels engine frontend quant tools"
)
# The folder (or part of engine/) a path names.
area_of() {
  local path=$1
  if [[ $path == engine/*/* ]]; then
    local rest=${path#engine/}
    echo "engine/${rest%%/*}"
  else
    echo "${path%%/*}"
  fi
}
permits() {  # permits ALLOWED TARGET
  local entry
  for entry in $1; do
    [[ $entry == "$2" ]] && return 0
    [[ $entry == engine && $2 == engine* ]] && return 0
  done
  return 1
}
bad=0
while IFS= read -r line; do
  file=${line%%:*}
  rel=${file#"$ROOT"/}
  area=$(area_of "$rel")
  [[ -v "allowed[$area]" ]] || continue
  inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
  target=$(area_of "$inc")
  if ! permits "${allowed[$area]}" "$target"; then
    echo "$rel: includes $inc, which $area/ must not depend on"
    bad=1
  fi
done < <(grep -rHE '^#include "[a-z_]+/' "$ROOT"/{common,ipc,tokenizer,chat,grammar,kernels,loader,engine,frontend,quant,tools} \
           --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' 2>/dev/null || true)
exit $bad
