#!/bin/sh
# test_examples.sh — keep the examples from rotting and to their word: each
# one's --help; bad usage (an unknown option, a bad value, an output path
# that cannot be written) refused at once with exit status 2, naming the
# option and the value; a tiny run (--limit: a few batches of training and
# of the test set) that must end with exit status 0 and print its result
# lines; gpt's time budget, which bounds the whole run; sampled text
# without control bytes. Part of scripts/test.sh; under a minute in all.
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

# no_controls NAME CMD... : run CMD (exit status 0); pass when its output
# holds no control byte but newlines and tabs
no_controls() {
    name=$1
    shift
    "$@" >"$tmp/out" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && ! tr -d '\n\t' <"$tmp/out" | LC_ALL=C grep -q '[[:cntrl:]]'; then
        echo "ok $name"
        passed=$((passed + 1))
    else
        echo "FAIL examples_$name: exit status $rc, or a control byte in the output:"
        tail -n 5 "$tmp/out" | od -c | tail -n 8 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}

# every example: --help, and an unknown option refused by name
for e in $(cd "$bin" && ls); do
    check "${e}_help" 0 "^usage: $e" "$bin/$e" --help
    check "${e}_unknown_option" 2 "unknown option '--no-such-option'" "$bin/$e" --no-such-option
done
# a bad value is named with its option, before any work
check gpt_negative_count 2 "bad value -3 for --steps (expected an integer >= 0)" "$bin/gpt" --steps -3
check gpt_heads_divide_width 2 "bad value 5 for --heads (expected a divisor of --width 96)" "$bin/gpt" --heads 5
check gpt_warmup_past_steps 2 "bad value 50 for --warmup (expected at most --steps 10)" "$bin/gpt" --steps 10
check fashion_negative_lr 2 "bad value -1 for --lr" "$bin/fashion" --lr -1
check quickstart_warmup_fraction 2 "bad value 1.5 for --warmup (expected a fraction in \[0, 1))" \
    "$bin/quickstart" --warmup 1.5
check generate_negative_tokens 2 "bad value -1 for --tokens" "$bin/generate" --tokens -1
check optim_compare_sweep 2 "bad value 4 for --sweep" "$bin/optim-compare" --sweep 4
check quantize_calib_batch 2 "bad value 7 for --calib-batch (expected a divisor of --calib 128)" \
    "$bin/quantize" --calib-batch 7
check quantize_only_names 2 "bad value 'gptq-9' in --only" "$bin/quantize" --random --only f32,gptq-9
check mlp_bad_epochs 2 "bad value x for --epochs" "$bin/mlp" --epochs x
check dfp_error_bad_steps 2 "bad value -1 for --steps" "$bin/dfp-error" --steps -1
# every example that runs on Vulkan runs on CUDA too; where the build has
# no CUDA backend, asking for it is a clear error before any work
for e in $(cd "$bin" && ls); do
    "$bin/$e" --help 2>&1 | grep -q "backend.*vulkan" || continue
    check "${e}_backend_choices" 0 "cpu|vulkan|cuda" "$bin/$e" --help
    [ -d "$build/obj/backends/cuda" ] && continue
    case $e in
    generate) check generate_backend_cuda_absent 1 "built without CUDA (make CUDA=1)" \
        "$bin/generate" --backend cuda --model "$tmp/none.gguf" ;;
    optim-compare) ;; # each run chooses the backend in its own process, and reports it failed
    *) check "${e}_backend_cuda_absent" 1 "built without CUDA (make CUDA=1)" "$bin/$e" --backend cuda --threads 1 ;;
    esac
done
# output paths that cannot be written: said before any training (a path
# under a regular file fails for root too)
: >"$tmp/file"
check quickstart_unwritable_save 2 "--save $tmp/file/q.safetensors: cannot write there" \
    "$bin/quickstart" --save "$tmp/file/q.safetensors"
check fashion_unwritable_save 2 "--save /nonexistent/f.safetensors: cannot write there" \
    "$bin/fashion" --save /nonexistent/f.safetensors
check gpt_unwritable_save 2 "--save $tmp: cannot write there: it is a directory" "$bin/gpt" --save "$tmp"
check int16_train_unwritable_plot 2 "--plot $tmp/file/p.png: cannot write there" \
    "$bin/int16-train" --plot "$tmp/file/p.png"
check optim_compare_unwritable_out 2 "--out $tmp/file/out: cannot write there" \
    "$bin/optim-compare" --quick --out "$tmp/file/out"
check quantize_unwritable_out 2 "--out $tmp/file/q: cannot write there" "$bin/quantize" --random --out "$tmp/file/q"
check generate_unwritable_model 2 "--make-random $tmp/file/m.gguf: cannot write there" \
    "$bin/generate" --make-random "$tmp/file/m.gguf"

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
check int16_train_bad_layers 2 "bad value 16 for --layers (expected a mask in 1..15)" "$bin/int16-train" --layers 16
# generate: a tiny random llama written as GGUF, run as stored and converted
check generate_help 0 "--make-random" "$bin/generate" --help
check generate_make_tiny 0 "tiny.gguf: llama" "$bin/generate" --make-random "$tmp/tiny.gguf" --size tiny --dtype q4_0
check generate_tiny_q4_0 0 "generation: 7 tokens" "$bin/generate" --model "$tmp/tiny.gguf" --tokens 8 --threads 1
check generate_tiny_no_fuse 0 "generation: 7 tokens" "$bin/generate" --model "$tmp/tiny.gguf" --tokens 8 --threads 1 --no-fuse
check generate_tiny_nf4_sampled 0 "weights nf4" \
    "$bin/generate" --model "$tmp/tiny.gguf" --dtype nf4 --tokens 8 --temperature 0.8 --top-k 5 --threads 1
check generate_no_model 2 "--model" "$bin/generate"
# a vocabulary with an end-of-turn token (<|im_end|>, not its eos) and no BOS to add:
# the run stops at the token unless --ignore-eos, and the 3-letter prompt is 3 ids
mkdir "$tmp/eog"
cp tests/fixtures/eog-hf/config.json tests/fixtures/eog-hf/tokenizer.json \
    tests/fixtures/arch/llama-rope-tiny-hf/model.safetensors "$tmp/eog/"
eog="$bin/generate --model $tmp/eog --prompt abc --tokens 24 --temperature 3 --top-k 0 --seed 5 --threads 1"
check generate_stops_at_end_of_turn 0 "<|im_end|>$" $eog
check generate_no_bos_unless_asked 0 "^prompt: 3 tokens" $eog
check generate_ignore_eos 0 "generation: 23 tokens" $eog --ignore-eos
# every llama-quantize mix: Q4_K_M on the tiny model (64 wide: llama.cpp's fallbacks, Q5_0 and Q8_0)
check generate_make_tiny_q4_k_m 0 "tiny_k.gguf: llama .* in Q4_K_M" \
    "$bin/generate" --make-random "$tmp/tiny_k.gguf" --size tiny --dtype q4_k_m
check generate_tiny_q4_k_m 0 "generation: 7 tokens" "$bin/generate" --model "$tmp/tiny_k.gguf" --tokens 8 --threads 1
check generate_make_not_a_mix 2 "writes a llama.cpp mix (--dtype F32|.*IQ4_XS), not nf4" \
    "$bin/generate" --make-random "$tmp/x.gguf" --size tiny --dtype nf4
check generate_bad_dtype 2 "--dtype q4_k_m: not one of stored|f32|" "$bin/generate" --model "$tmp/tiny.gguf" --dtype q4_k_m
check generate_tiny_as_q8_0 0 "weights q8_0" "$bin/generate" --model "$tmp/tiny_k.gguf" --dtype q8_0 --tokens 8 --threads 1
# --dump-logits: every position's logits, [ids][vocab] float32 (vocab 320: 3 x 320 x 4 bytes)
check generate_dump_logits 0 "logits of 3 ids" "$bin/generate" --model "$tmp/tiny.gguf" --ids 1,40,7 \
    --dump-logits "$tmp/z.bin" --threads 1
check generate_dump_logits_size 0 "^3840 " wc -c "$tmp/z.bin"
check generate_dump_bad_id 2 "'4x' (entry 2 of '1,4x') is not a token id" \
    "$bin/generate" --model "$tmp/tiny.gguf" --ids 1,4x --dump-logits "$tmp/z.bin"
check generate_dump_id_past_vocab 2 "id 320 (entry 2) is not below the vocabulary size 320" \
    "$bin/generate" --model "$tmp/tiny.gguf" --ids 1,320 --dump-logits "$tmp/z.bin"
check generate_dump_no_ids 2 "--ids and --dump-logits go together" \
    "$bin/generate" --model "$tmp/tiny.gguf" --dump-logits "$tmp/z.bin"
check generate_bad_file 1 "generate: " "$bin/generate" --model "$tmp/no-such.gguf"
no_controls generate_sample_no_control_bytes \
    "$bin/generate" --model "$tmp/tiny.gguf" --tokens 40 --temperature 5 --top-k 0 --ignore-eos --threads 1
# chat on the tiny random model (its GGUF has no template: ChatML; here Mistral's compact one). A turn's
# reply comes out while the input is still open; two turns, then the end of the input
chat="$bin/chat --model $tmp/tiny.gguf --threads 1 --seed 1 --chat-template mistral-v3-tekken"
check chat_no_model 2 "--model" "$bin/chat"
check chat_bad_bias 2 "bad value '3x2' for --logit-bias" "$bin/chat" --model "$tmp/tiny.gguf" --logit-bias 3x2
check chat_bad_template 1 "not one kiln recognizes" "$bin/chat" --model "$tmp/tiny.gguf" --chat-template "{{ x }}"
mkfifo "$tmp/in"
$chat --tokens 4 <"$tmp/in" >"$tmp/chat.out" 2>&1 &
pid=$!
exec 3>"$tmp/in"
echo hi >&3
for i in $(seq 100); do [ "$(grep -c '^> ' "$tmp/chat.out")" -ge 2 ] && break; sleep 0.1; done
streamed=$(grep -c '^> ' "$tmp/chat.out")
echo yo >&3
exec 3>&-
wait $pid
rc=$?
if [ "$rc" -eq 0 ] && [ "$streamed" -ge 2 ] && [ "$(grep -c '^> ..' "$tmp/chat.out")" -eq 2 ]; then
    echo "ok chat_streams_turns"
    passed=$((passed + 1))
else
    echo "FAIL examples_chat_streams_turns: exit status $rc, $streamed prompts before the input closed:"
    sed 's/^/    /' "$tmp/chat.out" | tail -n 8
    failed=$((failed + 1))
fi
# the end of a turn (</s>, made likeliest) ends a reply that has no length limit: an empty one
check chat_stops_at_end_of_turn 0 "^> $" sh -c "printf 'hi\n' | $chat --logit-bias 2+100 2>/dev/null | head -n 1"
# a reply that fills the context stops and says so; a turn that cannot fit is refused; /reset starts over
check chat_context_full 0 "the context is full (24 tokens): the reply stops here" \
    sh -c "printf 'hi\n' | $chat --context 24 --logit-bias 2-100"
check chat_turn_too_long 0 "the conversation with this turn is .* tokens of 24" \
    sh -c "printf 'a much longer line than fits\n' | $chat --context 24"
check chat_reset 0 "a new conversation" sh -c "printf 'hi\n/reset\nhi\n/quit\n' | $chat --context 24 --logit-bias 2-100"
# serve (where it is built; scripts/test_serve.sh runs it for real): a
# model, a port or an address it cannot take, refused before it listens
if [ -x "$bin/serve" ]; then
    check serve_no_model 2 "--model PATH is needed" "$bin/serve"
    check serve_bad_port 2 "bad value 70000 for --port" "$bin/serve" --model "$tmp/tiny.gguf" --port 70000
    check serve_missing_model 1 "serve: $tmp/none.gguf" "$bin/serve" --model "$tmp/none.gguf"
    check serve_bad_host 1 "--host 300.1.1.1 is not an IPv4 or IPv6 address" "$bin/serve" --model "$tmp/tiny.gguf" \
        --host 300.1.1.1
fi
# gpt: a 3-second budget (the default model: its full evaluation alone
# would take longer) ends the whole run, evaluation and sample included,
# within 2 s of it; the sample, drawn hot from all 256 bytes, reaches the
# terminal without a control byte
start=$(date +%s%N)
no_controls gpt_sample_no_control_bytes "$bin/gpt" --minutes 0.05 --threads 1 --sample 200 --temperature 4 --top-k 0
took=$((($(date +%s%N) - start) / 1000000))
check gpt_time_budget 0 "steps fit in 0.05 minutes" cat "$tmp/out"
if [ "$took" -le 5000 ]; then
    echo "ok gpt_time_budget_kept"
    passed=$((passed + 1))
else
    echo "FAIL examples_gpt_time_budget_kept: a 3 s budget took $took ms"
    failed=$((failed + 1))
fi
# --checkpoint: recomputed blocks, a smaller planned training graph
check gpt_checkpoint 0 "MB of activations planned (gradient checkpointing)" \
    "$bin/gpt" --checkpoint --steps 2 --warmup 1 --eval-every 0 --final-subset --eval-subset 1 --sample 0 --batch 2 --seq 32
# a run that does not fit its address-space limit: a clear error and exit
# status 1 within seconds (OpenBLAS's pthread build looped forever on its
# buffers there, and exit() waited for that thread: a hang)
# (not in a sanitized build: ASan reserves terabytes of address space for
# its shadow memory and cannot start under any such limit)
limited() { (ulimit -v 100000 && exec timeout 30 "$@"); }
if ! nm "$bin/quickstart" 2>/dev/null | grep -q __asan_init; then
    check quickstart_address_limit 1 "cannot allocate\|out of memory" limited "$bin/quickstart" $tiny --save "$tmp/l.safetensors"
    check mlp_address_limit 1 "cannot allocate\|out of memory" limited "$bin/mlp" --epochs 1
fi
# finetune: LoRA and QLoRA on the tiny reference llama, a few steps of
# each optimizer; the held-out loss falls on the sayings, the base's bytes
# stay as they were, no gradient exists for them; 2 steps, a checkpoint
# and 2 more resumed write the adapters 4 steps write, byte for byte; the
# QLoRA model merged into its dequantized base (in f32) has the held-out
# loss the adapted model had
ft="$bin/finetune --model tests/fixtures/gguf-ref/llama-s1-F32.gguf --data examples/finetune/data/sayings.txt
    --batch 2 --seq 32 --eval-windows 4 --sample-tokens 4 --threads 1"
check finetune_bad_holdout 2 "bad value 1.5 for --holdout" $ft --holdout 1.5
check finetune_needs_checkpoint 2 "bad value 2 for --save-every" $ft --save-every 2
check finetune_bad_data 1 "--data $tmp/none.txt: cannot read it" $ft --data "$tmp/none.txt"
check finetune_bad_jsonl 1 "sayings.txt line 1: .* expected" $ft --format chat
printf '{"messages": []}\n' >"$tmp/empty.jsonl"
check finetune_empty_messages 1 "empty.jsonl line 1: no \"messages\" array" $ft --data "$tmp/empty.jsonl"
check finetune_lowers_loss 0 "held-out loss after: .* (before .*, -" $ft --steps 12 --lr 3e-3
check finetune_chat 0 "chat (loss on the assistant's tokens), 12 documents" $ft \
    --data examples/finetune/data/chat.jsonl --steps 2
check finetune_memory 0 "memory: full fine-tuning with AdamW: about" $ft --steps 1 --optim adamw8bit
check finetune_base_no_gradients 0 "memory: frozen base .* MB (layers in f32), its gradients 0.000 MB" $ft --steps 1
check finetune_qlora_lowers_loss 0 "held-out loss after: .* (before .*, -" $ft --qlora --steps 12 --lr 3e-3
check finetune_qlora_base_unchanged 0 "base: unchanged bit for bit by training" $ft --qlora --steps 2
check finetune_qlora_base_no_gradients 0 "memory: frozen base .* MB (layers in nf4.*), its gradients 0.000 MB" \
    $ft --qlora --steps 1
$ft --qlora --compute f32 --steps 4 --merge-to "$tmp/ft-q-merged.gguf" --dtype F32 >"$tmp/ft-q.out" 2>&1
after=$(sed -n 's/^held-out loss after: \([0-9.]*\) .*/\1/p' "$tmp/ft-q.out")
check finetune_qlora_merge 0 "held-out loss before: ${after:-none}" $ft --model "$tmp/ft-q-merged.gguf" --steps 0
check finetune_out_merge 0 "merged model: $tmp/ft-merged.gguf (q8_0)" $ft --steps 2 --out "$tmp/ft-peft" \
    --merge-to "$tmp/ft-merged.gguf" --dtype Q8_0
for o in adamw mezo qlora qlora_mezo; do
    case $o in
    adamw) opt="--optim adamw" ;;
    mezo) opt="--mezo --lr 1e-3" ;;
    qlora) opt="--qlora" ;;
    qlora_mezo) opt="--qlora --mezo --lr 1e-3" ;;
    esac
    $ft $opt --steps 4 --out "$tmp/ft-4-$o" >/dev/null 2>&1
    $ft $opt --steps 2 --checkpoint "$tmp/ft-c-$o" --save-every 2 >/dev/null 2>&1
    check finetune_resume_$o 0 "resumed $tmp/ft-c-$o at step 2" $ft $opt --steps 4 --resume "$tmp/ft-c-$o" \
        --out "$tmp/ft-r-$o"
    check finetune_resume_bit_for_bit_$o 0 "" cmp "$tmp/ft-4-$o/adapter_model.safetensors" \
        "$tmp/ft-r-$o/adapter_model.safetensors"
done
# a Hugging Face directory with --qlora (the 48-id llama of tests/fixtures/arch
# with eog-hf's byte-level tokenizer, whose letters a..z are ids 0..25: its
# layers are narrower than NF4's blocks, so they stay f32), and a text the
# model's vocabulary cannot hold refused by name
mkdir -p "$tmp/hf"
cp tests/fixtures/eog-hf/config.json tests/fixtures/eog-hf/tokenizer.json \
    tests/fixtures/arch/llama-rope-tiny-hf/model.safetensors "$tmp/hf/"
i=0 letters=""
while [ $i -lt 100 ]; do letters="${letters}abcadbecabedcab"; i=$((i + 1)); done
printf '%s' "$letters" >"$tmp/letters.txt"
fth="$bin/finetune --model $tmp/hf --qlora --batch 4 --seq 16 --threads 1 --prompt abc --sample-tokens 4"
check finetune_hf_qlora 0 "held-out loss after: .* (before .*, -" $fth --data "$tmp/letters.txt" --steps 12 --lr 1e-2
check finetune_vocab_mismatch 1 "sayings.txt: token 111 ('T', the data's token 0) is outside .*vocabulary of 48 ids" $fth \
    --data examples/finetune/data/sayings.txt --steps 1
check finetune_resume_other_seed 1 "the checkpoint was made with --seed 42" $ft --seed 7 --steps 4 \
    --resume "$tmp/ft-c-adamw"
check finetune_resume_other_base 1 "and qlora-[a-z0-9]*, this run has .* and lora-f32" $ft --optim adamw8bit \
    --steps 4 --resume "$tmp/ft-c-qlora"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
