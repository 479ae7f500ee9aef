#!/bin/sh
# deps.sh — install the Debian 12 packages kiln needs; safe to run again.
#
# Usage: scripts/deps.sh [group...]
#   build     compilers (clang-14 with its sanitizer and libFuzzer runtimes for
#             make fuzz), BLAS/LAPACK (and OpenBLAS's threaded library: make
#             bench's GEMM reference at 2 threads), OpenMP, zlib, stb, and for the Vulkan
#             backend the loader, glslc, spirv-val, Mesa's lavapipe (a Vulkan
#             device on the CPU) and the validation layers (to build and test)
#   data      Fashion-MNIST and fortunes (for the examples)
#   cross     the ARM64 cross compiler and qemu-user (make test builds and runs
#             the suite for ARM64 under emulation)
#   mpi       Open MPI (mpicc, mpirun): make MPI=1 builds kiln_dist, and make test
#             runs its tests under mpirun -np 2 and 3 (scripts/test_dist.sh)
#   serve     libmicrohttpd, jansson and xxd, to build examples/serve (the
#             Makefile leaves it out without them), curl for its tests
#   test      serve's, and Chromium and python3-websocket for the test of its
#             chat page in a headless browser (scripts/test_serve.sh)
#   fixtures  numpy and torch (only to regenerate tests/fixtures; tests never need them),
#             unicode-data (only to regenerate core/tokenizer_unicode.c)
# No argument means "build data". Only missing packages are installed, and
# apt-get update runs only when something is missing. While another apt or
# dpkg holds the package locks it waits, saying so, up to
# $KILN_DEPS_LOCK_WAIT seconds (default 300), then fails.
set -eu

build_pkgs="gcc make pkg-config jq libjansson-dev libopenblas-dev libopenblas-serial-dev libopenblas0-pthread liblapacke-dev zlib1g-dev libstb-dev clang
  clang-14 libclang-rt-14-dev
  libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers vulkan-tools"
data_pkgs="dataset-fashion-mnist fortunes"
cross_pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
fixtures_pkgs="python3-numpy python3-torch unicode-data"
mpi_pkgs="openmpi-bin libopenmpi-dev"
serve_pkgs="libmicrohttpd-dev libjansson-dev xxd curl"
test_pkgs="$serve_pkgs chromium python3-websocket"

if [ $# -eq 0 ]; then set -- build data; fi

want=""
for group in "$@"; do
    case "$group" in
        build) want="$want $build_pkgs" ;;
        data) want="$want $data_pkgs" ;;
        cross) want="$want $cross_pkgs" ;;
        fixtures) want="$want $fixtures_pkgs" ;;
        mpi) want="$want $mpi_pkgs" ;;
        serve) want="$want $serve_pkgs" ;;
        test) want="$want $test_pkgs" ;;
        *) echo "deps: unknown group '$group' (expected: build data cross fixtures mpi serve test)" >&2; exit 2 ;;
    esac
done

total=0
seen=" "
missing=""
for pkg in $want; do
    # a group given twice must not count or install its packages twice
    case "$seen" in *" $pkg "*) continue ;; esac
    seen="$seen$pkg "
    total=$((total + 1))
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing="$missing $pkg"
done
missing=${missing# }

if [ -z "$missing" ]; then
    echo "deps: all $total packages present"
    exit 0
fi
echo "deps: installing $missing"

if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
else
    echo "deps: not root and no sudo; install as root: apt-get install $missing" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Another apt or dpkg (unattended-upgrades, a second deps.sh) may hold the
# package locks. Each apt-get is tried once without waiting, so that a wait
# is announced, then again with DPkg::Lock::Timeout set to what is left of
# the deadline (and again, should it still fail on a lock).
lock_wait=${KILN_DEPS_LOCK_WAIT:-300}
case "$lock_wait" in
    '' | *[!0-9]*) echo "deps: KILN_DEPS_LOCK_WAIT='$lock_wait' is not a number of seconds" >&2; exit 2 ;;
esac
deadline=$(($(date +%s) + lock_wait))
err=$(mktemp)
trap 'rm -f "$err"' EXIT

# apt_get WHAT ARGS... : apt-get ARGS as root, waiting for a package lock
# held by another process until the deadline
apt_get() {
    what=$1
    shift
    said= left=0 # the first try does not wait: a wait is said before it starts
    while :; do
        # sudo drops the environment by default, so pass the frontend explicitly
        if $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$left" "$@" 2>"$err"; then
            cat "$err" >&2 # warnings
            return 0
        fi
        if ! grep -q 'Could not get lock\|Unable to lock\|Unable to acquire' "$err"; then
            cat "$err" >&2
            echo "deps: apt-get $what failed" >&2
            return 1
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            cat "$err" >&2
            echo "deps: apt-get $what: another package manager still holds the lock after ${lock_wait} s;" \
                 "let it finish (or set KILN_DEPS_LOCK_WAIT=SECONDS) and run this again" >&2
            return 1
        fi
        if [ -z "$said" ]; then
            echo "deps: another package manager holds the lock ($(grep -m1 'lock' "$err")); waiting up to ${lock_wait} s"
            said=1
        fi
        sleep 1
        left=$((deadline - $(date +%s)))
        [ "$left" -gt 0 ] || left=0
    done
}

apt_get update update -q || exit 1
# $missing is split into words on purpose: one argument per package
# shellcheck disable=SC2086
apt_get "install of $missing" install -y -q --no-install-recommends $missing || exit 1
