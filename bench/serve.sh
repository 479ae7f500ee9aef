#!/bin/sh
# serve.sh — the server's line of `make bench` (bench/run.sh calls it):
# generated tokens/s of examples/serve at 1, 4 and 16 concurrent streaming
# clients (tests/serve/load.py: 128 tokens a request, a chat prompt of about
# 50; the server's count of tokens generated over S seconds after S of
# warm-up: the first prompts all at once are not the steady state) on a random llama in
# TinyLlama-1.1B's shape in Q4_0 (generate --make-random: about 80 s to
# draw on 2 cores), against single-client generation (examples/generate,
# the same file, the same threads) in the same run: the ratio is what
# batching the slots' steps buys.
# Usage: bench/serve.sh BUILD_DIR [--threads N] [--seconds S] [--model FILE]
#   --model: that GGUF instead of drawing one
set -eu
build=$1
shift
threads=$(nproc)
seconds=20
model=
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) threads=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        *) echo "bench/serve.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
for b in serve generate; do
    [ -x "$build/examples/$b" ] || { echo "# serve: skipped (no $build/examples/$b; scripts/deps.sh serve)"; exit 0; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-serve-bench.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
if [ -z "$model" ]; then
    model=$tmp/tinyllama-q4_0.gguf
    echo "# serve: drawing a random TinyLlama-shaped Q4_0 model (about a minute)..." >&2
    "$build/examples/generate" --make-random "$model" --dtype q4_0 >/dev/null
fi

single=$("$build/examples/generate" --model "$model" --prompt "Once upon a time" --tokens 64 --ignore-eos --quiet \
         --threads "$threads" | sed -n 's/^generation: .*: \([0-9.]*\) tokens\/s.*/\1/p')
printf '%-34s kiln %9.1f %-9s      -  (%s)\n' "generate Q4_0 ${threads}t (1 stream)" "$single" tok/s \
    "examples/generate: the reference of the lines below"

"$build/examples/serve" --model "$model" --port 0 --slots 16 --ctx 512 --threads "$threads" 2>"$tmp/log" &
pid=$!
port=
for _ in $(seq 600); do
    port=$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\)/$|\1|p' "$tmp/log")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "bench/serve.sh: the server did not start:" >&2; cat "$tmp/log" >&2; exit 1; }
for n in 1 4 16; do
    rate=$(/usr/bin/python3 "$(dirname "$0")/../tests/serve/load.py" "http://127.0.0.1:$port" --clients "$n" \
           --warmup "$seconds" --seconds "$seconds" --max-tokens 128 | sed -n 's/.* \([0-9.]*\) tokens\/s$/\1/p')
    printf '%-34s kiln %9.1f %-9s %6.2fx %s\n' "serve Q4_0 ${threads}t, $n clients" "$rate" tok/s \
        "$(echo "$rate $single" | awk '{ print $1 / $2 }')" "1 stream"
done
