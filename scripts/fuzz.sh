#!/bin/sh
# fuzz.sh: builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) and runs each for a
# bounded time from its committed seed corpus (fuzz/corpus/<target>, copied: new inputs stay in
# the build directory). A crash, leak, UB report or timeout leaves its input in
# BUILD/findings/<target>/ and fails the script; copy it to fuzz/regress/<target>/ once fixed,
# where ctest replays it (<target>_replay).
# Usage: sh scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]   (default 60 s, every target)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-fuzz_ir_interp fuzz_ir_compile fuzz_npy fuzz_disk_cache}
build=${TJIT_FUZZ_BUILD:-build-fuzz}
cc=${CC:-$(command -v clang-14 || command -v clang)}
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTJIT_FUZZ=ON \
  -DTJIT_BUILD_TESTS=OFF -DTJIT_BUILD_EXAMPLES=OFF -DTJIT_BUILD_BENCH=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j"${TJIT_JOBS:-2}" --target $targets
status=0
for t in $targets; do
  mkdir -p "$build/corpus/$t" "$build/findings/$t"
  log="$build/findings/$t.log"
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 "$build/$t" \
      -max_total_time="$secs" -max_len=8192 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/findings/$t/" "$build/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (input in $build/findings/$t/, log $log)"
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  echo "$t: ${execs:-?} executions in ${secs} s: $result"
done
exit $status
