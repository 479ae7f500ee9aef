#!/bin/sh
# dist.sh — the data-parallel bench line: kiln_dist_bench (make MPI=1) under
# mpirun -np 1 and -np 2 at the same global batch, one kernel thread per
# rank (so that 2 ranks use the 2 cores 1 rank leaves half idle, and no
# OpenMP team spins against another rank), then the scaling t1 / t2 and
# its efficiency t1 / (2 t2), the step with the all-reduce started after
# backward instead of during it, and the optimizer state each rank holds
# (ZeRO-1), and the CPU time of a step summed over the ranks: its ratio is
# the work efficiency (communication and duplicated work), which a loaded
# machine changes much less than the wall time. The ranks share this machine's cores with each other (and on a
# shared machine with whatever else runs): an efficiency below 100% is
# communication, waiting for the slower rank, and the cores' contention.
# Usage: bench/dist.sh BUILD/bench/kiln_dist_bench [kiln_dist_bench options]
set -eu
bin=${1:?usage: bench/dist.sh path/to/kiln_dist_bench [options]}
shift
here=$(dirname "$0")
run() {
    np=$1
    shift
    KILN_THREADS=1 "$here/../scripts/mpirun.sh" -np "$np" -x KILN_THREADS "$bin" "$@" | grep '^dist '
}
one=$(run 1 "$@")
two=$(run 2 "$@")
late=$(run 2 --no-overlap "$@")
printf '%s\n%s\n%s\n' "$one" "$two" "$late"
printf '%s\n%s\n%s\n' "$one" "$two" "$late" | awk -v cores="$(nproc)" '
    { for (i = 1; i < NF; i++) { if ($i == "step") t[NR] = $(i + 1); if ($i == "dist_step") w[NR] = $(i + 1); if ($i == "cpu") c[NR] = $(i + 1)
                                 if ($i == "state_rank0") s[NR] = $(i + 1); if ($i == "state_all") a[NR] = $(i + 1) } }
    END { printf "dist scaling: GPT step %.1f ms on 1 rank, %.1f ms on 2 (%.2fx, efficiency %.0f%%; %d cores shared by the ranks); CPU time per step %.1f -> %.1f ms over both ranks (work efficiency %.0f%%); all-reduce after backward instead of during it: %.1f ms (kiln_dist_step %.1f -> %.1f ms); optimizer state per rank %d -> %d bytes (%.2f of %d)\n",
          t[1], t[2], t[1] / t[2], 100 * t[1] / (2 * t[2]), cores, c[1], c[2], 100 * c[1] / c[2], t[3], w[3], w[2], s[1], s[2], s[2] / a[2], a[2] }'
