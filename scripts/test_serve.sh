#!/bin/sh
# test_serve.sh — examples/serve for real, a make test stage (under a minute):
#   fuzz     its JSON request parser on mutated bodies for 3 s, under ASan
#            and UBSan (build/tests/serve_fuzz)
#   curl     the server on tests/fixtures/gguf-ref's tiny llama (a random
#            vocabulary: gibberish, so framing and counts are checked, not
#            text): an answer whole and streamed as curl gets them
#   client   tests/serve/client.py, an OpenAI client in Python's standard
#            library: both endpoints, whole and streamed, SSE framing, usage
#            counts, stop, seed, every error, a client gone mid-stream, and
#            503 + Retry-After, the API key and a slow client dropped on a
#            second server (--slots 1 --queue 0 --timeout 1); logprobs'
#            shape, order and streaming
#   logprobs tests/serve/logprobs_ref.py: logprobs against the log-softmax of
#            the logits generate --dump-logits writes for the same ids
#   page     tests/serve/page_test.py: the chat page in headless Chromium,
#            typed into, streamed, screenshot in BUILD_DIR/serve-page.png
#            (skipped, saying why, only where Chromium cannot run)
#   load     tests/serve/load.py: 16 concurrent streaming clients from a second
#            process for 12 s after a 3 s warm-up: no failed request, the
#            server alive, its RSS flat (within 6 MiB), the tokens/s printed
# KILN_SERVE_QUICK=1 runs curl, client and logprobs only (the sanitize stage:
# the server under ASan and UBSan; the page and the load add nothing there).
# Usage: scripts/test_serve.sh BUILD_DIR [test name filters...]; runs when no
# filter is given or one is part of "serve". Last line "N passed, N failed[, N skipped]".
set -u
build=$1
shift
if [ $# -gt 0 ]; then
    match=0
    for f in "$@"; do
        case serve in *"$f"*) match=1 ;; esac
    done
    [ "$match" -eq 1 ] || { echo "0 passed, 0 failed"; exit 0; }
fi
bin=$build/examples/serve
model=tests/fixtures/gguf-ref/llama-s1-Q4_0.gguf
py=/usr/bin/python3 # Debian's, with python3-websocket
passed=0 failed=0 skipped=0
if [ ! -x "$bin" ] || [ ! -x "$build/tests/serve_fuzz" ]; then
    echo "FAIL serve: no $bin or $build/tests/serve_fuzz (make builds them where libmicrohttpd-dev, libjansson-dev" \
         "and xxd are installed: scripts/deps.sh serve)"
    echo "0 passed, 1 failed"
    exit 1
fi
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# stage NAME CMD... : run a program that prints ok/FAIL/skip lines and a
# last "N passed, N failed[, N skipped]" line; add its counts
stage() {
    name=$1
    shift
    "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    grep -v '^[0-9]* passed' "$tmp/$name.out"
    last=$(tail -n 1 "$tmp/$name.out")
    p=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
    f=$(printf '%s\n' "$last" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    s=$(printf '%s\n' "$last" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
    if [ -z "$p" ] || [ -z "$f" ]; then
        echo "FAIL serve_$name: it did not finish (exit status $rc)"
        failed=$((failed + 1))
        return
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + ${s:-0}))
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || failed=$((failed + 1))
}

# check NAME COND_STATUS WHY : count one result
check() {
    if [ "$2" -eq 0 ]; then
        echo "ok serve_$1"
        passed=$((passed + 1))
    else
        echo "FAIL serve_$1: $3"
        failed=$((failed + 1))
    fi
}

# start LOG ARGS... : the server on the tiny model, any free port; sets
# $url and $pid once it listens (within 20 s)
start() {
    slog=$1
    shift
    : >"$slog"
    "$bin" --model "$model" --port 0 --threads 2 "$@" 2>"$slog" &
    pid=$!
    pids="$pids $pid"
    url=
    for _ in $(seq 200); do
        port=$(sed -n 's|.* on http://127.0.0.1:\([0-9]*\)/$|\1|p' "$slog")
        [ -n "$port" ] && { url=http://127.0.0.1:$port; return 0; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "FAIL serve_start: the server did not start:"
    sed 's/^/    /' "$slog"
    failed=$((failed + 1))
    return 1
}

# a fixed seed keeps make test repeatable (KILN_FUZZ_SEED=0 draws one from the clock, for hunting)
quick=${KILN_SERVE_QUICK:-0}
[ "$quick" = 1 ] || stage fuzz "$build/tests/serve_fuzz" 3 "${KILN_FUZZ_SEED:-20261128}"

if start "$tmp/server.log" --slots 4 --queue 16 --timeout 10 --max-body 65536 &&
   start "$tmp/busy.log" --slots 1 --queue 0 --timeout 1 --api-key test-key; then
    main_url=$(sed -n 's|.* on \(http://127.0.0.1:[0-9]*\)/$|\1|p' "$tmp/server.log")
    main_pid=${pids# }
    main_pid=${main_pid%% *}
    busy_url=$url

    body='{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"seed":1}'
    out=$(curl -sS -H 'Content-Type: application/json' -d "$body" "$main_url/v1/chat/completions")
    printf '%s' "$out" | grep -q '"object":"chat.completion".*"usage":{"prompt_tokens":[1-9][0-9]*,"completion_tokens":[1-6],'
    check curl_chat $? "$out"
    out=$(curl -sS -N -H 'Content-Type: application/json' -d "${body%\}},\"stream\":true}" \
          "$main_url/v1/chat/completions")
    # each event one data line and a blank line; the last data: [DONE]
    printf '%s\n' "$out" | awk 'NR % 2 == 1 && !/^data: / { bad = 1 } NR % 2 == 0 && $0 != "" { bad = 1 }
                                END { exit bad }' && [ "$(printf '%s\n' "$out" | tail -n 1)" = "data: [DONE]" ]
    check curl_stream $? "$out"

    stage client "$py" tests/serve/client.py "$main_url" "$tmp/server.log" "$busy_url" test-key
    stage logprobs "$py" tests/serve/logprobs_ref.py "$main_url" "$build/examples/generate" "$model" "$tmp"
    if [ "$quick" != 1 ]; then
        stage page "$py" tests/serve/page_test.py "$main_url" "$build/serve-page.png"
        stage load "$py" tests/serve/load.py "$main_url" --clients 16 --seconds 12 --warmup 3 --pid "$main_pid"
    fi
    kill -0 "$main_pid" 2>/dev/null
    check alive_after_all $? "the server died; its log:$(tail -n 5 "$tmp/server.log")"
    kill -TERM "$main_pid"
    wait "$main_pid"
    check stops_on_sigterm $? "exit status $? after SIGTERM; log: $(tail -n 3 "$tmp/server.log")"
fi

if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
