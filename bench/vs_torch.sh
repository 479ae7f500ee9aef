#!/bin/bash
# vs_torch.sh — kiln against PyTorch on bench/train_sizes.c's size lines, at
# one instruction-set level for both, whole processes alternating.
#
# Usage: bench/vs_torch.sh [--isa native|avx2|avx512] [--pairs N]
#                          [--threads 1,2] [--kiln PATH]... [LINE...]
#   LINE      resnet18_b32 resnet18_b128 gpt512 gpt768 (default: the first three)
#   --isa     avx2: kiln at KILN_SIMD=avx2, PyTorch with ATEN_CPU_CAPABILITY=avx2,
#             ONEDNN_MAX_CPU_ISA=AVX2 and OPENBLAS_CORETYPE=Haswell (an Intel
#             client CPU without AVX-512); avx512: KILN_SIMD=avx512 against
#             ATen avx512, oneDNN AVX512_CORE, OpenBLAS SkylakeX (Skylake-X /
#             Cascade Lake: AVX-512 without VNNI); native: neither held back
#   --kiln    a kiln_bench to time (default build/bench/kiln_bench); given
#             twice, both alternate (an old build against a new one)
#
# Each pair runs every kiln_bench then PyTorch (bench/torch_ref.py
# --size-line) on one line and thread count; a run prints one row: seconds a
# step (the median of 3 after a warm-up, as each program times it), the CPU
# seconds of the whole process, its peak RSS (MiB) and the 1-minute load. The
# summary gives the medians over the pairs and kiln's speed and RSS against
# PyTorch's. Rows go to stdout as they come, the summary after.
set -eu
cd "$(dirname "$0")/.."

isa=native pairs=5 threads=1,2 kilns=() lines=()
while [ $# -gt 0 ]; do
    case "$1" in
        --isa) isa=$2; shift 2 ;;
        --pairs) pairs=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --kiln) kilns+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "vs_torch.sh: unknown option $1 (--help)" >&2; exit 2 ;;
        *) lines+=("$1"); shift ;;
    esac
done
[ ${#kilns[@]} -gt 0 ] || kilns=(build/bench/kiln_bench)
[ ${#lines[@]} -gt 0 ] || lines=(resnet18_b32 resnet18_b128 gpt512)
case "$isa" in
    native) kiln_env=() torch_env=() ;;
    avx2) kiln_env=(KILN_SIMD=avx2)
          torch_env=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell) ;;
    avx512) kiln_env=(KILN_SIMD=avx512)
            torch_env=(ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE OPENBLAS_CORETYPE=SkylakeX) ;;
    *) echo "vs_torch.sh: --isa is native, avx2 or avx512, not $isa" >&2; exit 2 ;;
esac
for k in "${kilns[@]}"; do [ -x "$k" ] || { echo "vs_torch.sh: no kiln_bench at $k" >&2; exit 2; }; done
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "vs_torch.sh: /usr/bin/python3 cannot import torch" >&2; exit 2; }

rows=$(mktemp "${TMPDIR:-/tmp}/vs_torch.XXXXXX")
trap 'rm -f "$rows"' EXIT
trap 'exit 130' INT TERM

# one run: "who line threads step_s cpu_s rss_mib load"
run() {
    local who=$1 line=$2 nt=$3; shift 3
    local out
    out=$( { env "$@" /usr/bin/time -f "@ %U %S %M" "${cmd[@]}" --size-line "$line" "$nt"; } 2>&1) ||
        { echo "vs_torch.sh: $who $line $nt failed: $out" >&2; return 0; }
    local step usr sys rss
    step=$(printf '%s\n' "$out" | grep -v '^@' | tail -1)
    read -r _ usr sys rss <<< "$(printf '%s\n' "$out" | grep '^@' | tail -1)"
    printf '%s %s %s %s %.2f %.0f %s\n' "$who" "$line" "$nt" "$step" "$(echo "$usr + $sys" | bc)" \
        "$(echo "$rss / 1024" | bc -l)" "$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$rows"
}

echo "# vs_torch.sh --isa $isa, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(date -u +%FT%TZ)"
echo "# who line threads step_s cpu_s rss_mib load"
for ((p = 0; p < pairs; p++)); do
    for line in "${lines[@]}"; do
        for nt in ${threads//,/ }; do
            for k in "${kilns[@]}"; do
                cmd=("$k")
                run "$k" "$line" "$nt" "${kiln_env[@]}"
            done
            cmd=(/usr/bin/python3 bench/torch_ref.py)
            run torch "$line" "$nt" "${torch_env[@]}"
        done
    done
done

# medians of step, CPU and RSS per (who, line, threads); speed and RSS against PyTorch's
echo "# medians over $pairs pairs: who line threads step_s cpu_s rss_mib speed_vs_torch rss_vs_torch"
/usr/bin/python3 - "$rows" <<'EOF'
import statistics, sys
runs = {}
for row in open(sys.argv[1]):
    who, line, nt, step, cpu, rss, _ = row.split()
    runs.setdefault((line, int(nt), who), []).append((float(step), float(cpu), float(rss)))
med = {k: [statistics.median(c) for c in zip(*v)] for k, v in runs.items()}
for (line, nt, who), (step, cpu, rss) in sorted(med.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] == "torch")):
    ref = med.get((line, nt, "torch"))
    vs = f" {ref[0] / step:.2f}x {rss / ref[2]:.2f}x" if ref and who != "torch" else ""
    print(f"{who} {line} {nt} {step:.4f} {cpu:.2f} {rss:.0f}{vs}")
EOF
