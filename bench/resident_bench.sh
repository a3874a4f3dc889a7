#!/usr/bin/env bash
# Resident weights, side by side for the 1B synthetic model in F16, Q8_0 and Q4_0:
#   - cold load: hearth-loader reading the GGUF and publishing the weights segment
#     (page cache dropped first when this user may; the warm figure is printed too)
#   - attach: an engine process attaching to the segment, from exec to ready to run
#   - first token: the same process, from exec to its first generated token
#   - in-process: `hearth generate --model FILE` reading the file itself, to its first token
# Usage: bench/resident_bench.sh [build dir] [models dir]     (REPS=5, SHM_DIR=/dev/shm)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODELS=${2:-/tmp/hearth-bench/models}
REPS=${REPS:-5}
SHM=${SHM_DIR:-/dev/shm}
HEARTH=$BUILD/bin/hearth
LOADER=$BUILD/bin/hearth-loader
PROMPT="hello world"
mkdir -p "$MODELS"

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
json_field() { sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p" | awk "{printf \"%.9f\", \$1}"; }
can_drop_caches() { [ -w /proc/sys/vm/drop_caches ]; }

# Process start to main(): the wall time of a hearth command that does nothing else.
exec_ms=$(for _ in $(seq 9); do t0=$(now); "$HEARTH" help >/dev/null; t1=$(now); echo "($t1 - $t0) * 1000" | bc -l; done | median)

printf '# resident weights, 1B synthetic model (dim 2048, 16 layers, vocab 32000), %s threads, shm %s\n' \
  "${HEARTH_THREADS:-$(nproc)}" "$SHM"
printf '| weights | segment | cold load s | warm load s | attach ms | first token ms | in-process first token ms | cold/attach |\n'
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
for type in f16 q8_0 q4_0; do
  model=$MODELS/1b-$type.gguf
  [ -f "$model" ] || "$HEARTH" synth --preset 1b --type "$type" --gguf "$model" >/dev/null 2>&1
  instance=bench-$type
  rm -f "$SHM/hearth.$instance.weights"
  cold=nan
  if can_drop_caches; then
    sync; echo 3 > /proc/sys/vm/drop_caches
    cold=$("$LOADER" --model "$model" --instance "$instance" --shm-dir "$SHM" --exit-after-publish 2>/dev/null | json_field seconds)
    rm -f "$SHM/hearth.$instance.weights"
  fi
  warm=$("$LOADER" --model "$model" --instance "$instance" --shm-dir "$SHM" --exit-after-publish 2>/dev/null | json_field seconds)
  [ "$cold" = nan ] && cold=$warm
  bytes=$(stat -c %s "$SHM/hearth.$instance.weights")
  attach=(); first=(); inproc=()
  for _ in $(seq "$REPS"); do
    out=$("$HEARTH" generate --attach "$instance" --shm-dir "$SHM" --prompt "$PROMPT" --max-tokens 1 --ctx 512 --json 2>/dev/null)
    attach+=("$(echo "$(echo "$out" | json_field ready_seconds) * 1000 + $exec_ms" | bc -l)")
    first+=("$(echo "$(echo "$out" | json_field first_token_seconds) * 1000 + $exec_ms" | bc -l)")
    out=$("$HEARTH" generate --model "$model" --prompt "$PROMPT" --max-tokens 1 --ctx 512 --json 2>/dev/null)
    inproc+=("$(echo "$(echo "$out" | json_field first_token_seconds) * 1000 + $exec_ms" | bc -l)")
  done
  a=$(printf '%s\n' "${attach[@]}" | median)
  f=$(printf '%s\n' "${first[@]}" | median)
  i=$(printf '%s\n' "${inproc[@]}" | median)
  printf '| %s | %.0f MiB | %.2f | %.2f | %.1f | %.1f | %.1f | %.0fx |\n' "$type" "$(echo "$bytes / 1048576" | bc -l)" \
    "$cold" "$warm" "$a" "$f" "$i" "$(echo "$cold * 1000 / $a" | bc -l)"
  rm -f "$SHM/hearth.$instance.weights"
done
echo
printf 'attach = process start of `hearth generate --attach` to ready to run (segment mapped and validated,\n'
printf 'tokenizer and model built); first token = process start to the first generated token\n'
printf 'of a 3-token prompt; process start to main() measured as %.1f ms. Medians of %s runs.\n' "$exec_ms" "$REPS"
