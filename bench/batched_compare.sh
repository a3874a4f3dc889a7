#!/usr/bin/env bash
# Batched decoding, hearth against llama.cpp on the same GGUF files, on this machine, in one run.
#
#   bench/batched_compare.sh [--reps 3] [--streams "1 4 16 64"] [--threads 2] [--types "q4_0"]
#                            [--preset 1b] [--prompt 128] [--gen 64] [--out FILE]
#
# llama.cpp: its own llama-batched-bench, from the pinned source ../shared/tools/peer's
# server_setup.sh builds under $PEER_DIR/llama-build (built here if that build has not made
# it yet): -npp PROMPT -ntg GEN -npl STREAMS, each sequence its own prompt, prefilled in
# one batch, then GEN steps of one token per sequence. hearth: model_bench --streams on the
# resident weights hearth-loader publishes: the same counts through the engine's driver
# (continuous batching, all the streams in one batch, 512-token steps; decode counts the
# steps after every stream has its first token in which every stream decodes, as all of
# llama.cpp's do). The models are the peer harness's
# (make_model.py, seed 1234), made under $PEER_DIR/models if missing. Rounds interleave the
# two engines, so host noise hits both alike; the table has medians, tokens per second of
# all the streams together and ms per decode step, and goes to --out (default
# build/batched_compare.md) with the raw JSON lines beside it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PEER_TOOLS=$(cd "$ROOT/../shared/tools/peer" 2>/dev/null && pwd || true)
PEER=${PEER_DIR:-/tmp/peer}
BIN=${HEARTH_BIN:-$ROOT/build/bin}
REPS=3 STREAMS="1 4 16 64" THREADS=2 TYPES="q4_0" PRESET=1b PROMPT=128 GEN=64 OUT=$ROOT/build/batched_compare.md
while [ $# -gt 0 ]; do
    case $1 in
        --reps) REPS=$2; shift 2 ;;
        --streams) STREAMS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --types) TYPES=$2; shift 2 ;;
        --preset) PRESET=$2; shift 2 ;;
        --prompt) PROMPT=$2; shift 2 ;;
        --gen) GEN=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) sed -n '2,18p' "$0"; exit 2 ;;
    esac
done
[ -n "$PEER_TOOLS" ] || { echo "batched_compare: ../shared/tools/peer not found next to the repository" >&2; exit 1; }
for b in hearth-loader model_bench; do
    [ -x "$BIN/$b" ] || { echo "batched_compare: $BIN/$b missing; build first (./setup.sh)" >&2; exit 1; }
done
LB=$PEER/llama-build
if [ ! -x "$LB/bin/llama-batched-bench" ]; then
    [ -f "$LB/build.ninja" ] ||
        { echo "batched_compare: no llama.cpp build under $LB; run: bash $PEER_TOOLS/server_setup.sh" >&2; exit 1; }
    echo "== building llama-batched-bench in $LB"
    ninja -C "$LB" llama-batched-bench >/dev/null
fi
MAXS=0
for n in $STREAMS; do [ "$n" -gt "$MAXS" ] && MAXS=$n; done
CTX=$(( MAXS * (PROMPT + GEN) ))
NPL=$(echo $STREAMS | tr ' ' ',')

M=$PEER/models RAW=${OUT%.md}.jsonl LOG=${OUT%.md}.llama.log SHM=${HEARTH_SHM_DIR:-/dev/shm}
mkdir -p "$M" "$(dirname "$OUT")"
: > "$RAW"
source "$HERE/peer_models.sh"
for t in $TYPES; do peer_publish "$M" "$PRESET" "$PRESET" llama "$t" "batched-$PRESET-${t//_/}-$$"; done

echo "== $REPS rounds; $THREADS threads; streams $STREAMS; prompt $PROMPT, $GEN steps; models: $TYPES"
for rep in $(seq "$REPS"); do
    for t in $TYPES; do
        "$LB/bin/llama-batched-bench" -m "$M/$PRESET-$t.gguf" -c "$CTX" -b 2048 -ub 512 -npp "$PROMPT" -ntg "$GEN" \
            -npl "$NPL" -t "$THREADS" -tb "$THREADS" --output-format jsonl 2>"$LOG" >"$LOG.out" ||
            { echo "batched_compare: llama-batched-bench failed; its log: $LOG" >&2; exit 1; }
        grep '^{' "$LOG.out" | sed "s/^{/{\"harness\":\"llama.cpp\",\"model\":\"$PRESET-$t\",/" | tee -a "$RAW"
        for n in $STREAMS; do
            "$BIN/model_bench" --attach "batched-$PRESET-${t//_/}-$$" --threads "$THREADS" --streams "$n" \
                --prompt "$PROMPT" --gen "$GEN" --ctx $((PROMPT + GEN + 1)) --kv-dtype f16 |
                sed "s/\"model\":\"[^\"]*\"/\"model\":\"$PRESET-$t\"/" | tee -a "$RAW"
        done
    done
done

/usr/bin/python3 - "$RAW" "$REPS" "$THREADS" "$PROMPT" "$GEN" <<'PY' | tee "$OUT"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = statistics.median
cpus = sorted({r.get("cpu", "?") for r in rows if r["harness"] == "hearth"})
print(f"batched_compare: medians of {sys.argv[2]} interleaved rounds; {sys.argv[3]} threads; each stream "
      f"a prompt of {sys.argv[4]} tokens, then {sys.argv[5]} decode steps; KV caches in f16")
print(f"cpu: {'; '.join(cpus)}\n")
print("| model | streams | llama.cpp prefill tok/s | hearth prefill tok/s | ratio | llama.cpp decode tok/s "
      "| hearth decode tok/s | ratio | llama.cpp ms/step | hearth ms/step |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for model in dict.fromkeys(r["model"] for r in rows):
    for n in sorted({r["streams"] for r in rows if r["harness"] == "hearth" and r["model"] == model}):
        lc = [r for r in rows if r["harness"] == "llama.cpp" and r["model"] == model and r["pl"] == n]
        hh = [r for r in rows if r["harness"] == "hearth" and r["model"] == model and r["streams"] == n]
        if not lc or not hh:
            continue
        lp, hp = med(r["speed_pp"] for r in lc), med(r["prefill_tok_s"] for r in hh)
        ld, hd = med(r["speed_tg"] for r in lc), med(r["decode_tok_s"] for r in hh)
        lms = med(1e3 * r["t_tg"] / r["tg"] for r in lc)
        hms = med(r["decode_ms_per_step"] for r in hh)
        print(f"| {model} | {n} | {lp:.1f} | {hp:.1f} | {hp / lp:.2f}x | {ld:.1f} | {hd:.1f} | {hd / ld:.2f}x "
              f"| {lms:.1f} | {hms:.1f} |")
PY
echo "(table written to $OUT, raw lines to $RAW)"
