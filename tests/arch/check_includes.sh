#!/usr/bin/env bash
# The dependency rules of DESIGN.md ("Layout"), checked on the sources' #include lines:
# each folder includes only the folders below it. Exits 1 listing every include that
# points the wrong way.
#   tests/arch/check_includes.sh [ROOT]
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
declare -A allowed=(
  [common]="common"
  [ipc]="common ipc"
  [tokenizer]="common tokenizer"
  [chat]="common chat"
  [grammar]="common grammar"
  [kernels]="common kernels"
  [loader]="common ipc kernels loader tokenizer"
  [engine]="common engine grammar ipc kernels"
  [frontend]="common ipc tokenizer chat grammar frontend"
  [quant]="common tokenizer loader kernels engine quant"
  [tools]="common ipc tokenizer chat grammar loader kernels engine frontend quant tools"
)
bad=0
for dir in "${!allowed[@]}"; do
  [ -d "$ROOT/$dir" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$line")
    if ! grep -qw -- "$target" <<<"${allowed[$dir]}"; then
      echo "${file#"$ROOT"/}: includes $target/, which $dir/ must not depend on"
      bad=1
    fi
  done < <(grep -rHE '^#include "[a-z_]+/' "$ROOT/$dir" --include='*.h' --include='*.cpp' --include='*.cu' || true)
done
# The engine's model code knows no IPC: only the serving loops, the group, the daemon, the
# fetch of the loader's device slab and where a rank's resident KV cache lives do.
while IFS= read -r file; do
  case $(basename "$file") in
    engine_server.cpp | engine_server.h | engine_main.cpp | shard_server.cpp | shard_server.h | tp_group.cpp | tp_group.h | \
    loader_slab.cpp | loader_slab.h | resident_cache.cpp | resident_cache.h) ;;
    *) echo "${file#"$ROOT"/}: engine model code includes ipc/"; bad=1 ;;
  esac
done < <(grep -rlE '^#include "ipc/' "$ROOT/engine" || true)
exit $bad
