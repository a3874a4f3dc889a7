# Sourced by peer_compare.sh and batched_compare.sh (which set PEER_TOOLS, BIN and SHM):
# the peer harness's models, each published resident for hearth, the segments removed
# when the script exits.
peer_instances=()
peer_cleanup() { for i in "${peer_instances[@]}"; do rm -f "$SHM/hearth.$i.weights"; done; }
trap peer_cleanup EXIT

# peer_publish DIR NAME PRESET ARCH TYPE INSTANCE: makes DIR/NAME-TYPE.gguf if it is
# missing (make_model.py's seeded weights for llama, hearth synth's for another --arch),
# then publishes it as INSTANCE.
peer_publish() {
    local f=$1/$2-$5.gguf
    if [ ! -s "$f" ]; then
        echo "== making $f"
        if [ "$4" = llama ]; then
            /usr/bin/python3 "$PEER_TOOLS/make_model.py" --preset "$3" --type "$5" --gguf "$f.part" >/dev/null
        else
            "$BIN/hearth" synth --arch "$4" --preset "$3" --type "$5" --gguf "$f.part"
        fi
        mv "$f.part" "$f"
    fi
    "$BIN/hearth-loader" --model "$f" --instance "$6" --exit-after-publish >/dev/null
    peer_instances+=("$6")
}
