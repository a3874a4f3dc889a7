#!/usr/bin/env bash
# The seed's load table on this machine: `hearth bench` (closed-loop users) against
# `hearth serve` and against llama-server on the same GGUF, one server after the other
# in the same run, for three workloads:
#   short   64-token prompts, 32 output tokens (the reference shape)
#   long    64-token prompts, 128 output tokens (decode-bound)
#   shared  512-token prompts of which 90% are the same for every request, 32 output
#           tokens (a common system prompt: what prefix caches are for)
#
#   bench/load_bench.sh [--model GGUF] [--users 1,4,16,64] [--duration 20] [--threads 2]
#                       [--slots 16] [--workloads "short long shared"] [--skip-peer]
#                       [--out build/load_bench.md]
#
# Without --model it writes the 1B synthetic Llama as Q4_0 (`hearth synth --preset 1b`).
# hearth gets a long --queue-timeout so that users beyond its slots wait for one, as they
# do at llama-server, instead of being refused with 429 after 30 s. Both servers get --threads cores and --slots sequences (llama-server: -np with the
# same context per slot, continuous batching on); EOS is ignored so every request
# produces its output tokens. llama-server comes from ../shared/tools/peer
# (setup.sh, then server_setup.sh: about 10 minutes); without it, or with --skip-peer,
# only hearth is measured. Prints the CPU and Markdown tables; JSON runs and PNG plots go
# beside --out.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/bin
H=$BIN/hearth
PEER=${PEER_DIR:-/tmp/peer}
LLAMA_SERVER=$PEER/llama-build/bin/llama-server
MODEL="" USERS=1,4,16,64 DURATION=20 THREADS=2 SLOTS=16 WORKLOADS="short long shared" SKIP_PEER=0
OUT=$ROOT/build/load_bench.md PORT=18281
while (($#)); do
    case $1 in
        --model) MODEL=$2; shift 2 ;;
        --users) USERS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --slots) SLOTS=$2; shift 2 ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --skip-peer) SKIP_PEER=1; shift ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "usage: $0 [--model GGUF] [--users LIST] [--duration S] [--threads N] [--slots N] [--workloads LIST] [--skip-peer] [--out FILE]" >&2
           exit 2 ;;
    esac
done
[ -x "$H" ] || { echo "load_bench: build first: $H is missing" >&2; exit 1; }
if ((!SKIP_PEER)) && [ ! -x "$LLAMA_SERVER" ]; then
    echo "load_bench: no llama-server at $LLAMA_SERVER (bash ../shared/tools/peer/setup.sh, then server_setup.sh); measuring hearth alone" >&2
    SKIP_PEER=1
fi
for w in $WORKLOADS; do
    case $w in
        short | long | shared) ;;
        *) echo "load_bench: unknown workload \"$w\" (short, long, shared)" >&2; exit 2 ;;
    esac
done
# Another server on the port would be measured in place of the one started here.
if curl -s -o /dev/null "http://127.0.0.1:$PORT/"; then
    echo "load_bench: something already listens on port $PORT; stop it first" >&2
    exit 1
fi
OUT_DIR=$(dirname "$OUT")
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d)
SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT
EXTRA='{}'
if [ -z "$MODEL" ]; then
    MODEL=$WORK/1b-q4_0.gguf
    "$H" synth --preset 1b --type q4_0 --gguf "$MODEL" >"$WORK/synth.log" 2>&1 || { cat "$WORK/synth.log" >&2; exit 1; }
    # The synthetic model's random weights pick byte tokens too, and bytes 0x80-0xFF alone
    # are not UTF-8: llama-server then fails the stream ("does not match the expected
    # Content-only format"). Both servers get the same logit_bias banning those 128 tokens
    # (ids 131-258 of the synthetic vocabulary: <unk> <s> </s>, then the 256 bytes).
    EXTRA=$(awk 'BEGIN { printf "{\"logit_bias\": {"; for (i = 131; i <= 258; i++) printf "%s\"%d\": -100", (i > 131 ? ", " : ""), i; printf "}}" }')
fi

workload_flags() {  # NAME
    case $1 in
        short) echo "--input-tokens 64 --output-tokens 32" ;;
        long) echo "--input-tokens 64 --output-tokens 128" ;;
        shared) echo "--input-tokens 512 --shared-prefix 0.9 --output-tokens 32" ;;
    esac
}
# Context per sequence: the longest prompt and output, with room to spare.
CTX=1024

wait_ready() {  # LOG URL
    for _ in $(seq 900); do
        # The process is checked first: an answer from a server that has already exited
        # would be some other process's.
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$1" >&2; exit 1; }
        curl -sf -o /dev/null "$2/v1/models" && return 0
        sleep 0.2
    done
    echo "load_bench: the server at $2 did not come up" >&2
    cat "$1" >&2
    exit 1
}

start_hearth() {
    "$H" serve "$MODEL" --port "$PORT" --instance load-bench --ctx "$CTX" --slots "$SLOTS" --threads "$THREADS" \
        --queue-timeout 600000 --remove-on-exit >"$WORK/hearth.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "$WORK/hearth.log" "http://127.0.0.1:$PORT"
}

start_llama() {
    # -c is the context of all slots together; -cb continuous batching (on by default).
    "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" -np "$SLOTS" -c $((CTX * SLOTS)) -cb \
        --host 127.0.0.1 --port "$PORT" >"$WORK/llama.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "$WORK/llama.log" "http://127.0.0.1:$PORT"
}

run_bench() {  # SERVER WORKLOAD
    local name=$1 workload=$2
    # shellcheck disable=SC2046  # the workload's flags are separate words
    "$H" bench --url "http://127.0.0.1:$PORT/v1" --users "$USERS" --duration "$DURATION" $(workload_flags "$workload") \
        --ignore-eos --extra-body "$EXTRA" --tokenizer "$MODEL" --name "$name" --json "$OUT_DIR/load-$workload-$name.json" \
        >"$WORK/$workload-$name.md"
}

servers="hearth"
((SKIP_PEER)) || servers="hearth llama-server"
for server in $servers; do
    if [ "$server" = hearth ]; then start_hearth; else start_llama; fi
    for w in $WORKLOADS; do
        echo "load_bench: $server, $w ($USERS users, $DURATION s per level)" >&2
        run_bench "$server" "$w"
    done
    stop_server
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
    echo "# load_bench on $cpu, $(nproc) cores, $(date +%F)"
    echo
    echo "$(basename "$MODEL"), closed-loop users, $DURATION s per level (every request started in it is awaited),"
    echo "$THREADS threads and $SLOTS sequences per server, EOS ignored; hearth bench's own figures."
    for w in $WORKLOADS; do
        echo
        echo "## $w: $(workload_flags "$w")"
        echo
        files=()
        for server in $servers; do files+=("$OUT_DIR/load-$w-$server.json"); done
        "$H" bench --compare "${files[@]}" --plot "$OUT_DIR/load-$w.png"
    done
} | tee "$OUT"
