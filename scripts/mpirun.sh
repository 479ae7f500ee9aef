#!/bin/sh
# mpirun.sh — Open MPI's mpirun with the settings kiln's tests, benchmarks
# and examples need on one machine, in a container, possibly as root:
#   --oversubscribe      more ranks than cores (-np 3 on 2 cores)
#   --bind-to none       ranks not pinned to a core each (they share them)
#   --mca btl self,vader shared memory only (no network transports to probe)
#   mpi_yield_when_idle  a rank waiting for a message yields its core instead of
#                        spinning (Open MPI does so by itself only past one rank
#                        per core); on 2 shared cores spinning cost a 4x slower step
#   root                 OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1, as Open MPI asks
#   vader's single-copy mechanism off: containers usually forbid CMA
#                        (ptrace), which vader would try and fail
# Usage: scripts/mpirun.sh -np N PROGRAM [ARGS...]
set -eu
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none
exec mpirun --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 "$@"
