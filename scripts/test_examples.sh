#!/bin/sh
# test_examples.sh — keep the training examples from rotting: each one's
# --help, and a tiny run (--limit: a few batches of training and of the
# test set) that must end with exit status 0 and print its result lines.
# Part of scripts/test.sh; a few seconds in all.
#   scripts/test_examples.sh BUILD_DIR [test name filters...]
# Runs when no filter is given or one is part of "examples". With
# KILN_NO_LAPACK=1 (the BLAS=0 build) GaLore must fail cleanly instead.
# Last line: "N passed, N failed", as the test binary's.
set -u
build=$1
shift
if [ $# -gt 0 ]; then
    match=0
    for f in "$@"; do
        case examples in *"$f"*) match=1 ;; esac
    done
    [ "$match" -eq 1 ] || { echo "0 passed, 0 failed"; exit 0; }
fi
bin=$build/examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

# check NAME EXPECTED_STATUS GREP_PATTERN CMD... : run CMD; pass when its
# exit status is EXPECTED_STATUS and its output matches GREP_PATTERN
check() {
    name=$1 want=$2 pattern=$3
    shift 3
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -eq "$want" ] && printf '%s\n' "$out" | grep -q -- "$pattern"; then
        echo "ok $name"
        passed=$((passed + 1))
    else
        echo "FAIL examples_$name: exit status $rc (wanted $want), output should match '$pattern':"
        printf '%s\n' "$out" | tail -n 15 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}

tiny="--limit 2 --batch 32 --threads 1"
# quantize: a random tiny GPT and llama, a few calibration windows, two evaluation batches
qtiny="--random --width 64 --layers 1 --context 32 --calib 8 --eval-subset 2 --threads 1 --out $tmp"
check quantize_help 0 "--act-order" "$bin/quantize" --help
if [ "${KILN_NO_LAPACK:-0}" = 1 ]; then
    check fashion_galore_needs_lapack 1 "needs LAPACK" "$bin/fashion" --optim galore $tiny
    check quantize_gptq_needs_lapack 0 "^gptq-4 .*LAPACK" "$bin/quantize" $qtiny
else
    check quantize_gpt_tiny 0 "^gptq-2 .*fused in GQ2_" "$bin/quantize" $qtiny
    check quantize_llama_tiny 0 "^gptq-3 .*fused in GQ3_32, 7 with a perm" "$bin/quantize" --model llama $qtiny --group 32 --act-order
    check quickstart_help 0 "--backend" "$bin/quickstart" --help
    check quickstart_tiny 0 "after: the same as the trained one" \
        "$bin/quickstart" $tiny --epochs 1 --save "$tmp/q.safetensors"
    check quickstart_bad_option 2 "unknown" "$bin/quickstart" --no-such-option
    check fashion_help 0 "apollo-mini" "$bin/fashion" --help
    check fashion_mlp_sgd 0 "mlp sgd: test accuracy" "$bin/fashion" --model mlp --optim sgd $tiny
    # an lr that overflows: the non-finite guard skips the poisoned steps and the run ends normally
    check fashion_guard_skips 0 "non-finite guard: [1-9][0-9]* steps\? skipped" "$bin/fashion" --model mlp --optim sgd --lr 1e30 $tiny
    for o in galore8bit apollo-mini; do
        check "fashion_cnn_$o" 0 "cnn $o: test accuracy .*optimizer state" "$bin/fashion" --optim "$o" $tiny
    done
    # a run stopped after epoch 1 and resumed ends exactly as one that never stopped
    full=$("$bin/fashion" --optim adamw $tiny --epochs 2 2>&1 | grep "^epoch 2: train loss")
    check fashion_save 0 "checkpoint: " \
        "$bin/fashion" --optim adamw $tiny --epochs 2 --stop 1 --save "$tmp/f.safetensors"
    check fashion_resume_same_result 0 "^${full:-no result}$" \
        "$bin/fashion" --optim adamw $tiny --epochs 2 --resume "$tmp/f.safetensors"
    check fashion_resume_other_optimizer 1 "resuming" \
        "$bin/fashion" --optim lion $tiny --epochs 2 --resume "$tmp/f.safetensors"
fi
# int16-train: FP32 and INT16-DFP runs of the CNN side by side, a curve each in the PNG
check int16_train_help 0 "--layers" "$bin/int16-train" --help
check int16_train_tiny 0 "^final test accuracy: FP32 .*, DFP " \
    "$bin/int16-train" $tiny --epochs 2 --plot "$tmp/int16.png"
check int16_train_bad_layers 2 "--layers" "$bin/int16-train" --layers 16
# generate: a tiny random llama written as GGUF, run as stored and converted
check generate_help 0 "--make-random" "$bin/generate" --help
check generate_make_tiny 0 "tiny.gguf: llama" "$bin/generate" --make-random "$tmp/tiny.gguf" --size tiny --dtype q4_0
check generate_tiny_q4_0 0 "generation: 7 tokens" "$bin/generate" --model "$tmp/tiny.gguf" --tokens 8 --threads 1
check generate_tiny_no_fuse 0 "generation: 7 tokens" "$bin/generate" --model "$tmp/tiny.gguf" --tokens 8 --threads 1 --no-fuse
check generate_tiny_nf4_sampled 0 "weights nf4" \
    "$bin/generate" --model "$tmp/tiny.gguf" --dtype nf4 --tokens 8 --temperature 0.8 --top-k 5 --threads 1
check generate_no_model 2 "--model" "$bin/generate"
check generate_bad_file 1 "generate: " "$bin/generate" --model "$tmp/no-such.gguf"
# a run that does not fit its address-space limit: a clear error and exit
# status 1 within seconds (OpenBLAS's pthread build looped forever on its
# buffers there, and exit() waited for that thread: a hang)
limited() { (ulimit -v 100000 && exec timeout 30 "$@"); }
check quickstart_address_limit 1 "cannot allocate\|out of memory" limited "$bin/quickstart" $tiny --save "$tmp/l.safetensors"
check mlp_address_limit 1 "cannot allocate\|out of memory" limited "$bin/mlp" --epochs 1
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
