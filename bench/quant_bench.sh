#!/usr/bin/env bash
# What quantization costs and what it buys, on this machine, in one run.
#
#   bench/quant_bench.sh [--skip-1b] [--samples 16] [--seq-len 256] [--out FILE]
#
# 1. Quality on stories260K (../shared/models): calibration and evaluation texts are
#    sampled from the F32 model itself (`hearth generate --temperature 1`, seeds 1-12 and
#    101-110; no corpus ships with the repository). Each format is written by `hearth
#    quantize` and scored by `hearth eval --reference` the F32 file: file size, KL
#    divergence from F32 and top-1 agreement with their 95% intervals, perplexity.
#    ffn_down (172 inputs) stays F32 in every quantized row (--skip-indivisible).
# 2. The 1B synthetic Llama (`hearth synth --preset 1b --type f16`, 2.2 GB): GPTQ 4-bit
#    g128 and RTN 4-bit g128, calibrated on this repository's README: time, peak
#    resident memory against the F32 model's size, and decode / prefill speed of the
#    result (model_bench, 2 threads) beside the synthetic Q4_0 file's (same blocks).
# The table is printed and written to --out (default build/quant_bench.md).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BIN=${HEARTH_BIN:-$ROOT/build/bin}
SHARED=${HEARTH_SHARED:-$ROOT/../shared}
SKIP_1B=0 SAMPLES=16 SEQ_LEN=256 OUT=$ROOT/build/quant_bench.md
while [ $# -gt 0 ]; do
    case $1 in
        --skip-1b) SKIP_1B=1; shift ;;
        --samples) SAMPLES=$2; shift 2 ;;
        --seq-len) SEQ_LEN=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) sed -n '2,17p' "$0"; exit 2 ;;
    esac
done
for b in hearth model_bench; do
    [ -x "$BIN/$b" ] || { echo "quant_bench: $BIN/$b missing; build first (./setup.sh)" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "quant_bench: needs jq" >&2; exit 1; }
STORIES=$SHARED/models/stories260K/stories260K.gguf
[ -f "$STORIES" ] || { echo "quant_bench: $STORIES is absent" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
H=$BIN/hearth
{
    echo "# quant_bench on $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) threads, $(date -u +%F)"
    echo
} >"$OUT"

sample_text() {  # first last: text stories260K writes itself from seeds first..last
    for s in $(seq "$1" "$2"); do
        "$H" generate --model "$STORIES" --prompt "Once upon a time" --temperature 1 --seed "$s" --max-tokens 480 2>/dev/null
        echo
    done
}
sample_text 1 12 >"$WORK/calibration.txt"
sample_text 101 110 >"$WORK/eval.txt"

{
    echo "## stories260K: quality against F32 (scored positions of text the model sampled; 95% intervals)"
    echo
    echo "| format | file | quantize s | KL divergence | top-1 agreement | perplexity |"
    echo "| --- | ---: | ---: | --- | --- | --- |"
} >>"$OUT"
quality_row() {  # label file seconds
    local j
    j=$("$H" eval "$2" --text "$WORK/eval.txt" --reference "$STORIES" --ctx 128 --json)
    printf '| %s | %s KiB | %s | %.4f (%.4f-%.4f) | %.1f%% (%.1f-%.1f) | %.3f (%.3f-%.3f) |\n' "$1" \
        "$(($(stat -c %s "$2") / 1024))" "$3" \
        "$(jq .kl_divergence.mean <<<"$j")" "$(jq .kl_divergence.low <<<"$j")" "$(jq .kl_divergence.high <<<"$j")" \
        "$(jq '.top1_agreement.mean * 100' <<<"$j")" "$(jq '.top1_agreement.low * 100' <<<"$j")" \
        "$(jq '.top1_agreement.high * 100' <<<"$j")" \
        "$(jq .perplexity.mean <<<"$j")" "$(jq .perplexity.low <<<"$j")" "$(jq .perplexity.high <<<"$j")" >>"$OUT"
}
quality_row "F32 (reference)" "$STORIES" "-"
while IFS='|' read -r label args; do
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    "$H" quantize "$STORIES" --out "$WORK/q.gguf" --skip-indivisible $args 2>"$WORK/q.log" ||
        { cat "$WORK/q.log" >&2; exit 1; }
    quality_row "$label" "$WORK/q.gguf" "$(awk -v ns=$(($(date +%s%N) - start)) 'BEGIN { printf "%.2f", ns / 1e9 }')"
done <<EOF
RTN 8-bit g32|--method rtn --bits 8 --group-size 32
GPTQ 8-bit g32|--bits 8 --group-size 32 --calibration $WORK/calibration.txt --samples 16 --seq-len 128
RTN 4-bit g64|--method rtn --bits 4 --group-size 64
GPTQ 4-bit g64|--bits 4 --group-size 64 --calibration $WORK/calibration.txt --samples 16 --seq-len 128
RTN 4-bit g32|--method rtn --bits 4 --group-size 32
GPTQ 4-bit g32|--bits 4 --group-size 32 --calibration $WORK/calibration.txt --samples 16 --seq-len 128
GPTQ 4-bit g32 act-order (static groups)|--bits 4 --group-size 32 --act-order --static-groups --calibration $WORK/calibration.txt --samples 16 --seq-len 128
GPTQ 4-bit g32 act-order (column orders)|--bits 4 --group-size 32 --act-order --calibration $WORK/calibration.txt --samples 16 --seq-len 128
EOF

if [ "$SKIP_1B" = 0 ]; then
    "$H" synth --preset 1b --type f16 --gguf "$WORK/1b-f16.gguf" 2>/dev/null
    "$H" synth --preset 1b --type q4_0 --gguf "$WORK/1b-q4_0.gguf" 2>/dev/null
    f32_mib=$(($(stat -c %s "$WORK/1b-f16.gguf") * 2 / 1048576))
    {
        echo
        echo "## 1B synthetic Llama (F16 source; its F32 size is $f32_mib MiB): quantizing, and serving the result"
        echo
        echo "| format | file MiB | quantize s | peak RSS MiB | Hessians MiB | prefill tok/s | decode tok/s |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    } >>"$OUT"
    speed_row() {  # label file seconds peak hessians
        local j
        j=$("$BIN/model_bench" --model "$2" --threads 2 2>/dev/null | tail -1)
        printf '| %s | %d | %s | %s | %s | %.1f | %.1f |\n' "$1" "$(($(stat -c %s "$2") / 1048576))" "$3" "$4" "$5" \
            "$(jq .prefill_tok_s <<<"$j")" "$(jq .decode_tok_s <<<"$j")" >>"$OUT"
    }
    speed_row "Q4_0 (synth, ggml's rule)" "$WORK/1b-q4_0.gguf" "-" "-" "-"
    rm -f "$WORK/1b-q4_0.gguf"
    for method in rtn gptq; do
        args="--method rtn"
        [ "$method" = gptq ] && args="--calibration $ROOT/README.md --samples $SAMPLES --seq-len $SEQ_LEN"
        start=$(date +%s)
        # shellcheck disable=SC2086
        "$H" quantize "$WORK/1b-f16.gguf" --out "$WORK/1b-$method.gguf" --bits 4 --group-size 128 $args \
            2>"$WORK/q.log" || { cat "$WORK/q.log" >&2; exit 1; }
        seconds=$(($(date +%s) - start))
        peak=$(sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' "$WORK/q.log")
        hess=$(sed -n 's/.*Hessians \([0-9.]*\) MiB.*/\1/p' "$WORK/q.log")
        speed_row "$(echo "$method" | tr a-z A-Z) 4-bit g128" "$WORK/1b-$method.gguf" "$seconds" "$peak" "$hess"
        rm -f "$WORK/1b-$method.gguf"
    done
fi
cat "$OUT"
