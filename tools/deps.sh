#!/bin/sh
# deps.sh -- installs what ds4 needs from Debian, as root or through sudo.
#   sh tools/deps.sh           build dependencies (enough for `make run`)
#   sh tools/deps.sh --test    plus what the tests use (numpy for the
#                              reference, Node.js for the SDK tests, tmux
#                              for the terminal tests, clang for UBSan/fuzz,
#                              Open MPI for the --dist tests, MPICH for the
#                              build check against the other MPI, git for
#                              the llama.cpp source bundle: ~10 s)
# The README's two set-up commands and .ci/run call this, so a fresh machine
# and CI install the same packages.  Debian packages only.
set -eu
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "deps.sh: run as root or install sudo" >&2; exit 1; }
    SUDO=sudo
fi
PKGS="build-essential pkg-config libjansson-dev libedit-dev libcurl4-openssl-dev"
if [ "${1:-}" = "--test" ]; then
    PKGS="$PKGS python3 python3-numpy clang libclang-rt-dev tmux procps curl ca-certificates git openmpi-bin libopenmpi-dev mpich libmpich-dev"
    # Node.js for the server tests: Debian's, unless a node + npm is already there
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        PKGS="$PKGS nodejs npm"
    fi
elif [ -n "${1:-}" ]; then
    echo "usage: sh tools/deps.sh [--test]" >&2; exit 2
fi
export DEBIAN_FRONTEND=noninteractive
# A machine whose last dpkg run was cut off refuses every install until the
# half-configured packages are finished; finishing them is always safe.
$SUDO dpkg --configure -a
$SUDO apt-get update
# shellcheck disable=SC2086
$SUDO apt-get install -y --no-install-recommends $PKGS
