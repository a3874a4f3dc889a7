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
# 2. The 1B synthetic Llama (`hearth synth --preset 1b`, 2.2 GB in F16), per format (F16,
#    the loader's INT8 and int4, ggml's Q8_0 and Q4_0, hearth quantize's RTN and GPTQ
#    4-bit g128 calibrated on this repository's README): file and resident size,
#    publish and attach time, prefill and decode speed on the resident segment
#    (model_bench, 2 threads), and quantize time and peak resident memory.
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
    SHM=$WORK/shm
    mkdir -p "$SHM"
    "$H" synth --preset 1b --type f16 --gguf "$WORK/1b-f16.gguf" 2>/dev/null
    f32_mib=$(($(stat -c %s "$WORK/1b-f16.gguf") * 2 / 1048576))
    {
        echo
        echo "## 1B synthetic Llama: the formats side by side (its F32 size is $f32_mib MiB)"
        echo
        echo "Publish: hearth-loader reading the file and writing the segment (page cache warm); attach:"
        echo "\`hearth generate --attach\` from process start to ready; speeds: model_bench on the resident"
        echo "segment, 2 threads, 128-token prompt, 64 generated. Quantize: \`hearth quantize\` from the F16 file"
        echo "(GPTQ calibrated on $SAMPLES windows of $SEQ_LEN tokens of this repository's README)."
        echo
        echo "| format | file MiB | resident MiB | publish s | attach ms | prefill tok/s | decode tok/s | quantize s | quantize peak RSS MiB |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    } >>"$OUT"
    format_row() {  # label file quantize_s peak [loader flags...]
        local label=$1 file=$2 qs=$3 peak=$4 ready attach speed
        shift 4
        ready=$("$BIN/hearth-loader" --model "$file" --instance qb --shm-dir "$SHM" --exit-after-publish "$@" 2>/dev/null)
        attach=$("$H" generate --attach qb --shm-dir "$SHM" --prompt "Once" --max-tokens 1 --json 2>/dev/null)
        speed=$("$BIN/model_bench" --attach qb --shm-dir "$SHM" --threads 2 2>/dev/null | tail -1)
        printf '| %s | %d | %d | %.2f | %.0f | %.1f | %.1f | %s | %s |\n' "$label" "$(($(stat -c %s "$file") / 1048576))" \
            "$(($(jq .bytes <<<"$ready") / 1048576))" "$(jq .seconds <<<"$ready")" \
            "$(jq '.ready_seconds * 1000' <<<"$attach")" "$(jq .prefill_tok_s <<<"$speed")" \
            "$(jq .decode_tok_s <<<"$speed")" "$qs" "$peak" >>"$OUT"
        rm -f "$SHM"/hearth.qb.*
    }
    quantize_1b() {  # out args...: the seconds and peak RSS of one hearth quantize run
        local out=$1 start
        shift
        start=$(date +%s)
        "$H" quantize "$WORK/1b-f16.gguf" --out "$out" "$@" 2>"$WORK/q.log" || { cat "$WORK/q.log" >&2; exit 1; }
        echo "$(($(date +%s) - start)) $(sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' "$WORK/q.log")"
    }
    format_row "F16" "$WORK/1b-f16.gguf" - -
    format_row "INT8 RTN (loader --quant int8, g32)" "$WORK/1b-f16.gguf" - - --quant int8
    format_row "int4 RTN (loader --quant int4, g32)" "$WORK/1b-f16.gguf" - - --quant int4
    for t in q8_0 q4_0; do
        "$H" synth --preset 1b --type "$t" --gguf "$WORK/1b-$t.gguf" 2>/dev/null
        format_row "$(tr '[:lower:]' '[:upper:]' <<<"$t") (synth, ggml's rule)" "$WORK/1b-$t.gguf" - -
        rm -f "$WORK/1b-$t.gguf"
    done
    read -r qs peak < <(quantize_1b "$WORK/1b-rtn.gguf" --method rtn --bits 4 --group-size 128)
    format_row "int4 RTN g128 (hearth quantize)" "$WORK/1b-rtn.gguf" "$qs" "$peak"
    rm -f "$WORK/1b-rtn.gguf"
    read -r qs peak < <(quantize_1b "$WORK/1b-gptq.gguf" --bits 4 --group-size 128 --calibration "$ROOT/README.md" \
        --samples "$SAMPLES" --seq-len "$SEQ_LEN")
    format_row "GPTQ 4-bit g128 (hearth quantize)" "$WORK/1b-gptq.gguf" "$qs" "$peak"
    rm -f "$WORK/1b-gptq.gguf"
fi
cat "$OUT"
