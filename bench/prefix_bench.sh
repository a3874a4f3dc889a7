#!/usr/bin/env bash
# Prefix caching's effect on time to first token: a long shared system prompt followed by
# short questions, against `hearth serve` with the cache on and with --no-prefix-cache,
# side by side.
#
#   bench/prefix_bench.sh [--model GGUF] [--prefix 1500] [--question 20] [--requests 4]
#
# Without --model it writes the 1B synthetic Llama as Q4_0 (`hearth synth --preset 1b`).
# Each request is a completion of token ids (the same `--prefix` ids, then `--question`
# ids of its own) with max_tokens 1, so its latency is its time to first token; request
# 1 finds nothing cached, the following ones find the prefix. Prints the CPU and a
# Markdown table; needs curl.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/bin
H=$BIN/hearth
MODEL="" PREFIX=1500 QUESTION=20 REQUESTS=4 PORT=18181
while (($#)); do
    case $1 in
        --model) MODEL=$2; shift 2 ;;
        --prefix) PREFIX=$2; shift 2 ;;
        --question) QUESTION=$2; shift 2 ;;
        --requests) REQUESTS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        *) echo "usage: $0 [--model GGUF] [--prefix N] [--question N] [--requests N] [--port P]" >&2; exit 2 ;;
    esac
done
[ -x "$H" ] || { echo "build first: $H is missing" >&2; exit 1; }
WORK=$(mktemp -d)
SERVE_PID=""
cleanup() {
    [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
if [ -z "$MODEL" ]; then
    MODEL=$WORK/1b-q4_0.gguf
    "$H" synth --preset 1b --type q4_0 --gguf "$MODEL" >/dev/null 2>&1
fi

# Token ids: a fixed prefix, and a question per request (ids 3.. of a 32000 vocabulary).
ids() {  # COUNT SEED
    awk -v n="$1" -v seed="$2" 'BEGIN { srand(seed); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 3 + int(rand() * 31000) }'
}
prefix_ids="1,$(ids $((PREFIX - 1)) 7)"

# Seconds each request took, one line per request.
run() {  # LABEL [serve flags...]
    local label=$1
    shift
    "$H" serve "$MODEL" --port "$PORT" --instance prefix-bench --ctx $((PREFIX + QUESTION + 64)) --slots 4 \
        --remove-on-exit "$@" >"$WORK/serve-$label.log" 2>&1 &
    SERVE_PID=$!
    for _ in $(seq 600); do
        grep -q "serving http" "$WORK/serve-$label.log" && break
        kill -0 "$SERVE_PID" 2>/dev/null || { cat "$WORK/serve-$label.log" >&2; exit 1; }
        sleep 0.2
    done
    for r in $(seq "$REQUESTS"); do
        printf '{"prompt": [%s,%s], "max_tokens": 1, "temperature": 0}' "$prefix_ids" "$(ids "$QUESTION" $((100 + r)))" \
            >"$WORK/body.json"
        curl -sf -o "$WORK/out-$label-$r.json" -w '%{time_total}\n' -H 'content-type: application/json' \
            --data @"$WORK/body.json" "http://127.0.0.1:$PORT/v1/completions"
    done >"$WORK/times-$label"
    kill "$SERVE_PID"
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=""
}
run on
run off --no-prefix-cache
cached=$(sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p' "$WORK/out-on-2.json")

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "# prefix_bench on $cpu, $(nproc) cores, $(date +%F)"
echo
echo "$(basename "$MODEL"): a $PREFIX-token shared prefix, then $QUESTION tokens of its own per request; time to first"
echo "token (max_tokens 1), seconds. With the cache, requests after the first found $cached prompt tokens cached."
echo
echo "| request | prefix cache on | --no-prefix-cache | speed-up |"
echo "| --- | ---: | ---: | ---: |"
paste "$WORK/times-on" "$WORK/times-off" | awk '{ printf "| %d | %.3f | %.3f | %.1fx |\n", NR, $1, $2, $2 / $1 }'
