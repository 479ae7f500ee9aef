#!/bin/sh
# dist.sh — the data-parallel bench line: kiln_dist_bench (make MPI=1) under
# mpirun -np 1 and -np 2 at the same global batch, then the scaling
# efficiency t1 / (2 t2) and the optimizer state each rank holds (ZeRO-1).
# The ranks share this machine's cores: -np 1 runs with every core's
# threads, -np 2 with cores / 2 threads per rank, so the ideal is the same
# total compute split two ways and 100% means no cost from communication.
# Usage: bench/dist.sh BUILD/bench/kiln_dist_bench [kiln_dist_bench options]
set -eu
bin=${1:?usage: bench/dist.sh path/to/kiln_dist_bench [options]}
shift
here=$(dirname "$0")
cores=$(nproc)
half=$((cores / 2 > 0 ? cores / 2 : 1))
one=$(KILN_THREADS=$cores "$here/../scripts/mpirun.sh" -np 1 -x KILN_THREADS "$bin" "$@" | grep '^dist ')
two=$(KILN_THREADS=$half "$here/../scripts/mpirun.sh" -np 2 -x KILN_THREADS "$bin" "$@" | grep '^dist ')
echo "$one"
echo "$two"
printf '%s\n%s\n' "$one" "$two" | awk '
    { for (i = 1; i < NF; i++) { if ($i == "step") t[NR] = $(i + 1); if ($i == "state_rank0") s[NR] = $(i + 1); if ($i == "state_all") a[NR] = $(i + 1) } }
    END { printf "dist scaling: 2 ranks %.2fx the speed of 1 (efficiency %.0f%%; the ranks share %d cores); optimizer state per rank %d -> %d bytes (%.2f of the full %d)\n",
          t[1] / t[2], 100 * t[1] / (2 * t[2]), cores, s[1], s[2], s[2] / a[2], a[2] }' cores="$cores"
