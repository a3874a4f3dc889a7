#!/usr/bin/env bash
# llama.cpp's own speculative decoding on the GGUF files spec_bench writes, for its
# figures to stand beside: llama-server with and without n-gram drafts (--spec-type
# ngram-simple) on the copy built to cycle, from the prompt spec_bench gave it (its text
# through one cycle), and with and without the draft model (-md) from the bench prompt
# (BOS then 3 + i*7919 % (vocab-3), 128 tokens); one stream, prompts as token ids, 128
# greedy tokens, the median of --reps requests each after a warm-up.
#
#   bench/spec_peer.sh [--reps 3] [--threads 2] [--draft-max 4]
#
# Needs llama-server from ../shared/tools/peer/server_setup.sh ($PEER_DIR/llama-build)
# and the files of a spec_bench run (/tmp/hearth-bench/1b-q4_0*.gguf).
set -euo pipefail
reps=3 threads=2 draft_max=4
while (($#)); do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --draft-max) draft_max=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--threads N] [--draft-max K]" >&2; exit 2 ;;
  esac
done
peer=${PEER_DIR:-/tmp/peer}
server=$peer/llama-build/bin/llama-server
dir=/tmp/hearth-bench
[ -x "$server" ] || { echo "no $server: run ../shared/tools/peer/server_setup.sh" >&2; exit 1; }
for f in 1b-q4_0.gguf 1b-q4_0-cycling.gguf 1b-q4_0-cycling.prompt 1b-q4_0-silent2.gguf 1b-q4_0-first2.gguf; do
  [ -f "$dir/$f" ] || { echo "no $dir/$f: run build/bin/spec_bench first" >&2; exit 1; }
done
port=18093
distinct=$(python3 -c 'print([1] + [3 + (i * 7919) % (32000 - 3) for i in range(1, 128)])')
cycling="[$(cat $dir/1b-q4_0-cycling.prompt)]"

# One server: the median decode tok/s of `reps` requests and the drafts kept.
run() {  # PROMPT MODEL [DRAFT | ngram]
  local body="{\"prompt\": $1, \"n_predict\": 128, \"temperature\": 0, \"ignore_eos\": true, \"cache_prompt\": false}"
  local args=(-m "$2" -t "$threads" -tb "$threads" -c 1024 -np 1 --port $port --no-webui)
  if [ "${3:-}" = ngram ]; then
    # hearth's lookup matches 4 tokens at most; llama.cpp's default is 12
    args+=(--spec-type ngram-simple --spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m "$draft_max")
  elif [ -n "${3:-}" ]; then
    args+=(--spec-type draft-simple -md "$3" --spec-draft-n-max "$draft_max" --spec-draft-n-min 0 --spec-draft-p-min 0 -td "$threads")
  fi
  "$server" "${args[@]}" >/tmp/spec_peer_server.log 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do
    curl -sf localhost:$port/health >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -sf localhost:$port/completion -d "$body" >/dev/null  # warm-up
  local out=()
  for _ in $(seq 1 "$reps"); do out+=("$(curl -sf localhost:$port/completion -d "$body")"); done
  kill $pid 2>/dev/null || { echo "llama-server failed: $(tail -3 /tmp/spec_peer_server.log)" >&2; exit 1; }
  wait $pid 2>/dev/null || true
  printf '%s\n' "${out[@]}" | python3 -c '
import json, sys, statistics
rows = [json.loads(l) for l in sys.stdin if l.strip()]
tps = statistics.median(r["timings"]["predicted_per_second"] for r in rows)
drafted = sum(r["timings"].get("draft_n", 0) for r in rows) // len(rows)
kept = sum(r["timings"].get("draft_n_accepted", 0) for r in rows) // len(rows)
n = rows[0]["tokens_predicted"]
print(f"{tps:.2f} {drafted} {kept} {n}")'
}

echo "# llama.cpp llama-server speculative decoding: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads, draft-max $draft_max"
echo "| workload | plain tok/s | speculative tok/s | speed-up | drafts kept |"
echo "|---|---|---|---|---|"
row() {  # NAME PROMPT MODEL DRAFT
  local plain spec
  plain=$(run "$2" "$3") && spec=$(run "$2" "$3" "$4") || exit 1
  read -r a _ _ _ <<<"$plain"
  read -r b drafted kept _ <<<"$spec"
  python3 -c "print(f'| $1 | $a | $b | {$b / $a:.2f}x | $kept of $drafted |')"
}
row "ngram-simple: repeats its input (greedy; the 1B copy built to cycle)" "$cycling" $dir/1b-q4_0-cycling.gguf ngram
row "ngram-simple: repeats nothing (greedy; the 1B model)" "$distinct" $dir/1b-q4_0.gguf ngram
row "draft model: agrees by construction (greedy; later blocks silent)" "$distinct" $dir/1b-q4_0-silent2.gguf \
  $dir/1b-q4_0-first2.gguf
row "draft model: disagrees (greedy; the 1B model)" "$distinct" $dir/1b-q4_0.gguf $dir/1b-q4_0-first2.gguf
