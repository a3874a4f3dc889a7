#!/usr/bin/env bash
# hearth and llama.cpp side by side on the same GGUF files, on this machine, in one run.
#
#   bench/peer_compare.sh [--reps 3] [--threads "1 2"] [--types "f16 q8_0 q4_0"] [--preset 1b]
#                         [--arch llama] [--isa avx2] [--prompt 128] [--gen 64] [--out FILE]
#
# llama.cpp is ../shared/tools/peer's pinned build measured through its C API with a
# persistent thread pool (run `bash ../shared/tools/peer/setup.sh` once first); the models
# are that harness's (make_model.py, seed 1234), made under $PEER_DIR/models if missing;
# with --arch (qwen3moe, qwen2moe, mixtral, qwen3, gemma2, gptneox, gptj, ...) they are hearth synth's of that
# family (e.g. --arch qwen3moe --preset 1b-moe --types "q8_0 q4_0": a mixture of experts
# of ~1B active parameters; its bandwidth column counts only the experts a decode step's
# token was routed to).
# hearth runs them the way it serves: hearth-loader publishes the resident segment (Q8_0
# and Q4_0 repacked to the kernels' row-interleaved layouts) and model_bench attaches
# to it. Both use the same prompt (128 ids), the same 64 greedy decode steps and one
# warm-up run; --prompt 2000 --gen 32 measures decode deep in the context instead, where
# attention reads the whole KV cache each step, 66 MB for the 1B model (a copy of the
# harness with a context that large is built under $PEER_DIR; the bandwidth column then
# counts the KV cache's bytes too).
# Rounds interleave every variant (membw, then each model and thread count, llama.cpp
# and hearth back to back) so host noise hits both alike. membw runs twice a round: as
# built, on 4 KiB pages (malloc does not ask for huge ones), and with glibc's
# malloc.hugetlb tunable (glibc 2.35+), on 2 MiB pages as hearth's weights are where the kernel allows
# (docs/operations.md); decode's share counts against the faster of the two. The median
# table (ratios hearth / llama.cpp, decode's share of the measured read bandwidth) is printed
# and written to --out (default build/peer_compare.md); raw JSON lines go beside it.
# --isa avx2 compares the AVX2 paths on an AVX-512 host: hearth runs with
# HEARTH_CPU_ISA=avx2 and llama.cpp with only its "haswell" CPU variant (AVX2, FMA, F16C;
# a copy of the harness that loads that one variant is built under $PEER_DIR).
# Both keep their KV caches in f16, llama.cpp's default.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PEER_TOOLS=$(cd "$ROOT/../shared/tools/peer" 2>/dev/null && pwd || true)
PEER=${PEER_DIR:-/tmp/peer}
BIN=${HEARTH_BIN:-$ROOT/build/bin}
REPS=3 THREADS="1 2" TYPES="f16 q8_0 q4_0" PRESET=1b OUT=$ROOT/build/peer_compare.md ISA="" PROMPT=128 GEN=64 ARCH=llama
while [ $# -gt 0 ]; do
    case $1 in
        --reps) REPS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --types) TYPES=$2; shift 2 ;;
        --preset) PRESET=$2; shift 2 ;;
        --arch) ARCH=$2; shift 2 ;;
        --isa) ISA=$2; shift 2 ;;
        --prompt) PROMPT=$2; shift 2 ;;
        --gen) GEN=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) sed -n '2,28p' "$0"; exit 2 ;;
    esac
done
[ -n "$PEER_TOOLS" ] || { echo "peer_compare: ../shared/tools/peer not found next to the repository" >&2; exit 1; }
[ -x "$PEER/llamacpp_c_bench" ] && [ -x "$PEER/membw" ] ||
    { echo "peer_compare: llama.cpp harness missing; run: bash $PEER_TOOLS/setup.sh" >&2; exit 1; }
for b in hearth hearth-loader model_bench; do
    [ -x "$BIN/$b" ] || { echo "peer_compare: $BIN/$b missing; build first (./setup.sh)" >&2; exit 1; }
done
# The harness as setup.sh built it, or a copy of its source built with other llama.cpp
# CPU variants (--isa) or a larger context (--prompt, --gen: the source fixes 512).
LLAMA=$PEER/llamacpp_c_bench BINS=$PEER/node/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
SRC=$PEER/llama.cpp-src LOAD_FROM=$BINS
[[ $PROMPT =~ ^[1-9][0-9]*$ && $GEN =~ ^[1-9][0-9]*$ ]] ||
    { echo "peer_compare: --prompt and --gen take positive token counts" >&2; exit 2; }
CTX=$(( (PROMPT + GEN + 2 + 255) / 256 * 256 ))  # the prompt, the steps, the warm-up's 2
[ "$CTX" -ge 512 ] || CTX=512
case $ISA in
    "") ;;
    avx2)
        # ggml picks the best-scoring libggml-cpu-*.so in the folder the harness loads
        # from; a folder holding only the haswell one pins llama.cpp to AVX2.
        [ -f "$BINS/libggml-cpu-haswell.so" ] ||
            { echo "peer_compare: llama.cpp's haswell variant missing under $PEER" >&2; exit 1; }
        mkdir -p "$PEER/bins-haswell"
        ln -sf "$BINS/libggml-cpu-haswell.so" "$PEER/bins-haswell/"
        LOAD_FROM=$PEER/bins-haswell
        export HEARTH_CPU_ISA=avx2
        ;;
    *) echo "peer_compare: --isa takes avx2 (or nothing: each engine's best path)" >&2; exit 2 ;;
esac
if [ -n "$ISA" ] || [ "$CTX" -gt 512 ]; then
    [ -f "$SRC/include/llama.h" ] || { echo "peer_compare: llama.cpp's headers missing under $PEER" >&2; exit 1; }
    LLAMA=$PEER/llamacpp_c_bench_${ISA:-best}_ctx$CTX
    sed -e "s/cp.n_ctx = 512;/cp.n_ctx = $CTX;/" -e "s/cp.n_batch = cp.n_ubatch = 512;/cp.n_batch = $CTX; cp.n_ubatch = 512;/" \
        "$PEER_TOOLS/llamacpp_c_bench.c" > "$LLAMA.c"
    grep -q "cp.n_ctx = $CTX;" "$LLAMA.c" ||
        { echo "peer_compare: could not set the harness's context size in $LLAMA.c" >&2; exit 1; }
    gcc -O2 -DBINS_DIR="\"$LOAD_FROM\"" "$LLAMA.c" -I"$SRC/include" -I"$SRC/ggml/include" \
        "$BINS"/libllama.v*.so "$BINS"/libggml.v*.so "$BINS/libggml-base.so" -Wl,-rpath,"$BINS" -o "$LLAMA"
fi

M=$PEER/models RAW=${OUT%.md}.jsonl SHM=${HEARTH_SHM_DIR:-/dev/shm}
mkdir -p "$M" "$(dirname "$OUT")"
: > "$RAW"
source "$HERE/peer_models.sh"

NAME=$PRESET
[ "$ARCH" = llama ] || NAME=$ARCH-$PRESET
for t in $TYPES; do peer_publish "$M" "$NAME" "$PRESET" "$ARCH" "$t" "peer-$NAME-${t//_/}-$$"; done

echo "== $REPS rounds; prompt $PROMPT, $GEN decode steps; threads: $THREADS; models: $(for t in $TYPES; do printf '%s ' "$NAME-$t"; done)"
for rep in $(seq "$REPS"); do
    "$PEER/membw" 2 2 | tee -a "$RAW"
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$PEER/membw" 2 2 | sed 's/^{/{"pages":"2M",/' | tee -a "$RAW"
    for t in $TYPES; do
        for n in $THREADS; do
            "$LLAMA" "$M/$NAME-$t.gguf" "$n" "$PROMPT" "$GEN" | tee -a "$RAW"
            "$BIN/model_bench" --attach "peer-$NAME-${t//_/}-$$" --threads "$n" --prompt "$PROMPT" --gen "$GEN" \
                --ctx "$CTX" --kv-dtype f16 |
                sed "s/\"model\":\"[^\"]*\"/\"model\":\"$NAME-$t.gguf\"/" | tee -a "$RAW"
        done
    done
done

/usr/bin/python3 - "$RAW" "$REPS" "${ISA:-best}" "$PROMPT" "$GEN" <<'EOF' | tee "$OUT"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = statistics.median
bw = {}
for pages in ("4K", "2M"):
    got = [r for r in rows if "threads1_gb_s" in r and r.get("pages", "4K") == pages]
    if got:
        bw[pages] = (med(r["threads1_gb_s"] for r in got), med(r["threads2_gb_s"] for r in got))
bw1, bw2 = max(b[0] for b in bw.values()), max(b[1] for b in bw.values())
print(f"peer_compare: medians of {sys.argv[2]} interleaved rounds; read bandwidth (membw) " +
      "; ".join(f"on {'4 KiB' if p == '4K' else '2 MiB'} pages {b[0]:.1f} GB/s on 1 thread, {b[1]:.1f} GB/s on 2"
                for p, b in bw.items()))
cpus = sorted({r.get("cpu", "?") for r in rows if r.get("harness") == "hearth"})
prefetch = sorted({r.get("prefetch", "?") for r in rows if r.get("harness") == "hearth"})
print(f"cpu: {'; '.join(cpus)}; hearth weight prefetch: {', '.join(map(str, prefetch))} bytes")
print("instruction sets: " + ("AVX2 in both (hearth HEARTH_CPU_ISA=avx2, llama.cpp's haswell variant)"
      if sys.argv[3] == "avx2" else "each engine's best for this CPU"))
print(f"prompt {sys.argv[4]} tokens, then {sys.argv[5]} decode steps; KV caches in f16\n")
print("| model | threads | llama.cpp prefill | hearth prefill | ratio | llama.cpp decode | hearth decode | ratio "
      "| hearth decode GB/s | of membw |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
bench = [r for r in rows if "harness" in r]
same = True
for model in dict.fromkeys(r["model"] for r in bench):
    for th in sorted({r["threads"] for r in bench if r["model"] == model}):
        get = lambda h: [r for r in bench if r["model"] == model and r["threads"] == th and r["harness"] == h]
        lc, hh = get("c"), get("hearth")
        if not lc or not hh:
            continue
        lp, hp = med(r["prefill_tok_s"] for r in lc), med(r["prefill_tok_s"] for r in hh)
        ld, hd = med(r["decode_tok_s"] for r in lc), med(r["decode_tok_s"] for r in hh)
        # What a decode step reads: the weights, and the KV cache (at the last step's depth).
        gbs = hd * (hh[0]["weight_bytes_per_token"] + hh[0].get("kv_bytes_last_token", 0)) / 1e9
        roof = bw1 if th == 1 else bw2
        print(f"| {model} | {th} | {lp:.1f} | {hp:.1f} | {hp / lp:.2f}x | {ld:.2f} | {hd:.2f} | {hd / ld:.2f}x "
              f"| {gbs:.1f} | {100 * gbs / roof:.0f}% |")
        same &= len({tuple(r["first_ids"]) for r in hh}) == 1
print(f"\nhearth's first 16 greedy ids identical across its runs: {'yes' if same else 'NO'}")
for model in dict.fromkeys(r["model"] for r in bench):
    ids = lambda h: next((r["first_ids"] for r in bench if r["model"] == model and r["harness"] == h), [])
    agree = sum(a == b for a, b in zip(ids("c"), ids("hearth")))
    print(f"- {model}: first ids equal to llama.cpp's at {agree}/16 positions")
EOF
echo "(table written to $OUT, raw lines to $RAW)"
