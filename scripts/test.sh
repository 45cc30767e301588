#!/bin/sh
# test.sh: installs what is missing, builds tjit and runs the whole test suite.
# Usage: sh scripts/test.sh [BUILD_DIR [extra cmake args...]]
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
build=${1:-build}
[ $# -gt 0 ] && shift
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" -j"$jobs" --output-on-failure
